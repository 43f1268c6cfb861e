"""The trainer's faster batched convolution and max-pool (bench.batched_ops) give the aten ops'
results: the pool's values and indices bit for bit, gradients and convolutions to float
rounding (another kernel sums in another order), on every path a captured graph runs."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.func import grad, vmap

from bench import batched_ops
from bench.graph import build_graph
from tests.capture_helpers import capture_docs, count_calls, no_functorch

aten = torch.ops.aten
POOL, CONV = aten.max_pool2d_with_indices.default, aten.conv2d.default
# (kernel, stride, padding, dilation, ceil_mode): vision's baseline, its example's overlapping
# windows, padding, dilation and ceil_mode
SETTINGS = [
    ([2, 2], [2, 2], [0, 0], [1, 1], False),
    ([2, 2], [1, 1], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([2, 2], [2, 2], [0, 0], [2, 2], False),
    ([3, 3], [2, 2], [0, 0], [1, 1], True),
]
RUNS = 4


def _inputs(ties: bool, channels: int = 3) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(RUNS, 6, channels, 9, 9, generator=gen)  # (runs, batch, C, H, W)
    if ties:  # ReLU's zeros, and whole windows of one value
        x = x.relu().round()
    return x


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to float rounding: the largest difference a millionth of the largest value."""
    a, b = a.detach(), b.detach()
    return a.shape == b.shape and float((a - b).abs().max()) <= 1e-6 * max(float(a.abs().max()), 1.0)


