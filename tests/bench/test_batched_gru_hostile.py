"""A hostile review of the batched GRU (bench.batched_ops.gru): a submitted graph's
``aten.gru.input`` runs it in the trusted trainer under the plain vmap level, on the runs'
physical tensors. Every call it takes must give each run aten's own GRU of that run's tensors
(to float rounding), no run's result may depend on another run's data or weights, and a call
it does not take must reach aten (which refuses it under a plain vmap level, as it refuses the
calls aten refuses one model at a time)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch import nn
from torch.func import grad, vmap

from bench import batched_ops
from bench.graph import CapturedModel
from bench.trainer import RunConfig, train
from bench.vectorized import probe, train_group
from tests.capture_helpers import close_to_rounding as _close
from tests.capture_helpers import (
    count_calls,
    no_functorch,
    no_worse_than_aten,
    runs_of,
    through_capture,
)

GRU = torch.ops.aten.gru.input
RUNS = 3
Tensors = list[torch.Tensor]


pytestmark = pytest.mark.usefixtures("one_thread")  # as in the children (tests/conftest.py)


def _weights(layers: int, biases: bool = True, width: int = 4, hidden: int = 5, seed: int = 0,
             dtype: torch.dtype = torch.float32) -> Tensors:
    """Each run's own weights, runs first, for ``layers`` one-directional layers."""
    gen = torch.Generator().manual_seed(seed)
    shapes: list[tuple[int, ...]] = []
    for layer in range(layers):
        shapes += [(RUNS, 3 * hidden, width if layer == 0 else hidden), (RUNS, 3 * hidden, hidden)]
        shapes += [(RUNS, 3 * hidden), (RUNS, 3 * hidden)] if biases else []
    return [(torch.randn(*s, generator=gen) * 0.4).to(dtype).requires_grad_(True) for s in shapes]


