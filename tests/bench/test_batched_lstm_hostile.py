"""A hostile review of 01a338b: the batched LSTM (``bench.batched_ops.lstm``) and the GRU's form
refactored into one recurrent form (``_rnn_shapes``, ``_rnn_batched``, ``_recurrent``, a cell per
kind). A submitted graph's ``aten.lstm.input`` runs it in the trusted trainer under the plain vmap
level, on the runs' physical tensors. Every call it takes must give each run aten's own LSTM of
that run's tensors (outputs, h_n, c_n and every gradient, to float rounding), no run's result may
depend on another run's data or weights, and a call it does not take must reach aten (which
refuses it under a plain vmap level; the trainer then steps under vmap(grad)).

aten's LSTM on a CPU in float32 (and bfloat16) is oneDNN's (``use_mkldnn`` in aten's RNN.cpp),
not the native cell the GRU and the other dtypes run: it refuses a hidden size of zero, and it
trusts the states' shapes (the native path checks them or broadcasts, as aten's ops do).

Findings, each fixed (the tests were written failing):

- a hidden size of zero: aten (oneDNN) refuses it in float32 ("could not create a primitive
  descriptor"), the batched form answered (low: the probe runs each model alone first, so such a
  group never trains batched). Fixed: ``lstm`` refuses a hidden size of zero, every dtype;
- states of one row, broadcast over the batch (a learned initial state not expanded): export
  captures them (its meta functions check no state's batch), and aten's oneDNN LSTM then writes
  and reads past them: heap corruption ("corrupted size vs. prev_size"), a segfault or garbage
  (NaN) in the trusted trainer, one model at a time and in a group (the batched form hands the
  call on; aten's vmap(grad) runs oneDNN per run). Not made by this commit (``lstm.input`` was
  allowed before it), but the LSTM's path, found here. Fixed: every call is checked as
  nn.LSTM would, and more, before aten's LSTM runs (``batched_ops._lstm_refused``). The GRU
  and the plain RNNs run aten's native cell, which checks or broadcasts safely.

Stopped: the state as a list or a tuple, each state batched or shared, h and c one tensor, weights
aliasing each other, views with the runs in another dimension, stride-0 states and inputs;
one or three states, states of other sizes, dtypes or ranks, a projection (a fifth weight per
layer: aten's, which trains under vmap(grad)), another direction, odd argument types and values,
numbers or None in a tensor's place: all handed to aten; zero rows, zero width, two layers of
either layout; float64, float16 and bfloat16; a poisoned run (NaN, inf, 1e30) leaves every other
bit for bit, gradients included; fresh outputs; nested vmap and vmap(grad) go to aten; captured
LSTMs (a learned initial (h, c) passed explicitly, one whose c_n alone is used, a projection)
train as a group as one at a time. The refactored GRU still passes its own review
(tests/bench/test_batched_gru_hostile.py) and its state as a list goes to aten.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
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

LSTM = torch.ops.aten.lstm.input
RUNS = 3
ROOT = Path(__file__).resolve().parents[2]
Tensors = list[torch.Tensor]
Result = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


pytestmark = pytest.mark.usefixtures("one_thread")  # as in the children (tests/conftest.py)


def _weights(layers: int, biases: bool = True, width: int = 4, hidden: int = 5, seed: int = 0,
             dtype: torch.dtype = torch.float32, proj: int = 0) -> Tensors:
    """Each run's own weights, runs first, for ``layers`` one-directional layers (``proj``: a
    projection's weight ``w_hr (proj, H)`` last in each layer, the next layer's input ``proj``)."""
    gen = torch.Generator().manual_seed(seed)
    shapes: list[tuple[int, ...]] = []
    out = proj or hidden
    for layer in range(layers):
        shapes += [(RUNS, 4 * hidden, width if layer == 0 else out), (RUNS, 4 * hidden, out)]
        shapes += [(RUNS, 4 * hidden), (RUNS, 4 * hidden)] if biases else []
        shapes += [(RUNS, proj, hidden)] if proj else []
    return [(torch.randn(*s, generator=gen) * 0.4).to(dtype).requires_grad_(True) for s in shapes]


def _all_close(a: Sequence[torch.Tensor | None], b: Sequence[torch.Tensor | None], rel: float = 1e-6) -> bool:
    return len(a) == len(b) and all(p is not None and q is not None and _close(p, q, rel) for p, q in zip(a, b, strict=True))


def _per_run(x: torch.Tensor, hx: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], *args: Any) -> Result:
    """aten's LSTM one run at a time; a 3-D state is one every run shares, a 4-D one each run's."""
    results = []
    for r in range(RUNS):
        states = [s if s.dim() == 3 else s[r] for s in hx]
        results.append(LSTM(x[r], states, [w[r] for w in weights], *args))
    out, h, c = (torch.stack(t) for t in zip(*results, strict=True))
    return out, h, c


def _batched(x: torch.Tensor, hx: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], *args: Any,
             w_dim: int = 0, container: type = list) -> Result:
    """The batched form under one plain vmap level over the runs (a 3-D state shared, a 4-D one
    batched at its dimension 0; the weights' runs at ``w_dim``), the state passed as ``container``."""
    dims = tuple(None if s.dim() == 3 else 0 for s in hx)

    def one(t: torch.Tensor, states: tuple[torch.Tensor, ...], *w: torch.Tensor) -> Result:
        out: Result = batched_ops.lstm(t, container(states), list(w), *args)
        return out
    result: Result = vmap(one, in_dims=(0, dims, *[w_dim] * len(weights)))(x, tuple(hx), *weights)
    return result


def _grads(outputs: Sequence[torch.Tensor], leaves: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
    out, h, c = outputs
    loss = out.sin().sum() + (h * h).sum() + c.cos().sum()
    return torch.autograd.grad(loss, list(leaves), allow_unused=True)


# -- 1. the state's forms: a list or a tuple, each batched or shared, one tensor twice -----------


@pytest.mark.parametrize("container", [list, tuple])
@pytest.mark.parametrize(("h_batched", "c_batched"), [(True, True), (True, False), (False, True), (False, False)])
def test_states_as_a_list_or_tuple_batched_or_shared_give_aten_results(
        container: type, h_batched: bool, c_batched: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hx`` as a list or a tuple, h batched and c shared or the other way round: outputs, h_n,
    c_n and the gradients of the weights, the input and both states (a shared state's summed over
    the runs) as aten's LSTM one run at a time, and the batched form computes it (no hand-off)."""
    handed = count_calls(monkeypatch, batched_ops, "_LSTM")
    layers, batch_first = (2, False) if container is tuple else (1, True)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(RUNS, 3, 2, 4, generator=gen).requires_grad_(True)
    batch = 3 if batch_first else 2
    hx = [(torch.randn(RUNS, layers, batch, 5, generator=gen) if b else torch.randn(layers, batch, 5, generator=gen))
          .requires_grad_(True) for b in (h_batched, c_batched)]
    weights = _weights(layers, biases=container is list, seed=2)
    args = (container is list, layers, 0.0, True, False, batch_first)
    leaves = [x, *hx, *weights]
    expected = _per_run(x, hx, weights, *args)
    got = _batched(x, hx, weights, *args, container=container)
    assert not handed
    assert _all_close(expected, got)
    assert _all_close(_grads(expected, leaves), _grads(got, leaves))


def test_one_tensor_in_several_slots_and_views_give_aten_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """h and c one tensor, w_ih and w_hh one tensor, both biases one tensor, the input itself as
    both states; then weights stored with the runs last (strided views), a time-first input that
    is not contiguous and of stride 0 over the runs, and shared states of stride 0 (expanded
    constants): outputs and every
    gradient (accumulated over the slots) as aten's LSTM one run at a time; the batched form
    computes every one of them."""
    handed = count_calls(monkeypatch, batched_ops, "_LSTM")
    gen = torch.Generator().manual_seed(3)
    w = (torch.randn(RUNS, 20, 5, generator=gen) * 0.4).requires_grad_(True)
    b = (torch.randn(RUNS, 20, generator=gen) * 0.4).requires_grad_(True)
    x = torch.randn(RUNS, 1, 1, 5, generator=gen).requires_grad_(True)  # (batch 1, time 1, width 5) = (layers, batch, hidden)
    args = (True, 1, 0.0, True, False, True)
    expected = _per_run(x, [x, x], [w, w, b, b], *args)
    got = _batched(x, [x, x], [w, w, b, b], *args)
    assert _all_close(expected, got)
    assert _all_close(_grads(expected, [w, b, x]), _grads(got, [w, b, x]))

    h = torch.randn(RUNS, 2, 2, 4, generator=gen).requires_grad_(True)  # one batched tensor as h and as c
    weights = _weights(2, hidden=4, seed=4)
    args = (True, 2, 0.0, True, False, True)
    xs = torch.randn(RUNS, 2, 3, 4, generator=gen)
    expected = _per_run(xs, [h, h], weights, *args)
    got = _batched(xs, [h, h], weights, *args)
    assert _all_close(expected, got)
    assert _all_close(_grads(expected, [h, *weights]), _grads(got, [h, *weights]))

    stored = [t.detach().movedim(0, -1).contiguous().requires_grad_(True) for t in _weights(2, hidden=4, seed=5)]
    fresh = [t.detach().movedim(-1, 0).requires_grad_(True) for t in stored]
    xs = torch.randn(3, 1, 2, 4, generator=gen).expand(3, RUNS, 2, 4).transpose(0, 1)  # one input, stride 0 over the runs
    states = [torch.zeros(1, 1, 4).expand(2, 2, 4), torch.full((1,), 0.3).expand(2, 2, 4)]
    args = (True, 2, 0.0, True, False, False)
    expected = _per_run(xs, states, fresh, *args)
    got = _batched(xs, states, stored, *args, w_dim=-1)
    assert _all_close(expected, got)
    grads_b = [g.movedim(-1, 0) if g is not None else None for g in _grads(got, stored)]
    assert _all_close(_grads(expected, fresh), grads_b)
    assert not handed


# -- 2. what aten takes otherwise (or refuses) is handed to it -----------------------------------


def _states(kind: str) -> Any:
    """A state aten's LSTM takes otherwise than the batched form (each run's, runs first)."""
    h, c = torch.zeros(RUNS, 1, 2, 5), torch.zeros(RUNS, 1, 2, 5)
    return {
        "one": [h], "three": [h, c, c], "none": None, "a tensor": torch.stack([h, c], 1),
        "both of another size": [torch.zeros(RUNS, 1, 2, 6), torch.zeros(RUNS, 1, 2, 6)],
        "h wider": [torch.zeros(RUNS, 1, 2, 6), c], "c wider": [h, torch.zeros(RUNS, 1, 2, 6)],
        "h narrower": [torch.zeros(RUNS, 1, 2, 2), c],
        "h float64": [h.double(), c], "c float64": [h, c.double()], "h float16": [h.half(), c],
        "h of 2 dims": [h[:, 0], c], "c of 4 dims": [h, c.unsqueeze(1)],
        "c of one row": [h, c[:, :, :1]], "both of one row": [h[:, :, :1], c[:, :, :1]],
        "h of two layers": [torch.zeros(RUNS, 2, 2, 5), c],
        "a number": [h, 0.0], "c of ints": [h, c.long()],
    }[kind]


STATE_KINDS = ["one", "three", "none", "a tensor", "both of another size", "h wider", "c wider", "h narrower",
               "h float64", "c float64", "h float16", "h of 2 dims", "c of 4 dims", "c of one row",
               "both of one row", "h of two layers", "a number", "c of ints"]


@pytest.mark.parametrize("kind", STATE_KINDS)
def test_states_of_another_number_size_or_dtype_are_handed_to_aten(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One state or three, None, one stacked tensor, states wider or narrower than the weights'
    hidden size (h narrower than c is how aten tells a projection), another dtype or rank, one
    row broadcast (aten's native cell broadcasts c, its oneDNN form writes past it: see the last
    test), another layer count, a number or integers: the batched form never computes them; it
    hands each to aten, which under the plain vmap level refuses it before any kernel runs."""
    computed = count_calls(monkeypatch, batched_ops, "_recurrent")
    x, weights = torch.randn(RUNS, 2, 3, 4), [w.detach() for w in _weights(1)]
    hx = _states(kind)
    batched_states = [s for s in hx if isinstance(s, torch.Tensor)] if isinstance(hx, list) else []
    with pytest.raises((RuntimeError, TypeError)):
        vmap(lambda t, s, *w: batched_ops.lstm(
            t, _rebuilt(hx, s), list(w), True, 1, 0.0, True, False, True))(x, tuple(batched_states), *weights)
    assert not computed


def _rebuilt(hx: Any, batched: tuple[torch.Tensor, ...]) -> Any:
    """``hx`` with its tensors replaced by the (batched) ones vmap passes in, in order."""
    if not isinstance(hx, list):
        return hx
    given = iter(batched)
    return [next(given) if isinstance(s, torch.Tensor) else s for s in hx]


def test_a_projection_or_another_direction_is_handed_to_aten_and_batches_under_vmap_of_grad(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A projection (``proj_size``: a fifth weight per layer, h of the projected size; aten tells
    it by h's size differing from c's) and a bidirectional LSTM: the batched form hands both to
    aten, which refuses them under the plain vmap level; under vmap(grad) (the trainer's retry)
    each run's gradient is aten's one run at a time. A fifth weight with h as wide as c is no
    projection to aten either: refused."""
    handed = count_calls(monkeypatch, batched_ops, "_LSTM")
    gen = torch.Generator().manual_seed(6)
    x, head = torch.randn(RUNS, 2, 3, 4, generator=gen), torch.randn(RUNS, 3, generator=gen)
    projected = [w.detach() for w in _weights(2, proj=3, seed=7)]
    twice = [w.detach() for w in _weights(1, seed=8)] + [w.detach() for w in _weights(1, seed=9)]
    forms: list[tuple[Tensors, list[torch.Tensor], bool, int]] = [
        (projected, [torch.zeros(2, 2, 3), torch.randn(2, 2, 5, generator=gen)], False, 2),
        ([*twice[:4], torch.randn(RUNS, 5, 5, generator=gen)], [torch.zeros(1, 2, 5), torch.zeros(1, 2, 5)], False, 1),
        (twice, [torch.zeros(2, 2, 5), torch.randn(2, 2, 5, generator=gen)], True, 1),
    ]
    for weights, hx, bidirectional, layers in forms:
        handed.clear()
        args = (True, layers, 0.0, True, bidirectional, True)
        with pytest.raises(RuntimeError):
            _batched(x, hx, weights, *args)
        assert handed == [1]
    for weights, hx, bidirectional, layers in (forms[0], forms[2]):
        args = (True, layers, 0.0, True, bidirectional, True)

        def loss(hd: torch.Tensor, t: torch.Tensor, *w: torch.Tensor,
                 hx: list[torch.Tensor] = hx, args: tuple[Any, ...] = args) -> torch.Tensor:
            out, _, c = batched_ops.lstm(t, hx, list(w), *args)
            return (out[..., :3] @ hd).sin().sum() + c.cos().sum()

        got = vmap(grad(loss, argnums=(0, 1, 2)))(head, x, *weights)
        expected = [torch.stack(g) for g in zip(*[grad(loss, argnums=(0, 1, 2))(head[r], x[r], *[w[r] for w in weights])
                                                   for r in range(RUNS)], strict=True)]
        assert _all_close(expected, got)


@pytest.mark.parametrize(("batch", "width", "hidden", "layers", "dtype"), [
    (2, 0, 5, 1, torch.float32),  # no input features: the gates are the biases and h's
    (2, 0, 5, 2, torch.float32),
    (0, 4, 5, 2, torch.float32),  # no rows (an empty chunk): an empty result
    (0, 4, 0, 2, torch.float32),  # a zero hidden size where aten answers: no input element (its native cell)
    (2, 0, 0, 1, torch.float32),
    (2, 4, 0, 2, torch.float64),  # or float64 (the native cell)
    (2, 4, 0, 1, torch.float64),
])
def test_empty_sizes_give_the_aten_ops_results(batch: int, width: int, hidden: int, layers: int,
                                               dtype: torch.dtype) -> None:
    """Every empty size aten's LSTM answers gives aten's result (the rows counted in
    ``_recurrent``'s reshape, the review of the GRU), both layouts' time dimension included; a
    zero hidden size may also be handed to aten (the fix of the zero-hidden bug below)."""
    must_answer = hidden > 0
    for batch_first in (True, False):
        x = torch.randn(RUNS, batch, 3, width, dtype=dtype)
        if not batch_first:
            x = x.transpose(1, 2)
        hx = [torch.randn(RUNS, layers, batch, hidden, dtype=dtype) for _ in range(2)]
        weights = _weights(layers, width=width, hidden=hidden, dtype=dtype)
        args = (True, layers, 0.0, True, False, batch_first)
        expected = _per_run(x, hx, weights, *args)
        try:
            got = _batched(x, hx, weights, *args)
        except RuntimeError:
            assert not must_answer
            continue
        assert _all_close(expected, got)
        assert _all_close(_grads(expected, weights), _grads(got, weights))


@pytest.mark.parametrize("layers", [1, 2])
def test_a_zero_hidden_size_aten_refuses_is_not_answered(layers: int) -> None:
    """A hidden size of 0 over rows that hold elements: aten's float32 LSTM is oneDNN's, which
    refuses it ("could not create a primitive descriptor"); the batched form answers (empty
    outputs) where the model one at a time raises. The probe runs each model alone first, so a
    group of them never trains batched; still a call taken that aten refuses. Fixed: ``lstm``
    refuses a hidden size of 0 in every dtype (``batched_ops._lstm_refused``)."""
    x = torch.randn(RUNS, 2, 3, 4)
    hx = [torch.zeros(RUNS, layers, 2, 0), torch.zeros(RUNS, layers, 2, 0)]
    weights = _weights(layers, hidden=0)
    args = (True, layers, 0.0, True, False, True)
    with pytest.raises(RuntimeError, match="primitive descriptor"):
        _per_run(x, hx, weights, *args)
    with pytest.raises(RuntimeError):
        _batched(x, hx, weights, *args)


ODD = [
    {"dropout": math.nan}, {"dropout": -1.0}, {"dropout": math.inf}, {"dropout": 2}, {"dropout": True},
    {"dropout": 2**70}, {"dropout": math.nan, "train": False, "num_layers": 2},
    {"dropout": 0.5, "train": False, "num_layers": 2}, {"dropout": -0.0, "num_layers": 2},
    {"dropout": 0.5, "num_layers": 2}, {"dropout": 1.0, "num_layers": 2},
    {"train": 1}, {"train": 0}, {"num_layers": 1.0}, {"num_layers": True}, {"has_biases": 1}, {"has_biases": 0},
    {"batch_first": 0}, {"bidirectional": 0}, {"bidirectional": None}, {"bidirectional": True},
    {"num_layers": 0}, {"num_layers": -1}, {"num_layers": 2, "layers_given": 1},
    {"num_layers": 1, "layers_given": 2}, {"num_layers": 3, "layers_given": 2},
]


@pytest.mark.parametrize("change", ODD, ids=[repr(c) for c in ODD])
def test_odd_arguments_are_aten_answers_or_refused(change: dict[str, Any]) -> None:
    """Each argument of another type or value (a bool-like int, a float layer count, a NaN, a
    negative, infinite or huge dropout, a direction of None, a layer count that does not match
    the weights or the states): the batched call gives aten's result one run at a time, or
    raises; never another result, and never a result where aten one run at a time refuses.
    Dropout between layers in training is random: it must reach aten. (The input has as many
    rows as steps: a layout flag of another type must not make the states' rows wrong, which
    aten's oneDNN LSTM would write past: the last test.)"""
    args: dict[str, Any] = {"has_biases": True, "num_layers": 1, "dropout": 0.0, "train": True,
                            "bidirectional": False, "batch_first": True, "layers_given": None, **change}
    layers = args.pop("layers_given") or max(int(args["num_layers"]), 1)
    x, weights = torch.randn(RUNS, 3, 3, 4), _weights(layers)
    hx = [torch.zeros(RUNS, layers, 3, 5), torch.zeros(RUNS, layers, 3, 5)]
    order = [args[k] for k in ("has_biases", "num_layers", "dropout", "train", "bidirectional", "batch_first")]
    try:
        expected: Result | None = _per_run(x, hx, weights, *order)
    except (RuntimeError, TypeError, ValueError, IndexError):
        expected = None
    random = args["train"] is True and args["num_layers"] == 2 and args["dropout"] not in (0, 0.0)
    try:
        got: Result | None = _batched(x, hx, weights, *order)
    except (RuntimeError, TypeError, ValueError, IndexError):
        got = None
    if expected is None or random:
        assert got is None
    elif got is not None:
        assert _all_close(expected, got)


@pytest.mark.parametrize("where", ["input", "weight", "params", "h"])
def test_a_number_or_none_where_a_tensor_goes_is_refused(where: str) -> None:
    """The schema check lets a Python number stand for a tensor, so a graph can pass one as the
    input, a state or a weight, or None in the weights' list: never a batched result."""
    x, weights = torch.randn(RUNS, 2, 3, 4), [w.detach() for w in _weights(1)]
    hx = torch.zeros(RUNS, 1, 2, 5)

    def call(t: torch.Tensor, h: torch.Tensor, *w: torch.Tensor) -> Any:
        params: list[Any] = list(w)
        if where == "weight":
            params[1] = 0.5
        elif where == "params":
            params[2] = None
        first: Any = 0.5 if where == "input" else t
        state: Any = 0.0 if where == "h" else h
        return batched_ops.lstm(first, [state, h], params, True, 1, 0.0, True, False, True)

    with pytest.raises((RuntimeError, TypeError)):
        vmap(call)(x, hx, *weights)


def test_the_grus_state_as_a_list_is_handed_to_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refactored GRU takes its state as one tensor only: a list of one (the LSTM's form)
    is aten's, which refuses it."""
    handed: list[int] = []
    aten_gru = batched_ops._GRU

    def counted(*args: Any) -> Any:
        handed.append(1)
        return aten_gru(*args)

    monkeypatch.setattr(batched_ops, "_GRU", counted)
    x, h = torch.randn(RUNS, 2, 3, 4), torch.zeros(RUNS, 1, 2, 5)
    weights = [torch.randn(RUNS, 15, 4), torch.randn(RUNS, 15, 5)]
    with pytest.raises((RuntimeError, TypeError)):
        vmap(lambda t, s, *w: batched_ops.gru(t, [s], list(w), False, 1, 0.0, True, False, True))(  # type: ignore[arg-type]
            x, h, *weights)
    assert handed == [1]


# -- 3. dtypes --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_other_float_dtypes_give_the_aten_ops_results(dtype: torch.dtype) -> None:
    """Double to float rounding; half and bfloat16 (aten's bfloat16 LSTM is oneDNN's, which keeps
    more precision inside) no further from double's result than a few of their own rounding
    steps beyond aten's own error."""
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(RUNS, 4, 6, 8, generator=gen)
    hx = [torch.randn(RUNS, 2, 4, 8, generator=gen), torch.randn(2, 4, 8, generator=gen)]
    weights = [w.detach() for w in _weights(2, width=8, hidden=8, seed=11)]
    args = (True, 2, 0.0, True, False, True)
    exact = _per_run(x.double(), [s.double() for s in hx], [w.double() for w in weights], *args)
    cast = [w.to(dtype) for w in weights]
    aten_ = _per_run(x.to(dtype), [s.to(dtype) for s in hx], cast, *args)
    got = _batched(x.to(dtype), [s.to(dtype) for s in hx], cast, *args)
    assert all(t.dtype == dtype for t in got)
    if dtype == torch.float64:
        assert _all_close(aten_, got, 1e-12)
        return
    no_worse_than_aten(exact, aten_, got, dtype)


@pytest.mark.parametrize("kind", ["complex", "integer", "float8", "a weight float64"])
def test_dtypes_aten_refuses_or_the_form_cannot_take_are_refused(kind: str) -> None:
    """A complex or integer LSTM, a float8 one (float8 is a floating dtype: the form takes it and
    its matrix product refuses), one weight of another dtype: never a batched result."""
    x, weights, hx = torch.randn(RUNS, 2, 3, 4), [w.detach() for w in _weights(1)], torch.zeros(RUNS, 1, 2, 5)
    if kind == "a weight float64":
        weights[3] = weights[3].double()
    else:
        dtype = {"complex": torch.complex64, "integer": torch.int64, "float8": torch.float8_e4m3fn}[kind]
        x, weights, hx = x.to(dtype), [w.to(dtype) for w in weights], hx.to(dtype)
    with pytest.raises(RuntimeError):
        _batched(x, [hx, hx], weights, True, 1, 0.0, True, False, True)


# -- 4. no run reaches another; fresh outputs; other vmap levels ----------------------------------


@pytest.mark.parametrize("states", ["batched", "shared", "h batched, c shared"])
@pytest.mark.parametrize("poison", [math.nan, math.inf, 1e30])
def test_a_poisoned_run_leaves_the_others_bit_for_bit(poison: float, states: str) -> None:
    """Run 0's input, states and weights NaN, infinite or huge (the biases folded into the
    input's gates once included): every other run's outputs, h_n, c_n and gradients bit for bit
    as with run 0 left alone (a shared state is read by every run, never written)."""
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(RUNS, 2, 4, 4, generator=gen)
    batched = {"batched": (True, True), "shared": (False, False), "h batched, c shared": (True, False)}[states]
    hx = [torch.randn(RUNS, 2, 2, 5, generator=gen) if b else torch.randn(2, 2, 5, generator=gen) for b in batched]
    results = []
    for value in (None, poison):
        weights = _weights(2, seed=13)
        x_run, hx_run = x.clone(), [s.clone() for s in hx]
        if value is not None:
            x_run[0] = value
            with torch.no_grad():
                for w in weights:
                    w[0] = value
            for s in hx_run:
                if s.dim() == 4:
                    s[0] = value
        outputs = _batched(x_run, hx_run, weights, True, 2, 0.0, True, False, True)
        results.append((outputs, _grads(outputs, weights)))
    (out_a, g_a), (out_b, g_b) = results
    assert not torch.equal(out_a[0][0], out_b[0][0])
    assert all(torch.equal(p[1:], q[1:]) for p, q in zip(out_a, out_b, strict=True))
    assert all(p is not None and q is not None and torch.equal(p[1:], q[1:]) for p, q in zip(g_a, g_b, strict=True))


def test_outputs_are_fresh_tensors_and_a_changed_state_is_caught() -> None:
    """Zeroing the output in place leaves h_n and c_n, zeroing h_n leaves c_n (no view of one
    stack); changing h or c in place after the call makes the backward refuse (the saved state
    is checked, not silently read changed)."""
    x, weights = torch.randn(RUNS, 2, 3, 4), _weights(1, biases=False)
    hx = [torch.randn(RUNS, 1, 2, 5), torch.randn(RUNS, 1, 2, 5)]
    args = (False, 1, 0.0, True, False, True)
    _, h_n, c_n = _per_run(x, hx, weights, *args)

    def zeroed(t: torch.Tensor, h: torch.Tensor, c: torch.Tensor, *w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, h_new, c_new = batched_ops.lstm(t, [h, c], list(w), *args)
        out.zero_()
        h_before = h_new.clone()
        h_new.zero_()
        return h_before, c_new

    got_h, got_c = vmap(zeroed)(x, *hx, *weights)
    assert _close(got_h, h_n) and _close(got_c, c_n)

    for which in (0, 1):
        def changed(t: torch.Tensor, h: torch.Tensor, c: torch.Tensor, *w: torch.Tensor, which: int = which) -> torch.Tensor:
            states = [h * 1.0, c * 1.0]
            out, h_new, c_new = batched_ops.lstm(t, states, list(w), *args)
            states[which].mul_(2)
            return out.sum() + h_new.sum() + c_new.sum()

        with pytest.raises(RuntimeError, match="inplace"):
            torch.autograd.grad(vmap(changed)(x, *[s.clone().requires_grad_(True) for s in hx], *weights).sum(), weights)


def test_a_state_or_input_batched_at_another_level_is_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested vmap: h, c or the input batched by another level than the weights is aten's,
    which refuses it; the weights and input at the outer level with an inner level over nothing
    of the LSTM's give each run its own result."""
    handed = count_calls(monkeypatch, batched_ops, "_LSTM")
    x, weights = torch.randn(RUNS, 2, 3, 4), _weights(1)
    states, inputs = torch.randn(2, 1, 2, 5), torch.randn(2, 2, 3, 4)
    zeros = torch.zeros(1, 2, 5)
    args = (True, 1, 0.0, True, False, True)

    def lstm(t: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w: Sequence[torch.Tensor]) -> torch.Tensor:
        out: torch.Tensor = batched_ops.lstm(t, [h, c], list(w), *args)[0]
        return out

    with pytest.raises(RuntimeError, match="lstm"):
        vmap(lambda t, *w: vmap(lambda h: lstm(t, h, zeros, w))(states))(x, *weights)
    with pytest.raises(RuntimeError, match="lstm"):
        vmap(lambda t, *w: vmap(lambda c: lstm(t, zeros, c, w))(states))(x, *weights)
    with pytest.raises(RuntimeError, match="lstm"):
        vmap(lambda h, *w: vmap(lambda t: lstm(t, h, h, w))(inputs))(torch.randn(RUNS, 1, 2, 5), *weights)
    assert len(handed) == 3
    handed.clear()
    scale = torch.tensor([1.0, -2.0])
    got = vmap(lambda t, *w: vmap(lambda s: lstm(t, zeros, zeros, w) * s)(scale))(x, *weights)
    expected = _per_run(x, [zeros, zeros], weights, *args)[0]
    assert not handed and _close(got, expected.unsqueeze(1) * scale.view(1, 2, 1, 1, 1))


def test_under_vmap_of_grad_the_call_is_the_aten_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The functorch step (vmap(grad)) wraps every argument at its grad level: the form hands
    the call to aten, whose gradients are each run's own (h and c each run's, differentiated)."""
    handed = count_calls(monkeypatch, batched_ops, "_LSTM")
    x, weights, head = torch.randn(RUNS, 2, 3, 4), _weights(1), torch.randn(RUNS, 5)
    hx = torch.randn(RUNS, 2, 1, 2, 5)

    def loss(hd: torch.Tensor, s: torch.Tensor, t: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
        out, _, c = batched_ops.lstm(t, [s[0], s[1]], list(w), True, 1, 0.0, True, False, True)
        return (out @ hd).sin().sum() + c.sum()

    got = vmap(grad(loss, argnums=(0, 1)))(head, hx, x, *[w.detach() for w in weights])
    assert handed
    expected = [torch.stack(g) for g in zip(*[grad(loss, argnums=(0, 1))(head[r], hx[r], x[r], *[w[r].detach() for w in weights])
                                               for r in range(RUNS)], strict=True)]
    assert _all_close(expected, got)


# -- 5. the trainer: captured LSTMs, trained as a group --------------------------------------------


class _Net(nn.Module):
    """A two-layer nn.LSTM over time-first input (batch_first False) from a learned initial
    (h, c) passed explicitly (parameters, expanded: stride 0), then a batch-first nn.LSTM over
    its outputs of which only c_n is used."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 4, num_layers=2)
        self.h0 = nn.Parameter(torch.randn(2, 1, 4) * 0.3)
        self.c0 = nn.Parameter(torch.randn(2, 1, 4) * 0.3)
        self.second = nn.LSTM(4, 3, batch_first=True)
        self.head = nn.Linear(7, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        states, (h, c) = self.lstm(x.transpose(0, 1), (self.h0.expand(2, batch, 4), self.c0.expand(2, batch, 4)))
        _, (_, c_last) = self.second(states.transpose(0, 1))
        out: torch.Tensor = self.head(torch.cat([h[-1] * c[-1], c_last[-1]], -1))
        return out


class _Projected(nn.Module):
    """A two-layer batch-first nn.LSTM with a projection (``proj_size``): aten's form."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 5, num_layers=2, proj_size=2, batch_first=True)
        self.head = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states, (h, c) = self.lstm(x)
        out: torch.Tensor = self.head(states[:, -1] + h[0] + c[-1, :, :2])
        return out


@pytest.fixture(scope="module")
def captured() -> CapturedModel:
    torch.manual_seed(0)
    return through_capture(_Net(), [5, 3])


@pytest.fixture(scope="module")
def projected() -> CapturedModel:
    torch.manual_seed(1)
    return through_capture(_Projected(), [5, 3])


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(48, 5, 3, generator=gen)
    return x, x[:, -1, :2] * 0.5 + 0.1, torch.randn(20, 5, 3, generator=gen)


def test_captured_lstms_train_as_a_group_as_one_at_a_time(captured: CapturedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both captured LSTMs run the batched form (no vmap(grad) fallback, no call handed to aten
    in a group): the probe passes, and
    each run of a group trains as ``bench.trainer.train`` trains it alone; a group whose run 0
    diverges (a huge learning rate) leaves the other runs bit for bit as in a group without it."""
    computed, handed = count_calls(monkeypatch, batched_ops, "_recurrent"), count_calls(monkeypatch, batched_ops, "_LSTM")
    x, y, x_eval = _data()
    lrs = (0.01, 0.003, 0.03)
    alone = [train(m, RunConfig(lr=lr, epochs=2, batch_size=16), x, y, x_eval, order_seed=5)
             for m, lr in zip(runs_of(captured, RUNS), lrs, strict=True)]
    no_functorch(monkeypatch)
    assert probe(runs_of(captured, RUNS), x, y, "mse") is None
    handed.clear()
    computed.clear()
    groups = []
    for rates in (lrs, (1e12, *lrs[1:])):
        configs = [RunConfig(lr=lr, epochs=2, batch_size=16) for lr in rates]
        groups.append(train_group(runs_of(captured, RUNS), configs, [(x, y, x_eval)], [0] * RUNS, [5] * RUNS))
    for a, b in zip(alone, groups[0], strict=True):
        assert not b.diverged and _close(a.predictions, b.predictions, 1e-5)
    assert not torch.equal(groups[0][0].predictions, groups[1][0].predictions)
    assert all(torch.equal(a.predictions, b.predictions) for a, b in zip(groups[0][1:], groups[1][1:], strict=True))
    assert computed and not handed


def test_a_captured_projection_trains_as_a_group_through_aten(projected: CapturedModel,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """nn.LSTM with ``proj_size``: the batched form hands each call to aten, the trainer's
    plain step fails and it steps under vmap(grad) (the probe still passes: aten's projected
    LSTM is its native cell, which batches there without a per-run loop), and each run trains
    as it does alone."""
    handed = count_calls(monkeypatch, batched_ops, "_LSTM")
    x, y, x_eval = _data()
    lrs = (0.01, 0.003, 0.03)
    alone = [train(m, RunConfig(lr=lr, epochs=2, batch_size=16), x, y, x_eval, order_seed=5)
             for m, lr in zip(runs_of(projected, RUNS), lrs, strict=True)]
    assert probe(runs_of(projected, RUNS), x, y, "mse") is None
    handed.clear()
    configs = [RunConfig(lr=lr, epochs=2, batch_size=16) for lr in lrs]
    group = train_group(runs_of(projected, RUNS), configs, [(x, y, x_eval)], [0] * RUNS, [5] * RUNS)
    assert handed
    for a, b in zip(alone, group, strict=True):
        assert not b.diverged and _close(a.predictions, b.predictions, 1e-5)


# -- 6. aten's oneDNN LSTM trusts the states' rows -------------------------------------------------

_ONE_ROW = r"""
import copy, sys
import torch
from torch import nn
torch.set_num_threads(1)
from bench.trainer import RunConfig
from bench.vectorized import train_group
from tests.capture_helpers import through_capture


class OneRow(nn.Module):
    # a learned initial state of one row, broadcast over the batch: h expanded, c not
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 5, batch_first=True)
        self.h0 = nn.Parameter(torch.randn(1, 1, 5) * 0.3)
        self.c0 = nn.Parameter(torch.randn(1, 1, 5) * 0.3)
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        h = self.h0.expand(1, x.shape[0], 5)
        out, _, _ = torch.ops.aten.lstm.input(x, [h, self.c0], list(self.lstm._flat_weights), True, 1, 0.0,
                                              self.training, False, True)
        return self.head(out[:, -1])


torch.manual_seed(0)
model = through_capture(OneRow(), [6, 3])
print("captured", flush=True)
x, y = torch.randn(16, 6, 3), torch.randn(16, 2)
try:
    out = model(x)
except RuntimeError:
    print("alone: refused", flush=True)
else:
    reference = copy.deepcopy(model).double()(x.double())  # aten's native cell broadcasts c
    same = bool(torch.allclose(out.double(), reference, rtol=1e-5, atol=1e-5))
    print("alone: " + ("answered as the native cell" if same else "answered otherwise"), flush=True)
try:
    config = RunConfig(lr=0.01, epochs=1, batch_size=16)
    train_group([copy.deepcopy(model) for _ in range(2)], [config] * 2, [(x, y, x)], [0, 0], [0, 1])
except Exception:
    print("group: refused", flush=True)
else:
    print("group: answered", flush=True)
"""


def test_states_of_one_row_never_reach_onednn() -> None:
    """A submitted graph calls ``aten.lstm.input`` with a learned initial c of one row (h
    expanded to the batch): export captures it (its meta functions check no state's rows), and
    in the trusted trainer aten's float32 LSTM, oneDNN's, reads and writes the state as if it had
    a row per example: heap corruption ("corrupted size vs. prev_size"), a segfault, or NaN
    outputs read from the heap, one model at a time (``bench.trainer.train``'s forward) and in a
    group (the batched form hands the call to aten; the trainer's vmap(grad) retry runs oneDNN
    per run). (A state of one row is the one mismatch a capture lets through: any other row count
    fails the dynamic batch, a wrong weight shape the meta functions.) Run in a child process.

    Fixed: every call is checked before aten's LSTM runs, as nn.LSTM's ``check_forward_args``
    does and more (``batched_ops._lstm_refused``: h ``(layers x directions, rows, proj_size or
    H)``, c ``(layers x directions, rows, H)``, every weight's shape), in ``batched_ops.lstm``,
    which every graph's ``aten.lstm.input`` node runs (``build_graph`` swaps the target for
    ``FASTER``'s entry).
    """
    done = subprocess.run([sys.executable, "-c", _ONE_ROW], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    lines = [line for line in done.stdout.splitlines() if ":" in line]
    assert done.returncode == 0, (done.returncode, done.stdout[-500:], done.stderr[-500:])
    assert lines[0] in ("alone: refused", "alone: answered as the native cell"), lines
    assert lines[1] in ("group: refused", "group: answered"), lines