def _block(conv: Any, pool: Any, groups: int, setting: tuple[Any, ...]) -> Any:
    """conv -> relu -> pool -> conv, and the pool's indices into the result (both outputs used)."""
    def run(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        h = aten.relu.default(conv(x, w1, b1, [1, 1], [1, 1], [1, 1], groups))
        values, indices = pool(h, *setting)
        values = values * (1 + indices.float() / 1000)
        return conv(values, w2, None, [2, 2], [1, 1]).flatten(1).sum(1)
    return run


def _weights(channels: int, groups: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    shapes = [(RUNS, 8, channels // groups, 3, 3), (RUNS, 8), (RUNS, 5, 8, 3, 3)]
    return [(torch.randn(*s, generator=gen) * 0.3).requires_grad_(True) for s in shapes]


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("setting", SETTINGS)
def test_a_batched_training_step_gives_the_aten_ops_results(setting: tuple[Any, ...], ties: bool) -> None:
    x = _inputs(ties)
    results = []
    for conv, pool in ((CONV, POOL), (batched_ops.conv2d, batched_ops.max_pool2d_with_indices)):
        weights = _weights(3, 1)
        out = vmap(_block(conv, pool, 1, setting))(x, *weights)
        grads = torch.autograd.grad((out * out).sum(), weights)
        results.append((out.detach(), grads))
    (out_a, g_a), (out_b, g_b) = results
    assert _close(out_a, out_b) and all(_close(a, b) for a, b in zip(g_a, g_b, strict=True))
    plain = vmap(lambda t: POOL(t, *setting))(x)
    fast = vmap(lambda t: batched_ops.max_pool2d_with_indices(t, *setting))(x)
    assert all(torch.equal(a, b) for a, b in zip(plain, fast, strict=True))  # indices too, ties included


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_grouped_and_depthwise_convolutions_under_vmap(groups: int) -> None:
    x = _inputs(False, channels=4)
    weights = _weights(4, groups)
    ref = vmap(_block(CONV, POOL, groups, SETTINGS[0]))(x, *weights)
    fast = vmap(_block(batched_ops.conv2d, batched_ops.max_pool2d_with_indices, groups, SETTINGS[0]))(x, *weights)
    assert _close(ref, fast)
    # a weight shared by the runs (not batched), and an unbatched input: the aten op's own rules
    w = weights[0][0].detach()
    assert _close(vmap(lambda t: CONV(t, w, None, [1, 1], [1, 1], [1, 1], groups))(x),
                  vmap(lambda t: batched_ops.conv2d(t, w, None, [1, 1], [1, 1], [1, 1], groups))(x))
    assert _close(vmap(lambda w_: CONV(x[0], w_, None, [1, 1], [1, 1], [1, 1], groups))(weights[0].detach()),
                  vmap(lambda w_: batched_ops.conv2d(x[0], w_, None, [1, 1], [1, 1], [1, 1], groups))(weights[0].detach()))


@pytest.mark.parametrize("setting", SETTINGS[:2])
def test_the_other_paths_are_the_aten_ops(setting: tuple[Any, ...]) -> None:
    x = _inputs(ties=True)
    weights = [w.detach() for w in _weights(3, 1)]

    def loss(conv: Any, pool: Any) -> Any:
        return lambda w1, b1, w2, x_: (_block(conv, pool, 1, setting)(x_, w1, b1, w2) ** 2).sum()

    # vmap(grad(...)): the trainer's path for composite ops (a grad transform inside vmap)
    ref = vmap(grad(loss(CONV, POOL), argnums=(0, 1, 2)))(*weights, x)
    fast = vmap(grad(loss(batched_ops.conv2d, batched_ops.max_pool2d_with_indices), argnums=(0, 1, 2)))(*weights, x)
    assert all(torch.equal(a, b) for a, b in zip(ref, fast, strict=True))
    # one model at a time, and a 3-D (unbatched) input under vmap
    one = [w[0] for w in weights]
    assert torch.equal(_block(CONV, POOL, 1, setting)(x[0], *one),
                       _block(batched_ops.conv2d, batched_ops.max_pool2d_with_indices, 1, setting)(x[0], *one))
    three_d = x[:, 0]
    assert all(torch.equal(a, b) for a, b in zip(
        vmap(lambda t: POOL(t, *setting))(three_d),
        vmap(lambda t: batched_ops.max_pool2d_with_indices(t, *setting))(three_d), strict=True))
    assert torch.equal(vmap(lambda t: aten.max_pool2d.default(t, *setting))(x),
                       vmap(lambda t: batched_ops.max_pool2d(t, *setting))(x))


def test_a_captured_cnn_runs_in_the_faster_forms() -> None:
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 3))
    docs, _ = capture_docs(model, [1, 8, 8])
    program, _ = build_graph(docs["train"], torch.device("cpu"))
    # (a guarded op's faster form runs behind its guard: the form is the guard's __wrapped__)
    ops = [getattr(node.target, "__wrapped__", node.target) for node in program.graph.nodes if node.op == "call_function"]
    assert batched_ops.conv2d in ops and batched_ops.max_pool2d in ops
    assert not any(op in batched_ops.FASTER for op in ops)


# (in channels, out channels, length, kernel, stride, padding, dilation, groups): dynamics'
# circular CNN (its 1x1 head too), a strided grouped one, a dilated depthwise one
CONV1D = [(8, 22, 20, 5, 1, 0, 1, 1), (22, 1, 16, 1, 1, 0, 1, 1), (22, 22, 20, 5, 2, 2, 1, 2), (4, 4, 12, 3, 1, 1, 2, 4)]


@pytest.mark.parametrize("shape", CONV1D)
def test_a_batched_1d_convolution_gives_the_aten_ops_results(shape: tuple[int, ...]) -> None:
    channels, out, length, kernel, stride, padding, dilation, groups = shape
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(RUNS, 6, channels, length, generator=gen)
    results = []
    for conv in (aten.conv1d.default, batched_ops.conv1d):
        w = torch.randn(RUNS, out, channels // groups, kernel, generator=torch.Generator().manual_seed(3)).requires_grad_()
        b = torch.randn(RUNS, out, generator=torch.Generator().manual_seed(4)).requires_grad_()

        def run(x_: torch.Tensor, w_: torch.Tensor, b_: torch.Tensor, conv: Any = conv) -> torch.Tensor:
            padded = torch.nn.functional.pad(x_, (2, 2), mode="circular")  # as the circular CNN's
            return torch.nn.functional.gelu(conv(padded, w_, b_, [stride], [padding], [dilation], groups))

        y = vmap(run)(x, w, b)
        results.append((y.detach(), torch.autograd.grad((y * y).sum(), [w, b])))
    (y_a, g_a), (y_b, g_b) = results
    assert _close(y_a, y_b) and all(_close(a, b) for a, b in zip(g_a, g_b, strict=True))
    w0 = torch.randn(out, channels // groups, kernel, generator=gen)  # a weight the runs share: aten's own rule
    assert torch.equal(vmap(lambda t: aten.conv1d.default(t, w0, None, [stride], [padding], [dilation], groups))(x),
                       vmap(lambda t: batched_ops.conv1d(t, w0, None, [stride], [padding], [dilation], groups))(x))


def test_a_1d_convolutions_arguments_in_another_form_are_the_aten_ops_to_judge() -> None:
    x, w = torch.randn(RUNS, 2, 3, 10), torch.randn(RUNS, 4, 3, 3)
    for conv in (aten.conv1d.default, batched_ops.conv1d):
        for stride in ([1, 1], 2):  # two strides, a plain int: aten refuses them, so does the batched form
            with pytest.raises(RuntimeError):
                vmap(lambda t, v, c=conv, s=stride: c(t, v, None, s))(x, w)
    # a bool, which aten takes as 1: judged by aten itself, the same result
    assert torch.equal(vmap(lambda t, v: aten.conv1d.default(t, v, None, [True]))(x, w),
                       vmap(lambda t, v: batched_ops.conv1d(t, v, None, [True]))(x, w))


def test_no_run_reaches_another() -> None:
    """Run 0's input and weights changed a hundredfold: every other run's outputs and gradients
    stay bit for bit (a review's check of the grouped layout, through conv, pool and conv)."""
    results = []
    for scale in (1.0, 100.0):
        x = _inputs(False).clone()
        weights = [w.detach().clone() for w in _weights(3, 1)]
        x[0] *= scale
        for w in weights:
            w[0] *= scale
        weights = [w.requires_grad_() for w in weights]
        out = vmap(_block(batched_ops.conv2d, batched_ops.max_pool2d_with_indices, 1, SETTINGS[1]))(x, *weights)
        results.append((out.detach(), torch.autograd.grad((out * out).sum(), weights)))
    (out_a, g_a), (out_b, g_b) = results
    assert not torch.equal(out_a[0], out_b[0]) and torch.equal(out_a[1:], out_b[1:])
    assert all(torch.equal(a[1:], b[1:]) for a, b in zip(g_a, g_b, strict=True))


def test_what_aten_refuses_or_answers_empty_the_batched_forms_do_too() -> None:
    """A review's cases: a bias of another rank is aten's to refuse (a flatten had accepted it);
    no rows give an empty result (a view of no rows had raised); a pool's input by aten's keyword."""
    x, w = _inputs(False), torch.randn(RUNS, 8, 3, 3, 3)
    for conv in (CONV, batched_ops.conv2d):
        with pytest.raises(RuntimeError):
            vmap(lambda t, v, c=conv: c(t, v, torch.ones(2, 4)))(x, w)
    empty = x[:, :0]
    assert vmap(lambda t, v: batched_ops.conv2d(t, v, None, [1, 1], [1, 1]))(empty, w).shape == (RUNS, 0, 8, 9, 9)
    assert vmap(lambda t: batched_ops.max_pool2d(t, [2, 2]))(empty).shape == (RUNS, 0, 3, 4, 4)
    assert torch.equal(vmap(lambda t: aten.max_pool2d.default(self=t, kernel_size=[2, 2]))(x),
                       vmap(lambda t: batched_ops.max_pool2d(self=t, kernel_size=[2, 2]))(x))


def test_a_tensor_off_the_cpu_gets_the_aten_op() -> None:
    """The grouped forms are measured and tested on the CPU's kernels only (a GPU worker's CUDA
    kernels: aten's own rules); a meta tensor stands in for a device here."""
    x, w = torch.randn(RUNS, 2, 3, 8, 8, device="meta"), torch.randn(RUNS, 4, 3, 3, 3, device="meta")
    seen: list[bool] = []
    vmap(lambda t: seen.append(batched_ops._plain_batched(t)) or t)(x)
    assert seen == [False]
    assert vmap(lambda t, v: batched_ops.conv2d(t, v))(x, w).shape == vmap(lambda t, v: CONV(t, v))(x, w).shape


def test_a_model_that_reads_its_batch_size_trains_under_plain_vmap() -> None:
    """``x.view(x.size(0), -1)`` captures ``aten.sym_size.int``, which has no batching rule: the
    training step fell back to ``vmap(grad(...))`` (a review). Run by the graph's interpreter, the
    batched model gives each run's own outputs under plain vmap."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.head = nn.Conv2d(1, 4, 3, padding=1), nn.Linear(64, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.nn.functional.max_pool2d(self.conv(x).relu(), 2)
            return self.head(h.view(h.size(0), -1))

    docs, tensors = capture_docs(Net(), [1, 8, 8])
    assert any(n.get("target") == "aten.sym_size.int" for n in docs["train"]["nodes"])
    program, signature = build_graph(docs["train"], torch.device("cpu"))
    names = [target for kind, target in signature.inputs if kind != "user"]
    values = [torch.stack([torch.from_numpy(tensors[n])] * RUNS) for n in names]
    x = torch.randn(RUNS, 5, 1, 8, 8)

    def run(*args: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = program(*args)[-1]
        return out

    with pytest.raises(RuntimeError, match="sym_size"):
        vmap(lambda t: t.reshape(aten.sym_size.int(t, 0), -1))(x)  # the aten op alone
    batched = vmap(run)(*values, x)
    assert all(_close(batched[r], run(*[v[r] for v in values], x[r])) for r in range(RUNS))


GRU = aten.gru.input


def _gru_weights(layers: int, biases: bool, width: int = 3, hidden: int = 5) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    shapes: list[tuple[int, ...]] = []
    for layer in range(layers):
        shapes += [(RUNS, 3 * hidden, width if layer == 0 else hidden), (RUNS, 3 * hidden, hidden)]
        shapes += [(RUNS, 3 * hidden), (RUNS, 3 * hidden)] if biases else []
    return [(torch.randn(*s, generator=gen) * 0.4).requires_grad_(True) for s in shapes]


@pytest.mark.parametrize("shared_state", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize(("layers", "biases"), [(1, True), (1, False), (2, True), (2, False)])
def test_a_batched_gru_gives_the_aten_ops_results(layers: int, biases: bool, batch_first: bool,
                                                  shared_state: bool) -> None:
    """Outputs, final states and every gradient (the weights' and a batched state's) equal aten's
    GRU run one model at a time, to float rounding; a state every run shares is taken as it is."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(RUNS, 6, 7, 3, generator=gen)  # (runs, batch or time, time or batch, features)
    state = torch.randn(layers, 7 if not batch_first else 6, 5, generator=gen) if shared_state else \
        torch.randn(RUNS, layers, 7 if not batch_first else 6, 5, generator=gen).requires_grad_(True)

    def loss(gru: Any, x: torch.Tensor, hx: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        out, h = gru(x, hx, list(weights), biases, layers, 0.0, True, False, batch_first)
        return (out.sin().sum() + (h * h).sum()).reshape(1)

    results = []
    for form in ("aten", "batched"):
        weights = _gru_weights(layers, biases)
        if form == "aten":
            losses = torch.cat([loss(GRU, x[r], state if shared_state else state[r], *[w[r] for w in weights])
                                for r in range(RUNS)])
        else:
            losses = vmap(lambda *a: loss(batched_ops.gru, *a), in_dims=(0, None if shared_state else 0, *[0] * len(weights)))(
                x, state, *weights).squeeze(1)
        leaves = weights if shared_state else [*weights, state]
        results.append((losses.detach(), torch.autograd.grad(losses.sum(), leaves)))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert _close(loss_a, loss_b) and all(_close(a, b) for a, b in zip(grads_a, grads_b, strict=True))


def _gru_call(x: torch.Tensor, *weights: torch.Tensor, **change: Any) -> Any:
    args = {"hx": torch.zeros(1, x.shape[0], 5), "has_biases": True, "num_layers": 1, "dropout": 0.0,
            "train": True, "bidirectional": False, "batch_first": True, **change}
    return batched_ops.gru(x, args["hx"], list(weights), args["has_biases"], args["num_layers"], args["dropout"],
                           args["train"], args["bidirectional"], args["batch_first"])


def test_a_gru_the_batched_form_does_not_compute_is_the_aten_ops() -> None:
    """Another direction, dropout between layers, weights in another shape or fewer, a state of
    another size, no time steps: the aten op, which under a plain vmap level has no batching rule
    (the trainer then steps under vmap(grad)) or refuses the call itself."""
    x, weights = torch.randn(RUNS, 4, 6, 3), _gru_weights(1, True)
    assert vmap(lambda t, *w: _gru_call(t, *w)[0])(x, *weights).shape == (RUNS, 4, 6, 5)
    for change in ({"bidirectional": True}, {"num_layers": 2, "dropout": 0.5}, {"hx": torch.zeros(1, 4, 6)},
                   {"has_biases": False}, {"num_layers": 2}, {"train": 1}, {"batch_first": 1}):
        with pytest.raises(RuntimeError):
            vmap(lambda t, *w, c=change: _gru_call(t, *w, **c)[0])(x, *weights)
    with pytest.raises(RuntimeError):
        vmap(lambda t, *w: _gru_call(t, *w)[0])(x, weights[1], weights[0], *weights[2:])  # w_ih and w_hh swapped
    with pytest.raises(RuntimeError):
        vmap(lambda t, *w: _gru_call(t, *w)[0])(x[:, :, :0], *weights)  # no time steps
    one = _gru_call(x[0], *[w[0] for w in weights])  # one model at a time: aten's own result
    assert all(torch.equal(a, b) for a, b in zip(one, GRU(x[0], torch.zeros(1, 4, 5), [w[0] for w in weights],
                                                              True, 1, 0.0, True, False, True), strict=True))


def test_no_run_of_a_batched_gru_reaches_another() -> None:
    """A hundredfold change to run 0's input and weights leaves every other run's outputs, final
    states and gradients bit for bit as they were."""
    x = torch.randn(RUNS, 4, 6, 3)
    results = []
    for scale in (1.0, 100.0):
        weights = _gru_weights(2, True)
        x_run = x.clone()
        x_run[0] *= scale
        with torch.no_grad():
            for w in weights:
                w[0] *= scale
        out, h = vmap(lambda t, *w: _gru_call(t, *w, hx=torch.zeros(2, 4, 5), num_layers=2))(x_run, *weights)
        results.append((out, h, torch.autograd.grad((out.sum() + h.sum()), weights)))
    (out_a, h_a, g_a), (out_b, h_b, g_b) = results
    assert not torch.equal(out_a[0], out_b[0])
    assert torch.equal(out_a[1:], out_b[1:]) and torch.equal(h_a[1:], h_b[1:])
    assert all(torch.equal(a[1:], b[1:]) for a, b in zip(g_a, g_b, strict=True))


def test_a_captured_gru_trains_under_plain_vmap() -> None:
    """A captured nn.GRU runs in the batched form under plain vmap (the trainer's autograd step),
    where aten's GRU has no batching rule, and gives each run's own outputs."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru, self.head = nn.GRU(3, 5, num_layers=2, batch_first=True), nn.Linear(5, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            states, _ = self.gru(x)
            out: torch.Tensor = self.head(states[:, -1])
            return out

    docs, tensors = capture_docs(Net(), [6, 3])
    program, signature = build_graph(docs["train"], torch.device("cpu"))
    assert batched_ops.gru in [node.target for node in program.graph.nodes if node.op == "call_function"]
    names = [target for kind, target in signature.inputs if kind != "user"]
    gen = torch.Generator().manual_seed(5)
    values = [torch.from_numpy(tensors[n]) + 0.1 * torch.randn(RUNS, *tensors[n].shape, generator=gen) for n in names]
    x = torch.randn(RUNS, 4, 6, 3, generator=gen)

    def run(*args: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = program(*args)[-1]
        return out

    with pytest.raises(RuntimeError, match="gru"):
        vmap(lambda t, *w: GRU(t, torch.zeros(1, 4, 5), list(w), True, 1, 0.0, True, False, True)[0])(
            x, *_gru_weights(1, True))  # the aten op alone
    batched = vmap(run)(*values, x)
    assert all(_close(batched[r], run(*[v[r] for v in values], x[r])) for r in range(RUNS))


LSTM = aten.lstm.input


def _lstm_weights(layers: int, biases: bool, width: int = 3, hidden: int = 5) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(9)
    shapes: list[tuple[int, ...]] = []
    for layer in range(layers):
        shapes += [(RUNS, 4 * hidden, width if layer == 0 else hidden), (RUNS, 4 * hidden, hidden)]
        shapes += [(RUNS, 4 * hidden), (RUNS, 4 * hidden)] if biases else []
    return [(torch.randn(*s, generator=gen) * 0.4).requires_grad_(True) for s in shapes]


@pytest.mark.parametrize("shared_state", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize(("layers", "biases"), [(1, True), (1, False), (2, True), (2, False)])
def test_a_batched_lstm_gives_the_aten_ops_results(layers: int, biases: bool, batch_first: bool,
                                                   shared_state: bool) -> None:
    """Outputs, both final states and every gradient (the weights' and batched states') equal
    aten's LSTM run one model at a time, to float rounding."""
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(RUNS, 6, 7, 3, generator=gen)  # (runs, batch or time, time or batch, features)
    batch = 6 if batch_first else 7
    states = [torch.randn(layers, batch, 5, generator=gen) if shared_state else
              torch.randn(RUNS, layers, batch, 5, generator=gen).requires_grad_(True) for _ in range(2)]

    def loss(lstm: Any, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        out, h_n, c_n = lstm(x, [h, c], list(weights), biases, layers, 0.0, True, False, batch_first)
        return (out.sin().sum() + (h_n * h_n).sum() + c_n.cos().sum()).reshape(1)

    results = []
    for form in ("aten", "batched"):
        weights = _lstm_weights(layers, biases)
        if form == "aten":
            losses = torch.cat([loss(LSTM, x[r], *[s if shared_state else s[r] for s in states],
                                     *[w[r] for w in weights]) for r in range(RUNS)])
        else:
            dims = None if shared_state else 0
            losses = vmap(lambda *a: loss(batched_ops.lstm, *a), in_dims=(0, dims, dims, *[0] * len(weights)))(
                x, *states, *weights).squeeze(1)
        leaves = weights if shared_state else [*weights, *states]
        results.append((losses.detach(), torch.autograd.grad(losses.sum(), leaves)))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert _close(loss_a, loss_b) and all(_close(a, b) for a, b in zip(grads_a, grads_b, strict=True))


def test_an_lstm_the_batched_form_does_not_compute_is_the_aten_ops() -> None:
    """A projection (a fifth weight per layer), another direction, a state of another size, one
    state or three: the aten op, which has no batching rule under a plain vmap level."""
    x, weights = torch.randn(RUNS, 4, 6, 3), _lstm_weights(1, True)
    states = [torch.zeros(1, 4, 5), torch.zeros(1, 4, 5)]
    out = vmap(lambda t, *w: batched_ops.lstm(t, states, list(w), True, 1, 0.0, True, False, True)[0])(x, *weights)
    assert out.shape == (RUNS, 4, 6, 5)
    projected = [*weights, torch.randn(RUNS, 2, 5)]
    for hx, ws, bidirectional in (
        ([torch.zeros(1, 4, 2), torch.zeros(1, 4, 5)], projected, False),
        (states, weights, True),
        ([torch.zeros(1, 4, 6), torch.zeros(1, 4, 6)], weights, False),
        (states[:1], weights, False),
        ([*states, torch.zeros(1, 4, 5)], weights, False),
    ):
        with pytest.raises(RuntimeError):
            vmap(lambda t, *w, hx=hx, b=bidirectional: batched_ops.lstm(t, hx, list(w), True, 1, 0.0, True, b, True)[0])(
                x, *ws)


def test_no_run_of_a_batched_lstm_reaches_another() -> None:
    """A poisoned run (NaN input and weights) leaves every other run's outputs, states and
    gradients bit for bit as they were."""
    x = torch.randn(RUNS, 4, 6, 3)
    results = []
    for poison in (False, True):
        weights = _lstm_weights(2, True)
        x_run = x.clone()
        if poison:
            x_run[0] = math.nan
            with torch.no_grad():
                for w in weights:
                    w[0] = math.nan
        states = [torch.zeros(2, 4, 5), torch.zeros(2, 4, 5)]
        out, h, c = vmap(lambda t, *w, s=states: batched_ops.lstm(t, s, list(w), True, 2, 0.0, True, False, True))(
            x_run, *weights)
        results.append((out, h, c, torch.autograd.grad(out.sum() + h.sum() + c.sum(), weights)))
    (*values_a, g_a), (*values_b, g_b) = results
    assert bool(values_b[0][0].isnan().all())
    assert all(torch.equal(a[1:], b[1:]) for a, b in zip(values_a, values_b, strict=True))
    assert all(torch.equal(a[1:], b[1:]) for a, b in zip(g_a, g_b, strict=True))


def test_a_captured_lstm_trains_as_a_group_as_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A captured two-layer nn.LSTM runs in the batched form under plain vmap (the trainer's
    functorch step, made to fail, is never taken), and a group of its runs trains as each run
    alone does (bench.trainer.train), to float rounding."""
    from bench import vectorized
    from bench.trainer import RunConfig, train
    from tests.capture_helpers import through_capture

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm, self.head = nn.LSTM(3, 5, num_layers=2, batch_first=True), nn.Linear(5, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            states, _ = self.lstm(x)
            out: torch.Tensor = self.head(states[:, -1])
            return out

    torch.manual_seed(11)
    models = [through_capture(Net(), [6, 3]) for _ in range(3)]
    assert any(node.target is batched_ops.lstm for node in models[0]._graphs["train"][0].graph.nodes)
    gen = torch.Generator().manual_seed(12)
    x, y, x_eval = torch.randn(48, 6, 3, generator=gen), torch.randn(48, 2, generator=gen), torch.randn(9, 6, 3, generator=gen)
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the trainer fell back to vmap(grad)")

    monkeypatch.setattr(torch.func, "grad_and_value", lambda *a, **k: never)
    monkeypatch.setattr(torch.func, "vjp", never)
    assert vectorized.probe(models, x, y, "mse") is None
    config = RunConfig(lr=0.01, epochs=2, batch_size=16)
    alone = [train(copy.deepcopy(m), config, x, y, x_eval, order_seed=r) for r, m in enumerate(models)]
    group = vectorized.train_group(models, [config] * 3, [(x, y, x_eval)], [0, 0, 0], [0, 1, 2])
    assert all(_close(a.predictions, b.predictions) for a, b in zip(alone, group, strict=True))


PAD = aten.pad.default


@pytest.mark.parametrize("pads", [[2, 2], [0, 3], [1, 0], [9, 9], [0, 0]])
def test_a_batched_circular_pad_gives_the_aten_ops_results(pads: list[int]) -> None:
    """Values bit for bit (a pad copies; a pad of the whole length wraps once), gradients to float
    rounding, and the next 1-D convolution's result as aten's, through the grouped layout."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(RUNS, 5, 4, 9, generator=gen)
    assert torch.equal(vmap(lambda t: batched_ops.pad(t, pads, "circular"))(x),
                       torch.stack([PAD(x[r], pads, "circular") for r in range(RUNS)]))
    results = []
    for pad, conv in ((PAD, aten.conv1d.default), (batched_ops.pad, batched_ops.conv1d)):
        w = (torch.randn(RUNS, 6, 4, 3, generator=torch.Generator().manual_seed(7))).requires_grad_(True)
        xs = x.clone().requires_grad_(True)
        if pad is PAD:
            out = torch.stack([conv(pad(xs[r], pads, "circular"), w[r]) for r in range(RUNS)])
        else:
            out = vmap(lambda t, v: batched_ops.conv1d(batched_ops.pad(t, pads, "circular"), v))(xs, w)
        results.append((out.detach(), torch.autograd.grad((out.sin()).sum(), (xs, w))))
    (out_a, g_a), (out_b, g_b) = results
    assert _close(out_a, out_b) and all(_close(a, b) for a, b in zip(g_a, g_b, strict=True))


def test_a_pad_the_batched_form_does_not_compute_is_the_aten_ops() -> None:
    """Another mode, a value, another rank, a negative pad or one that wraps more than once: the
    aten op's result or its refusal; and one model at a time, aten's own."""
    x = torch.randn(RUNS, 5, 4, 9)
    for args in ((([1, 1], "reflect"), ([1, 2], "replicate"), ([1, 1], "constant", 0.5), ([-1, 2], "circular"),
                  ([1, 1, 1, 1], "circular"))):
        assert torch.equal(vmap(lambda t, a=args: batched_ops.pad(t, *a))(x), vmap(lambda t, a=args: PAD(t, *a))(x))
    with pytest.raises(RuntimeError):
        vmap(lambda t: batched_ops.pad(t, [10, 0], "circular"))(x)
    assert torch.equal(batched_ops.pad(x[0], [2, 2], "circular"), PAD(x[0], [2, 2], "circular"))
    y = torch.randn(RUNS, 5, 9)  # (rows, length): aten pads it as one channel
    assert torch.equal(vmap(lambda t: batched_ops.pad(t, [2, 1], "circular"))(y), vmap(lambda t: PAD(t, [2, 1], "circular"))(y))


def test_no_run_of_a_circular_pad_and_convolution_reaches_another() -> None:
    gen = torch.Generator().manual_seed(8)
    x, w = torch.randn(RUNS, 5, 4, 9, generator=gen), torch.randn(RUNS, 6, 4, 3, generator=gen)
    outs = []
    for scale in (1.0, 100.0):
        xs = x.clone()
        xs[0] *= scale
        outs.append(vmap(lambda t, v: batched_ops.conv1d(batched_ops.pad(t, [1, 1], "circular"), v))(xs, w))
    assert not torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1:], outs[1][1:])


SDPA = aten.scaled_dot_product_attention.default


def _math(fn: Any) -> Any:
    """``fn`` run with attention on the math kernel, as every child runs it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def call(*args: Any, **kwargs: Any) -> Any:
        with sdpa_kernel(SDPBackend.MATH):
            return fn(*args, **kwargs)
    return call


def _qkv(query_rows: int = 5, key_rows: int = 7, width: int = 4, heads: int = 2, seed: int = 9) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(RUNS, 3, heads, rows, width, generator=gen).requires_grad_(True)
            for rows in (query_rows, key_rows, key_rows)]


@pytest.mark.parametrize("scale", [None, 0.3, 2])
@pytest.mark.parametrize(("query_rows", "key_rows", "heads"), [(8, 8, 2), (5, 7, 1), (1, 9, 3)])
def test_batched_attention_gives_the_math_kernels_results(scale: Any, query_rows: int, key_rows: int,
                                                          heads: int) -> None:
    """Values and gradients (query, key, value) to float rounding against the math kernel one
    run at a time (what a model alone computes in a child), over rows, heads and scales."""
    results = []
    for batched in (False, True):
        q, k, v = _qkv(query_rows, key_rows, heads=heads)
        if batched:
            out = _math(vmap(lambda a, b, c: batched_ops.scaled_dot_product_attention(a, b, c, scale=scale)))(q, k, v)
        else:
            out = torch.stack([_math(SDPA)(q[r], k[r], v[r], scale=scale) for r in range(RUNS)])
        results.append((out.detach(), torch.autograd.grad(out.sin().sum(), (q, k, v))))
    (out_a, g_a), (out_b, g_b) = results
    assert _close(out_a, out_b) and all(_close(a, b) for a, b in zip(g_a, g_b, strict=True))


def test_batched_attention_broadcasts_leading_dimensions_as_aten() -> None:
    """A key and value of one head shared by the query's heads (leading dimensions broadcast, as
    the math kernel's products do)."""
    q, k, v = _qkv()
    k1, v1 = k[:, :, :1].detach(), v[:, :, :1].detach()
    ours = vmap(lambda a, b, c: batched_ops.scaled_dot_product_attention(a, b, c))(q, k1, v1)
    assert _close(ours, _math(vmap(SDPA))(q, k1, v1))


def test_a_row_of_minus_infinity_scores_attends_to_nothing_as_aten() -> None:
    """``_safe_softmax``: a query whose every score is -inf gives 0, not NaN; an infinite score
    gives aten's NaN. The rest bit for bit as the element-wise form computes it either way."""
    q, k, v = (t.detach().clone() for t in _qkv())
    k = k.abs() + 0.1
    q[:, 0, 0, 0] = -math.inf  # every score of query row 0: -inf
    q[:, 1, 0, 1] = math.inf
    ours = vmap(lambda a, b, c: batched_ops.scaled_dot_product_attention(a, b, c))(q, k, v)
    theirs = _math(vmap(SDPA))(q, k, v)
    assert torch.equal(ours[:, 0, 0, 0], torch.zeros_like(ours[:, 0, 0, 0]))
    assert torch.equal(ours.isnan(), theirs.isnan())
    assert _close(ours.nan_to_num(), theirs.nan_to_num())


def test_an_attention_the_batched_form_does_not_compute_is_the_aten_ops() -> None:
    """A mask, a causal mask, dropout, grouped heads, a scale of 0 or less, a key the runs share,
    a key and value of another rank (the runs' products would broadcast run against head: a
    review), a key of no rows, one model at a time: aten's own call, bit for bit (or its refusal)."""
    q, k, v = (t.detach() for t in _qkv(7, 7))
    mask = torch.rand(7, 7, generator=torch.Generator().manual_seed(2)) > 0.3
    for kwargs in ({"attn_mask": mask}, {"attn_mask": mask.float()}, {"is_causal": True}, {"scale": -0.5},
                   {"scale": 0.0}):
        assert torch.equal(vmap(lambda a, b, c, kw=kwargs: batched_ops.scaled_dot_product_attention(a, b, c, **kw))(q, k, v),
                           vmap(lambda a, b, c, kw=kwargs: SDPA(a, b, c, **kw))(q, k, v))
    k2, v2 = k[:, 0, 0], v[:, 0, 0]  # a key and value of fewer dimensions (broadcast by aten from the right)
    assert torch.equal(vmap(lambda a, b, c: batched_ops.scaled_dot_product_attention(a, b, c))(q, k2, v2),
                       vmap(lambda a, b, c: SDPA(a, b, c))(q, k2, v2))
    shared = k[0]
    assert torch.equal(vmap(lambda a, c: batched_ops.scaled_dot_product_attention(a, shared, c))(q, v),
                       vmap(lambda a, c: SDPA(a, shared, c))(q, v))
    assert torch.equal(batched_ops.scaled_dot_product_attention(q[0], k[0], v[0]), SDPA(q[0], k[0], v[0]))
    no_rows = vmap(lambda a, b, c: batched_ops.scaled_dot_product_attention(a, b, c))(q, k[:, :, :, :0], v[:, :, :, :0])
    assert torch.equal(no_rows, vmap(SDPA)(q, k[:, :, :, :0], v[:, :, :, :0])) and no_rows.shape == q.shape
    with pytest.raises(RuntimeError):  # aten's refusal: under vmap, dropout needs randomness="different"
        vmap(lambda a, b, c: batched_ops.scaled_dot_product_attention(a, b, c, dropout_p=0.5))(q, k, v)
    q4 = torch.randn(RUNS, 3, 4, 7, 4)  # grouped-query heads: aten's form
    assert torch.equal(vmap(lambda a, b, c: batched_ops.scaled_dot_product_attention(a, b, c, enable_gqa=True))(q4, k, v),
                       vmap(lambda a, b, c: SDPA(a, b, c, enable_gqa=True))(q4, k, v))


@pytest.mark.parametrize("poison", [math.nan, math.inf, 1e30])
def test_no_run_of_batched_attention_reaches_another(poison: float) -> None:
    """Run 0's query, key and value poisoned: every other run's outputs and gradients bit for bit."""
    results = []
    for poisoned in (False, True):
        q, k, v = (t.detach().clone() for t in _qkv())
        if poisoned:
            for t in (q, k, v):
                t[0, 1] = poison
        parts = [t.requires_grad_(True) for t in (q, k, v)]
        out = vmap(lambda a, b, c: batched_ops.scaled_dot_product_attention(a, b, c))(*parts)
        results.append((out.detach(), torch.autograd.grad(out.sum(), parts)))
    (out_a, g_a), (out_b, g_b) = results
    assert not torch.equal(out_a[0], out_b[0]) and torch.equal(out_a[1:], out_b[1:])
    assert all(torch.equal(a[1:], b[1:]) for a, b in zip(g_a, g_b, strict=True))


def test_a_captured_attention_trains_as_a_group_as_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A captured nn.MultiheadAttention block runs in the batched form under plain vmap (the
    functorch step, made to fail, is never taken), and a group of its runs trains as each run
    alone does on the math kernel (bench.trainer.train), to float rounding."""
    from bench import vectorized
    from bench.trainer import RunConfig, train
    from tests.capture_helpers import through_capture

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.attn = nn.Linear(3, 8), nn.MultiheadAttention(8, 2, batch_first=True)
            self.head = nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.embed(x)
            z = z + self.attn(z, z, z, need_weights=False)[0]
            out: torch.Tensor = self.head(z[:, -1])
            return out

    torch.manual_seed(13)
    models = [through_capture(Net(), [6, 3]) for _ in range(3)]
    assert any(node.target.__wrapped__ is batched_ops.scaled_dot_product_attention
               for node in models[0]._graphs["train"][0].graph.nodes if hasattr(node.target, "__wrapped__"))
    gen = torch.Generator().manual_seed(14)
    x, y, x_eval = torch.randn(48, 6, 3, generator=gen), torch.randn(48, 2, generator=gen), torch.randn(9, 6, 3, generator=gen)
    calls = count_calls(monkeypatch, batched_ops, "_safe_softmax")
    no_functorch(monkeypatch)
    assert vectorized.probe(models, x, y, "mse") is None and calls
    calls.clear()
    config = RunConfig(lr=0.01, epochs=2, batch_size=16)
    alone = [_math(train)(copy.deepcopy(m), config, x, y, x_eval, order_seed=r) for r, m in enumerate(models)]
    assert not calls  # one model at a time: aten's own
    group = vectorized.train_group(models, [config] * 3, [(x, y, x_eval)], [0, 0, 0], [0, 1, 2])
    assert calls and all(_close(a.predictions, b.predictions) for a, b in zip(alone, group, strict=True))