def _per_run(x: torch.Tensor, hx: torch.Tensor | None, weights: Sequence[torch.Tensor], *args: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """aten's GRU one run at a time (``hx`` None: zeros; a 3-D ``hx``: one state every run shares)."""
    outs, finals = [], []
    for r in range(RUNS):
        state = hx if hx is not None and hx.dim() == 3 else (hx[r] if hx is not None else None)
        assert state is not None
        out, h = GRU(x[r], state, [w[r] for w in weights], *args)
        outs.append(out)
        finals.append(h)
    return torch.stack(outs), torch.stack(finals)


def _batched(x: torch.Tensor, hx: torch.Tensor, weights: Sequence[torch.Tensor], *args: Any,
             hx_dim: int | None = 0, w_dim: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The batched form under one plain vmap level over the runs (their dimension of the state
    and of the weights ``hx_dim`` and ``w_dim``; None: one state every run shares)."""
    def one(t: torch.Tensor, h: torch.Tensor, *w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out: tuple[torch.Tensor, torch.Tensor] = batched_ops.gru(t, h, list(w), *args)
        return out
    result: tuple[torch.Tensor, torch.Tensor] = vmap(one, in_dims=(0, hx_dim, *[w_dim] * len(weights)))(x, hx, *weights)
    return result


# -- 2. calls aten answers that the batched form must answer the same --------------------------


@pytest.mark.parametrize(("batch", "width", "hidden", "layers"), [
    (2, 0, 5, 1),  # no input features: aten's gates are the biases alone
    (2, 0, 5, 2),
    (2, 4, 0, 2),  # a hidden size of 0 over two layers: the second layer's input has no features
    (0, 4, 5, 2),  # no rows (an empty chunk): an empty result
    (2, 4, 0, 1),
])
def test_empty_sizes_give_the_aten_ops_results(batch: int, width: int, hidden: int, layers: int) -> None:
    """Every size aten's GRU takes, empty ones included, gives aten's result (today a zero input
    width, or a zero hidden size feeding a second layer, raised in ``x.reshape(runs, -1, width)``:
    a view of no elements has no size to infer; the same bug the review of cf85397 fixed in
    ``_ungrouped``). Under the trainer that made the training step fail and retrain under
    vmap(grad), and a call the form accepts must never raise where aten answers."""
    x = torch.randn(RUNS, batch, 3, width)
    hx = torch.randn(RUNS, layers, batch, hidden)
    weights = _weights(layers, width=width, hidden=hidden)
    args = (True, layers, 0.0, True, False, True)
    expected = _per_run(x, hx, weights, *args)
    got = _batched(x, hx, weights, *args)
    assert all(_close(a, b) for a, b in zip(expected, got, strict=True))


# -- 1. aliasing, views, shared and expanded states: no run reaches another ---------------------


def _grads(outputs: tuple[torch.Tensor, torch.Tensor], leaves: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
    out, h = outputs
    loss = out.sin().sum() + (h * h).sum()
    return torch.autograd.grad(loss, list(leaves), allow_unused=True)


def test_one_tensor_in_several_slots_and_views_give_aten_results() -> None:
    """w_ih and w_hh one tensor, both biases one tensor, the input itself as the state, weights
    that are transposed (non-contiguous) views with the runs in another dimension: outputs and
    every gradient (accumulated over the slots) as aten's GRU one run at a time."""
    gen = torch.Generator().manual_seed(1)
    w = (torch.randn(RUNS, 15, 5, generator=gen) * 0.4).requires_grad_(True)
    b = (torch.randn(RUNS, 15, generator=gen) * 0.4).requires_grad_(True)
    x = torch.randn(RUNS, 1, 1, 5, generator=gen).requires_grad_(True)  # (batch 1, time 1, width 5) = (layers, batch, hidden)
    args = (True, 1, 0.0, True, False, True)
    expected = _per_run(x, x, [w, w, b, b], *args)
    results = []
    for outputs in (expected, _batched(x, x, [w, w, b, b], *args)):
        results.append((outputs, _grads(outputs, [w, b, x])))
    (out_a, g_a), (out_b, g_b) = results
    assert all(_close(p, q) for p, q in zip(out_a, out_b, strict=True))
    assert all(p is not None and q is not None and _close(p, q) for p, q in zip(g_a, g_b, strict=True))

    # the weights stored (3H, in, runs): the runs' dimension last, each run's weight a strided
    # view; the input time-first and not contiguous; a shared state of stride 0 (an expanded constant)
    stored = [t.detach().movedim(0, -1).contiguous().requires_grad_(True) for t in _weights(2, hidden=4)]
    xs = torch.randn(3, RUNS, 2, 4, generator=gen).transpose(0, 1)
    state = torch.zeros(1, 1, 4).expand(2, 2, 4)
    args = (True, 2, 0.0, True, False, False)
    fresh = [t.detach().movedim(-1, 0).requires_grad_(True) for t in stored]
    expected = _per_run(xs, state, fresh, *args)
    got = _batched(xs, state, stored, *args, hx_dim=None, w_dim=-1)
    assert all(_close(p, q) for p, q in zip(expected, got, strict=True))
    g_a, g_b = _grads(expected, fresh), _grads(got, stored)
    assert all(p is not None and q is not None and _close(p, q.movedim(-1, 0)) for p, q in zip(g_a, g_b, strict=True))


@pytest.mark.parametrize("shared_state", [False, True])
@pytest.mark.parametrize("poison", [math.nan, math.inf, 1e30])
def test_a_poisoned_run_leaves_the_others_bit_for_bit(poison: float, shared_state: bool) -> None:
    """Run 0's input, state and weights NaN, infinite or huge: every other run's outputs, final
    states and gradients bit for bit as with run 0 left alone (a shared state is read by every
    run, never written)."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(RUNS, 2, 4, 4, generator=gen)
    state = torch.randn(2, 2, 5, generator=gen) if shared_state else torch.randn(RUNS, 2, 2, 5, generator=gen)
    results = []
    for value in (None, poison):
        weights = _weights(2, seed=3)
        x_run, state_run = x.clone(), state.clone()
        if value is not None:
            x_run[0] = value
            with torch.no_grad():
                for w in weights:
                    w[0] = value
            if not shared_state:
                state_run[0] = value
        outputs = _batched(x_run, state_run, weights, True, 2, 0.0, True, False, True,
                           hx_dim=None if shared_state else 0)
        results.append((outputs, _grads(outputs, weights)))
    (out_a, g_a), (out_b, g_b) = results
    assert not torch.equal(out_a[0][0], out_b[0][0])
    assert all(torch.equal(p[1:], q[1:]) for p, q in zip(out_a, out_b, strict=True))
    assert all(p is not None and q is not None and torch.equal(p[1:], q[1:]) for p, q in zip(g_a, g_b, strict=True))


def test_outputs_are_fresh_tensors() -> None:
    """Zeroing the output in place leaves the final state (no view of one stack); changing the
    state in place after the call makes the backward refuse, as aten's does (the saved state is
    checked, not silently read changed)."""
    x, weights = torch.randn(RUNS, 2, 3, 4), _weights(1, biases=False)
    hx = torch.randn(RUNS, 1, 2, 5)

    def zeroed(t: torch.Tensor, h: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
        out, final = batched_ops.gru(t, h, list(w), False, 1, 0.0, True, False, True)
        out.zero_()
        return final

    expected = _per_run(x, hx, weights, False, 1, 0.0, True, False, True)[1]
    assert _close(vmap(zeroed)(x, hx, *weights), expected)

    def changed(t: torch.Tensor, h: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
        h = h * 1.0
        out, final = batched_ops.gru(t, h, list(w), False, 1, 0.0, True, False, True)
        h.mul_(2)
        return out.sum() + final.sum()

    with pytest.raises(RuntimeError, match="inplace"):
        torch.autograd.grad(vmap(changed)(x, hx.requires_grad_(True), *weights).sum(), weights)


def test_a_state_or_input_batched_at_another_level_is_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested vmap: a state (or an input) batched by another level than the weights is aten's,
    which refuses it; the weights and input at the outer level with an inner level over nothing
    of the GRU's give each run its own result."""
    handed = count_calls(monkeypatch, batched_ops, "_GRU")
    x, weights = torch.randn(RUNS, 2, 3, 4), _weights(1)
    states, inputs = torch.randn(2, 1, 2, 5), torch.randn(2, 2, 3, 4)
    args = (True, 1, 0.0, True, False, True)

    def gru(t: torch.Tensor, h: torch.Tensor, w: Sequence[torch.Tensor]) -> torch.Tensor:
        out: torch.Tensor = batched_ops.gru(t, h, list(w), *args)[0]
        return out

    with pytest.raises(RuntimeError, match="gru"):
        vmap(lambda t, *w: vmap(lambda h: gru(t, h, w))(states))(x, *weights)
    with pytest.raises(RuntimeError, match="gru"):
        vmap(lambda h, *w: vmap(lambda t: gru(t, h, w))(inputs))(torch.randn(RUNS, 1, 2, 5), *weights)
    assert len(handed) == 2
    handed.clear()
    scale = torch.tensor([1.0, -2.0])
    got = vmap(lambda t, *w: vmap(lambda s: gru(t, torch.zeros(1, 2, 5), w) * s)(scale))(x, *weights)
    expected = _per_run(x, torch.zeros(1, 2, 5), weights, *args)[0]
    assert not handed and _close(got, expected.unsqueeze(1) * scale.view(1, 2, 1, 1, 1))


def test_under_vmap_of_grad_the_call_is_the_aten_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The functorch step (vmap(grad)) wraps every argument at its grad level: the form hands
    the call to aten's decomposition, whose gradients are each run's own."""
    handed = count_calls(monkeypatch, batched_ops, "_GRU")
    x, weights, head = torch.randn(RUNS, 2, 3, 4), _weights(1), torch.randn(RUNS, 5)

    def loss(hd: torch.Tensor, t: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
        out = batched_ops.gru(t, torch.zeros(1, 2, 5), list(w), True, 1, 0.0, True, False, True)[0]
        return (out @ hd).sin().sum()

    got = vmap(grad(loss))(head, x, *[w.detach() for w in weights])
    assert handed
    expected = torch.stack([grad(loss)(head[r], x[r], *[w[r].detach() for w in weights]) for r in range(RUNS)])
    assert _close(got, expected)


# -- 3. arguments of other types and values ------------------------------------------------------

ODD = [
    {"dropout": math.nan}, {"dropout": -1.0}, {"dropout": math.inf}, {"dropout": 2}, {"dropout": True},
    {"dropout": math.nan, "train": False, "num_layers": 2}, {"dropout": 0.5, "train": False, "num_layers": 2},
    {"dropout": -0.0, "num_layers": 2}, {"dropout": 0.5, "num_layers": 2},
    {"train": 1}, {"train": 0}, {"num_layers": 1.0}, {"num_layers": True}, {"has_biases": 1},
    {"batch_first": 0}, {"bidirectional": 0}, {"bidirectional": None}, {"num_layers": 0}, {"num_layers": -1},
    {"num_layers": 2, "layers_given": 1}, {"num_layers": 1, "layers_given": 2},
]


@pytest.mark.parametrize("change", ODD, ids=[repr(c) for c in ODD])
def test_odd_arguments_are_aten_answers_or_refused(change: dict[str, Any]) -> None:
    """Each argument of another type or value (a bool-like int, a float layer count, a NaN, a
    negative or infinite dropout, a layer count that does not match the weights): the batched
    call gives aten's result one run at a time, or raises (aten's refusal, or its missing
    batching rule); never another result, and never a result where aten one run at a time
    refuses. Dropout between layers in training is random: it must reach aten, which refuses
    it under a plain vmap level."""
    args: dict[str, Any] = {"has_biases": True, "num_layers": 1, "dropout": 0.0, "train": True,
                            "bidirectional": False, "batch_first": True, "layers_given": None, **change}
    layers = args.pop("layers_given") or max(int(args["num_layers"]), 1)
    x, weights, hx = torch.randn(RUNS, 2, 3, 4), _weights(layers), torch.zeros(RUNS, layers, 2, 5)
    order = [args[k] for k in ("has_biases", "num_layers", "dropout", "train", "bidirectional", "batch_first")]
    try:
        expected: tuple[torch.Tensor, torch.Tensor] | None = _per_run(x, hx, weights, *order)
    except (RuntimeError, TypeError, ValueError, IndexError):
        expected = None
    random = args["train"] is True and args["num_layers"] == 2 and args["dropout"] not in (0, 0.0)
    try:
        got: tuple[torch.Tensor, torch.Tensor] | None = _batched(x, hx, weights, *order)
    except (RuntimeError, TypeError, ValueError, IndexError):
        got = None
    if expected is None or random:
        assert got is None
    elif got is not None:
        assert all(_close(a, b) for a, b in zip(expected, got, strict=True))


@pytest.mark.parametrize("where", ["input", "hx", "weight", "params"])
def test_a_number_or_none_where_a_tensor_goes_is_refused(where: str) -> None:
    """The schema check lets a Python number stand for a tensor (``mul.Tensor(x, 0.5)``), so a
    graph can pass one as the input, the state or a weight, or None in the weights' list: never a
    batched result (aten refuses it)."""
    x, weights, hx = torch.randn(RUNS, 2, 3, 4), [w.detach() for w in _weights(1)], torch.zeros(RUNS, 1, 2, 5)

    def call(t: torch.Tensor, h: torch.Tensor, *w: torch.Tensor) -> Any:
        params: list[Any] = list(w)
        if where == "weight":
            params[1] = 0.5
        elif where == "params":
            params[2] = None
        first: Any = 0.5 if where == "input" else t
        state: Any = 0.0 if where == "hx" else h
        return batched_ops.gru(first, state, params, True, 1, 0.0, True, False, True)

    with pytest.raises((RuntimeError, TypeError)):
        vmap(call)(x, hx, *weights)


# -- 2. dtypes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_other_float_dtypes_give_the_aten_ops_results(dtype: torch.dtype) -> None:
    """Double to float rounding; half and bfloat16 no further from double's result than a few
    of their own rounding steps beyond aten's own error."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(RUNS, 4, 6, 8, generator=gen)
    hx = torch.randn(RUNS, 2, 4, 8, generator=gen)
    weights = [w.detach() for w in _weights(2, width=8, hidden=8, seed=5)]
    args = (True, 2, 0.0, True, False, True)
    exact = _per_run(x.double(), hx.double(), [w.double() for w in weights], *args)
    cast = [w.to(dtype) for w in weights]
    aten_ = _per_run(x.to(dtype), hx.to(dtype), cast, *args)
    got = _batched(x.to(dtype), hx.to(dtype), cast, *args)
    assert all(t.dtype == dtype for t in got)
    if dtype == torch.float64:
        assert all(_close(a, b, 1e-12) for a, b in zip(aten_, got, strict=True))
        return
    no_worse_than_aten(exact, aten_, got, dtype)


@pytest.mark.parametrize("kind", ["complex", "integer", "mixed", "float8"])
def test_dtypes_aten_refuses_or_the_form_cannot_take_are_refused(kind: str) -> None:
    """A complex or integer input, a state of another dtype than the weights', a float8 GRU:
    never a batched result (aten refuses them or has no batching rule)."""
    x, weights, hx = torch.randn(RUNS, 2, 3, 4), [w.detach() for w in _weights(1)], torch.zeros(RUNS, 1, 2, 5)
    if kind == "complex":
        x, weights, hx = x.to(torch.complex64), [w.to(torch.complex64) for w in weights], hx.to(torch.complex64)
    elif kind == "integer":
        x, weights, hx = x.long(), [w.long() for w in weights], hx.long()
    elif kind == "mixed":
        hx = hx.double()
    else:
        x, weights, hx = (x.to(torch.float8_e4m3fn), [w.to(torch.float8_e4m3fn) for w in weights],
                          hx.to(torch.float8_e4m3fn))
    with pytest.raises(RuntimeError):
        _batched(x, hx, weights, True, 1, 0.0, True, False, True)


# -- 4. the trainer: captured GRUs, trained as a group ---------------------------------------------


class _Net(nn.Module):
    """A two-layer nn.GRU over time-first input (batch_first False) from a learned initial state
    (a parameter, expanded: stride 0), only its final state used; then a hand-written aten GRU
    over its outputs whose two weight slots hold one parameter and whose two bias slots another,
    its state the first GRU's last final state (batched, differentiated), its output partly used
    (the last step)."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(3, 4, num_layers=2)
        self.h0 = nn.Parameter(torch.randn(2, 1, 4) * 0.3)
        self.w = nn.Parameter(torch.randn(12, 4) * 0.3)
        self.b = nn.Parameter(torch.randn(12) * 0.1)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.transpose(0, 1)
        states, final = self.gru(seq, self.h0.expand(2, x.shape[0], 4))
        again, _ = torch.ops.aten.gru.input(states, final[-1:], [self.w, self.w, self.b, self.b], True, 1, 0.0,
                                            self.training, False, False)
        out: torch.Tensor = self.head(final[-1] + again[-1])
        return out


@pytest.fixture(scope="module")
def captured() -> CapturedModel:
    torch.manual_seed(0)
    return through_capture(_Net(), [5, 3])


def test_captured_grus_train_as_a_group_as_one_at_a_time(captured: CapturedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both captured GRUs run the batched form (no vmap(grad) fallback): the probe passes, and
    each run of a group trains as ``bench.trainer.train`` trains it alone; a group whose run 0
    diverges (a huge learning rate) leaves the other runs bit for bit as in a group without it."""
    program = captured._graphs["train"][0]
    assert [node.target for node in program.graph.nodes].count(batched_ops.gru) == 2
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(48, 5, 3, generator=gen)
    y = x[:, -1, :2] * 0.5 + 0.1
    x_eval = torch.randn(20, 5, 3, generator=gen)
    alone = [train(m, RunConfig(lr=lr, epochs=2, batch_size=16), x, y, x_eval, order_seed=5)
             for m, lr in zip(runs_of(captured, RUNS), (0.01, 0.003, 0.03), strict=True)]
    no_functorch(monkeypatch)
    assert probe(runs_of(captured, RUNS), x, y, "mse") is None
    groups = []
    for lrs in ((0.01, 0.003, 0.03), (1e12, 0.003, 0.03)):
        configs = [RunConfig(lr=lr, epochs=2, batch_size=16) for lr in lrs]
        groups.append(train_group(runs_of(captured, RUNS), configs, [(x, y, x_eval)], [0] * RUNS, [5] * RUNS))
    for a, b in zip(alone, groups[0], strict=True):
        assert not b.diverged and _close(a.predictions, b.predictions, 1e-5)
    assert not torch.equal(groups[0][0].predictions, groups[1][0].predictions)
    assert all(torch.equal(a.predictions, b.predictions) for a, b in zip(groups[0][1:], groups[1][1:], strict=True))
