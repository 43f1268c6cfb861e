"""A hostile review of c69a526 and aee59f8.

c69a526: the batched circular pad (``bench.batched_ops.pad``) and the 1-D convolution's output left
in the grouped channels-last layout (``bench.batched_ops.conv1d``). A submitted graph's
``aten.pad.default`` and ``aten.conv1d.default`` run these in the trusted trainer under the plain
vmap level. Every call they take must give each run aten's own result of that run's tensors (the
pad's values bit for bit, the convolution to float rounding), never answer where aten refuses,
and no run's result may depend on another run's data; the ops after them read the grouped layout
(strides no per-run tensor has), so they must give aten's results too.

aee59f8: every sandboxed child computes with denormals flushed for its whole life
(``bench.child.torch_settings``), so that a graph cannot tell scoring from checking by the mode.
The flag is per thread; submitted code can flip it in the one kind of child where it runs (the
capture child), whose later work is never a trusted computation of a graph.

Findings, each fixed (the tests were written failing; each docstring says how):

- ``conv1d`` (and ``conv2d``) over a zero-channel input raise in ``_grouped_conv``'s
  ``w.reshape(-1, ...)`` (a view of no elements has no size to infer) where aten answers;
- ``view_as_complex`` (and a hand-written ``view_as``) after the batched pad or 1-D convolution
  raise where aten answers: their outputs' last dimension no longer has stride 1 per run (before
  c69a526 both gave per-run contiguous tensors). A captured model with a complex view after a
  circular convolution batched before c69a526; now its plain step fails, the vmap(grad) retry
  hits a PyTorch internal assert, and every run trains one at a time;
- ``torch_settings``' docstring names a test file that does not exist.

Stopped: every pad argument, dtype, layout and size; the odd convolutions; no run reaches
another (NaN, inf, 1e30 in one run, outputs and gradients); forty ops reading the grouped layout;
captured circular CNNs trained as a group as one at a time; the denormal mode in every stage that
computes a graph (no thread predates the flag, later threads inherit it; submitted code can
turn it off only in a capture child, which never scores, predicts alone or probes).
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import grad, vmap

from bench import batched_ops
from bench import wire_names as wire
from bench.errors import BenchError
from bench.graph import CapturedModel
from bench.trainer import RunConfig, train
from bench.vectorized import probe, train_group
from tests.capture_helpers import count_calls, no_functorch, runs_of, through_capture

aten = torch.ops.aten
PAD, CONV1D = aten.pad.default, aten.conv1d.default
RUNS = 3
ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("one_thread")  # as in the children (tests/conftest.py)


def _try(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(), None
    except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError) as exc:
        return None, exc


def _close(a: torch.Tensor, b: torch.Tensor, rel: float = 1e-5) -> bool:
    """Equal to float rounding, shapes and dtypes included."""
    a, b = a.detach(), b.detach()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        return torch.equal(a, b)
    return float((a - b).abs().double().max()) <= rel * max(float(a.abs().double().max()), 1.0)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, to compare bit for bit (-0.0, NaN payloads)."""
    return t.detach().reshape(-1).contiguous().view(torch.uint8)


def _per_run(fn: Callable[..., Any], *tensors: torch.Tensor) -> torch.Tensor:
    return torch.stack([fn(*(t[r] for t in tensors)) for r in range(RUNS)])


# -- 1. the pad: every argument aten takes or refuses ---------------------------------------------

ODD_PADS: list[tuple[tuple[int, ...], Any, Any, Any]] = [
    # (a run's shape, pad, mode, value)
    ((5, 4, 9), [0, 0], "circular", None),
    ((5, 4, 9), [9, 9], "circular", None),  # the whole length: wraps once
    ((5, 4, 9), [10, 0], "circular", None),  # L + 1: aten's refusal
    ((5, 4, 9), [0, 10], "circular", None),
    ((5, 4, 9), [-1, 2], "circular", None),  # negative: a crop, aten's
    ((5, 4, 9), [-9, 0], "circular", None),
    ((5, 4, 9), [-10, 1], "circular", None),
    ((5, 4, 9), [2**40, 0], "circular", None),
    ((5, 4, 9), [True, 1], "circular", None),  # a bool for an int: aten's to judge
    ((5, 4, 9), [False, True], "circular", None),
    ((5, 4, 9), [1.0, 1], "circular", None),  # a float: refused
    ((5, 4, 9), [1, 1.5], "circular", None),
    ((5, 4, 9), (2, 1), "circular", None),  # a tuple: the fast path too
    ((5, 4, 9), [1], "circular", None),
    ((5, 4, 9), [1, 1, 1, 1], "circular", None),  # two dimensions: aten's
    ((5, 4, 9), [1, 1, 1, 1, 1, 1], "circular", None),
    ((5, 4, 9), [1, 1], "Circular", None),
    ((5, 4, 9), [1, 1], "circular ", None),
    ((5, 4, 9), [1, 1], "reflect", None),
    ((5, 4, 9), [1, 1], "replicate", None),
    ((5, 4, 9), [1, 1], "constant", None),
    ((5, 4, 9), [1, 1], "constant", 0.5),
    ((5, 4, 9), [1, 1], "circular", 0.0),  # aten takes a zero value in circular mode
    ((5, 4, 9), [1, 1], "circular", 0),
    ((5, 4, 9), [1, 1], "circular", 1.0),  # and refuses any other
    ((5, 4, 9), [1, 1], "circular", math.nan),
    ((5, 4, 9), [1, 1], "circular", True),
    ((5, 4, 0), [0, 0], "circular", None),  # zero length
    ((5, 4, 0), [1, 0], "circular", None),
    ((5, 0, 9), [2, 1], "circular", None),  # zero channels
    ((0, 4, 9), [2, 1], "circular", None),  # zero rows
    ((0, 0, 0), [0, 0], "circular", None),
    ((5, 1, 1), [1, 1], "circular", None),
    ((9,), [2, 1], "circular", None),  # 1-D: refused
    ((4, 9), [2, 1], "circular", None),  # 2-D: aten pads it as one channel
    ((2, 5, 4, 9), [2, 1], "circular", None),  # 4-D: aten's refusal for one dimension
    ((2, 5, 4, 9), [2, 1, 1, 1], "circular", None),
    ((1, 2, 5, 4, 9), [2, 1, 1, 1, 1, 0], "circular", None),
]


@pytest.mark.parametrize(("shape", "pads", "mode", "value"), ODD_PADS, ids=[repr(c[1:]) + str(c[0]) for c in ODD_PADS])
def test_every_pad_is_aten_s_result_bit_for_bit_or_its_refusal(shape: tuple[int, ...], pads: Any, mode: Any,
                                                                 value: Any) -> None:
    """Each pad, mode and value (bools, floats, negative, whole-length, too long, empty sizes, other
    ranks): the batched call gives aten's per-run result bit for bit, or raises where aten raises;
    never a result where aten refuses, never a refusal where aten answers."""
    x = torch.randn(RUNS, *shape, generator=torch.Generator().manual_seed(0))
    expected, refused = _try(lambda: _per_run(lambda t: PAD(t, pads, mode, value), x))
    got, error = _try(lambda: vmap(lambda t: batched_ops.pad(t, pads, mode, value))(x))
    if refused is not None:
        assert error is not None, f"aten refuses ({refused}), the batched form answers"
        return
    assert error is None, f"aten answers, the batched form raises: {error}"
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert torch.equal(_bits(got), _bits(expected))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.complex64,
                                   torch.int64, torch.int8, torch.uint8, torch.bool])
def test_a_pad_of_any_dtype_copies_the_bits(dtype: torch.dtype) -> None:
    """Bit for bit in every dtype: -0.0, NaNs of other payloads, infinities and denormals (a pad
    does no arithmetic, so the process's denormal mode changes nothing either)."""
    x = (torch.randn(RUNS, 5, 4, 9, generator=torch.Generator().manual_seed(1)) * 50).to(dtype)
    if dtype.is_floating_point:
        raw = x.view(torch.uint8 if dtype.itemsize == 1 else {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize])
        special = torch.tensor([-0.0, math.inf, -math.inf, torch.finfo(dtype).tiny / 4], dtype=dtype)
        x[:, 0, 0, :4] = special
        raw[:, 1, 0, 0] = -1  # a NaN with every payload bit set (all ones)
    expected = _per_run(lambda t: PAD(t, [3, 2], "circular"), x)
    got = vmap(lambda t: batched_ops.pad(t, [3, 2], "circular"))(x)
    assert got.dtype == dtype and torch.equal(_bits(got), _bits(expected))


def _layouts() -> dict[str, tuple[torch.Tensor, int]]:
    """(physical tensor, its runs' dimension): runs first, in the middle, last; a transposed
    (non-contiguous) one; one tensor every run shares (stride 0, as ``bench.vectorized.probe``
    gives the input); a strided slice; the grouped layout of a batched 1-D convolution."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(RUNS, 5, 4, 9, generator=gen)
    w = torch.randn(RUNS, 4, 4, 3, generator=gen)
    grouped = vmap(lambda t, v: batched_ops.conv1d(t, v, None, [1], [1]))(x, w)  # (runs, 5, 4, 9), physically grouped
    return {
        "runs first": (x, 0),
        "runs second": (x.movedim(0, 1).contiguous(), 1),
        "runs last": (x.movedim(0, -1).contiguous(), 3),
        "transposed": (torch.randn(RUNS, 5, 9, 4, generator=gen).transpose(-1, -2), 0),
        "shared (stride 0)": (torch.randn(5, 4, 9, generator=gen).expand(RUNS, 5, 4, 9), 0),
        "strided slice": (torch.randn(RUNS, 10, 4, 19, generator=gen)[:, ::2, :, ::2], 0),
        "grouped (a 1-D convolution's output)": (grouped, 0),
    }


@pytest.mark.parametrize("layout", list(_layouts()))
@pytest.mark.parametrize("pads", [[2, 3], [0, 9], [9, 0], [0, 0]])
def test_a_pad_of_any_layout_and_a_pad_of_a_pad_are_aten_s(layout: str, pads: list[int]) -> None:
    """Every batched dimension and memory layout, and a pad of the padded tensor (its grouped
    memory order) by up to its whole new length: aten's values bit for bit."""
    physical, dim = _layouts()[layout]
    runs = physical.movedim(dim, 0)
    twice = [pads[0] + 4, pads[1] + 9]  # within the first pad's output length (9 + its pads)
    expected = _per_run(lambda t: PAD(PAD(t, pads, "circular"), twice, "circular"), runs)
    got = vmap(lambda t: batched_ops.pad(batched_ops.pad(t, pads, "circular"), twice, "circular"), in_dims=dim)(physical)
    assert torch.equal(got, expected)


def test_the_fast_path_is_taken_only_under_one_plain_vmap_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """A circular 3-D pad under one plain vmap level skips aten; nested levels, vmap(grad), a
    tensor off the CPU (meta), one model at a time: aten's own op, with aten's results."""
    handed = count_calls(monkeypatch, batched_ops, "_PAD")
    gen = torch.Generator().manual_seed(3)
    x, inner = torch.randn(RUNS, 5, 4, 9, generator=gen), torch.randn(2, 5, 4, 9, generator=gen)
    vmap(lambda t: batched_ops.pad(t, [1, 2], "circular"))(x)
    assert not handed

    # the input batched by an inner level over the runs' level: aten, each (run, inner) its own
    both = vmap(lambda t: vmap(lambda s: batched_ops.pad(t * s, [1, 2], "circular"))(inner))(x)
    assert handed
    assert torch.equal(both, torch.stack([torch.stack([PAD(x[r] * inner[i], [1, 2], "circular") for i in range(2)])
                                          for r in range(RUNS)]))
    handed.clear()
    # an inner level over nothing the pad reads: the outer level's plain tensor, the fast path
    scale = torch.tensor([1.0, -2.0])
    outer = vmap(lambda t: vmap(lambda s: batched_ops.pad(t, [1, 2], "circular") * s)(scale))(x)
    assert not handed
    assert torch.equal(outer, _per_run(lambda t: PAD(t, [1, 2], "circular"), x).unsqueeze(1) * scale.view(1, 2, 1, 1, 1))

    def loss(t: torch.Tensor) -> torch.Tensor:
        return batched_ops.pad(t, [1, 2], "circular").sin().sum()

    grads = vmap(grad(loss))(x)
    assert handed
    def aten_loss(t: torch.Tensor) -> torch.Tensor:
        return PAD(t, [1, 2], "circular").sin().sum()

    assert _close(grads, _per_run(grad(aten_loss), x))
    handed.clear()
    assert vmap(lambda t: batched_ops.pad(t, [1, 2], "circular"))(torch.empty(RUNS, 5, 4, 9, device="meta")).shape == (RUNS, 5, 4, 12)
    assert handed
    handed.clear()
    assert torch.equal(batched_ops.pad(x[0], [1, 2], "circular"), PAD(x[0], [1, 2], "circular")) and handed


def test_the_pad_s_output_is_a_fresh_tensor() -> None:
    """In place on the output leaves the input (and other runs) alone; in place on the input
    after the call leaves the output; as aten's copy does, for a pad of nothing too."""
    for pads in ([0, 0], [2, 1]):
        x = torch.randn(RUNS, 5, 4, 9, generator=torch.Generator().manual_seed(4))
        before = x.clone()

        def inplace(t: torch.Tensor, p: list[int] = pads) -> torch.Tensor:
            out = batched_ops.pad(t, p, "circular")
            out.mul_(0).add_(7)
            return out

        assert torch.equal(vmap(inplace)(x), torch.full((RUNS, 5, 4, 9 + sum(pads)), 7.0))
        assert torch.equal(x, before)
        out = vmap(lambda t, p=pads: batched_ops.pad(t, p, "circular"))(x)
        x.mul_(-1)
        assert torch.equal(out, _per_run(lambda t, p=pads: PAD(t, p, "circular"), before))


# -- 2. no run reaches another --------------------------------------------------------------------


def _chain_weights(seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shapes = [(RUNS, 6, 4, 3), (RUNS, 6), (RUNS, 5, 6, 5), (RUNS, 2, 5 * 9)]
    return [(torch.randn(*s, generator=gen) * 0.3).requires_grad_(True) for s in shapes]


def _chain(pad: Any, conv: Any) -> Callable[..., torch.Tensor]:
    """pad -> conv1d (+bias) -> GELU -> pad of more than the kernel -> conv1d -> flatten -> linear:
    dynamics' circular CNN with a dense head over the grouped layout."""
    def run(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        h = aten.gelu.default(conv(pad(x, [1, 1], "circular"), w1, b1, [1], [0], [1], 1))
        h = conv(pad(h, [4, 0], "circular"), w2, None, [1], [0], [1], 1)
        return aten.linear.default(aten.reshape.default(h, [h.shape[0], -1]), head)
    return run


@pytest.mark.parametrize("poison", [math.nan, math.inf, 1e30])
def test_a_poisoned_run_leaves_the_others_bit_for_bit(poison: float) -> None:
    """Run 0's input and every weight NaN, infinite or huge: every other run's outputs and
    gradients (of the input and the weights) bit for bit as with run 0 left alone; and the
    batched results are aten's one run at a time (to float rounding)."""
    x = torch.randn(RUNS, 3, 4, 9, generator=torch.Generator().manual_seed(5))
    results = []
    for value in (None, poison):
        weights = _chain_weights(6)
        xs = x.clone()
        if value is not None:
            xs[0] = value
            with torch.no_grad():
                for w in weights:
                    w[0] = value
        xs.requires_grad_(True)
        out = vmap(_chain(batched_ops.pad, batched_ops.conv1d))(xs, *weights)
        results.append((out.detach(), torch.autograd.grad(out.sin().sum(), [xs, *weights])))
    (out_a, g_a), (out_b, g_b) = results
    assert not torch.equal(out_a[0], out_b[0])
    assert torch.equal(out_a[1:], out_b[1:])
    assert all(torch.equal(p[1:], q[1:]) for p, q in zip(g_a, g_b, strict=True))

    weights, xs = _chain_weights(6), x.clone().requires_grad_(True)
    expected = torch.stack([_chain(PAD, CONV1D)(xs[r], *[w[r] for w in weights]) for r in range(RUNS)])
    g_expected = torch.autograd.grad(expected.sin().sum(), [xs, *weights])
    assert _close(out_a, expected) and all(_close(p, q) for p, q in zip(g_expected, g_a, strict=True))


def test_a_padded_grouped_tensor_feeds_a_2d_convolution_and_a_linear_as_aten_s() -> None:
    """The pad's grouped memory order read by the batched 2-D convolution (its height one) and by
    a product with each run's own matrix: aten's results one run at a time, gradients too."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(RUNS, 5, 4, 9, generator=gen).requires_grad_(True)
    w = (torch.randn(RUNS, 6, 4, 1, 3, generator=gen) * 0.3).requires_grad_(True)
    m = (torch.randn(RUNS, 12, 3, generator=gen) * 0.3).requires_grad_(True)

    def run(conv2d: Any, pad: Any) -> Callable[..., torch.Tensor]:
        def one(t: torch.Tensor, v: torch.Tensor, mm: torch.Tensor) -> torch.Tensor:
            p = pad(t, [2, 1], "circular")
            y = conv2d(aten.unsqueeze.default(p, 2), v, None, [1, 1], [0, 1], [1, 1], 1)
            return aten.matmul.default(p, mm).sum(-1) + y.sum(2).sum(-1).sum(-1, keepdim=True)
        return one

    got = vmap(run(batched_ops.conv2d, batched_ops.pad))(x, w, m)
    expected = torch.stack([run(aten.conv2d.default, PAD)(x[r], w[r], m[r]) for r in range(RUNS)])
    assert _close(got, expected)
    g_a = torch.autograd.grad(got.sin().sum(), [x, w, m])
    g_b = torch.autograd.grad(expected.sin().sum(), [x, w, m])
    assert all(_close(p, q) for p, q in zip(g_b, g_a, strict=True))


# -- 3. the 1-D convolution: arguments, sizes, dtypes ----------------------------------------------

ODD_CONVS: list[tuple[str, dict[str, Any]]] = [
    ("groups 2", {"groups": 2, "weight": (8, 2, 3)}),
    ("groups 3 (not dividing)", {"groups": 3}),
    ("groups 0", {"groups": 0}),
    ("groups -1", {"groups": -1}),
    ("groups True", {"groups": True}),
    ("groups 2.0", {"groups": 2.0, "weight": (8, 2, 3)}),
    ("stride 0", {"stride": [0]}),
    ("stride True", {"stride": [True]}),
    ("stride huge", {"stride": [2**62]}),
    ("padding -1", {"padding": [-1]}),
    ("padding 100", {"padding": [100]}),
    ("padding two", {"padding": [0, 0]}),
    ("dilation 0", {"dilation": [0]}),
    ("dilation -1", {"dilation": [-1]}),
    ("dilation huge", {"dilation": [2**40]}),
    ("stride an int", {"stride": 2}),
    ("a kernel longer than the input", {"weight": (8, 4, 12)}),
    ("a kernel of 0", {"weight": (8, 4, 0)}),
    ("no output channels", {"weight": (0, 4, 3), "bias": (0,)}),
    ("a bias too long", {"bias": (9,)}),
    ("a 2-D bias", {"bias": (2, 4)}),
    ("input channels not the weight's", {"weight": (8, 3, 3)}),
    ("no rows", {"input": (0, 4, 9)}),
    ("zero length", {"input": (5, 4, 0)}),
    ("zero length, padded", {"input": (5, 4, 0), "padding": [1]}),
    ("a double input", {"input_dtype": torch.float64}),
]


@pytest.mark.parametrize(("name", "change"), ODD_CONVS, ids=[c[0] for c in ODD_CONVS])
def test_odd_convolutions_are_aten_s_results_or_refusals(name: str, change: dict[str, Any]) -> None:
    """Each odd argument, size or dtype: the batched call gives aten's per-run result to float
    rounding, or raises where aten raises (never a result aten refuses)."""
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(RUNS, *change.get("input", (5, 4, 9)), generator=gen).to(change.get("input_dtype", torch.float32))
    w = torch.randn(RUNS, *change.get("weight", (8, 4, 3)), generator=gen)
    b = torch.randn(RUNS, *change.get("bias", (8,)), generator=gen)
    args = (change.get("stride", [1]), change.get("padding", [0]), change.get("dilation", [1]), change.get("groups", 1))
    expected, refused = _try(lambda: _per_run(lambda t, v, c: CONV1D(t, v, c, *args), x, w, b))
    got, error = _try(lambda: vmap(lambda t, v, c: batched_ops.conv1d(t, v, c, *args))(x, w, b))
    if refused is not None:
        assert error is not None, f"aten refuses ({refused}), the batched form answers"
        return
    assert error is None, f"aten answers, the batched form raises: {error}"
    assert _close(got, expected)


@pytest.mark.parametrize("conv", ["conv1d", "conv2d"])
def test_a_convolution_over_no_input_channels_answers_as_aten(conv: str) -> None:
    """A weight of no input channels: aten answers (an empty result), the batched form raises in
    ``_grouped_conv``'s ``w.reshape(-1, ...)`` (a view of no elements has no size to infer, the
    bug ``_ungrouped`` and the GRU had). Under the trainer the plain step fails and the group
    trains under vmap(grad), without any faster form. Fix: count the rows,
    ``w.reshape(w.shape[0] * w.shape[1], *w.shape[2:])``."""
    gen = torch.Generator().manual_seed(9)
    spatial = (9,) if conv == "conv1d" else (5, 9)
    x = torch.randn(RUNS, 5, 0, *spatial, generator=gen)
    w = torch.randn(RUNS, 8, 0, *(3,) * len(spatial), generator=gen)
    aten_op, fast = (CONV1D, batched_ops.conv1d) if conv == "conv1d" else (aten.conv2d.default, batched_ops.conv2d)
    expected = _per_run(lambda t, v: aten_op(t, v), x, w)
    got, error = _try(lambda: vmap(lambda t, v: fast(t, v))(x, w))
    assert error is None, f"aten answers {tuple(expected.shape)}, the batched form raises: {error}"
    assert got.shape == expected.shape


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_other_float_dtypes_of_the_chain_are_aten_s(dtype: torch.dtype) -> None:
    """pad -> conv1d -> pad -> conv1d in double to float rounding; in half and bfloat16 no further
    from double's result than twice aten's own error and a few of the dtype's steps."""
    weights = [w.detach() for w in _chain_weights(10)]
    x = torch.randn(RUNS, 3, 4, 9, generator=torch.Generator().manual_seed(11))
    exact = torch.stack([_chain(PAD, CONV1D)(x[r].double(), *[w[r].double() for w in weights]) for r in range(RUNS)])
    cast = [w.to(dtype) for w in weights]
    aten_ = torch.stack([_chain(PAD, CONV1D)(x[r].to(dtype), *[w[r] for w in cast]) for r in range(RUNS)])
    got = vmap(_chain(batched_ops.pad, batched_ops.conv1d))(x.to(dtype), *cast)
    assert got.dtype == dtype
    if dtype == torch.float64:
        assert _close(aten_, got, 1e-12)
        return
    aten_error = float((aten_.double() - exact).abs().max())
    assert float((got.double() - exact).abs().max()) <= 2 * aten_error + 4 * torch.finfo(dtype).eps * float(exact.abs().max())


# -- 4. the ops after the grouped layout -----------------------------------------------------------

_G = torch.Generator().manual_seed(12)
_M7 = torch.randn(7, 7, generator=_G)
_HEAD = torch.randn(3, 42, generator=_G)
_TW = torch.randn(6, 2, 3, generator=_G)
_W2 = torch.randn(2, 1, 3, 3, generator=_G)
_GRID = torch.rand(5, 3, 3, 2, generator=_G) * 2 - 1
_IDX = torch.tensor([[[0, 6, 3]]]).expand(5, 6, 3)

AFTER: dict[str, Callable[[torch.Tensor], Any]] = {
    "reshape, linear": lambda y: aten.linear.default(aten.reshape.default(y, [5, -1]), _HEAD),
    "flatten": lambda y: aten.flatten.using_ints(y, 1),
    "matmul": lambda y: aten.matmul.default(y, _M7),
    "bmm": lambda y: aten.bmm.default(y, aten.transpose.int(y, 1, 2)),
    "layer_norm": lambda y: aten.layer_norm.default(y, [7]),
    "group_norm": lambda y: aten.group_norm.default(y, 3),
    "softmax": lambda y: aten._softmax.default(y, 1, False),
    "cumsum": lambda y: aten.cumsum.default(y, 2),
    "sort": lambda y: aten.sort.default(y, 2),
    "topk": lambda y: aten.topk.default(y, 3, 1),
    "var_mean": lambda y: aten.var_mean.dim(y, [1, 2]),
    "avg_pool1d": lambda y: aten.avg_pool1d.default(y, [2], [2], [1], True, False),
    "max_pool1d_with_indices": lambda y: aten.max_pool1d_with_indices.default(y, [3], [2], [1], [1], True),
    "adaptive_max_pool1d": lambda y: aten.adaptive_max_pool1d.default(y, [3]),
    "upsample_linear1d": lambda y: aten.upsample_linear1d.default(y, [13], False),
    "reflection_pad1d": lambda y: aten.reflection_pad1d.default(y, [3, 2]),
    "replicate pad": lambda y: batched_ops.pad(y, [3, 2], "replicate"),
    "constant_pad_nd": lambda y: aten.constant_pad_nd.default(y, [3, -2, 1, 1], 0.5),
    "circular pad": lambda y: batched_ops.pad(y, [3, 2], "circular"),
    "conv_transpose1d": lambda y: aten.conv_transpose1d.default(y, _TW),
    "shared-weight conv2d": lambda y: aten.conv2d.default(aten.unsqueeze.default(y, 1), _W2),
    "fft_rfft": lambda y: aten.fft_rfft.default(y),
    "unfold_copy": lambda y: aten.unfold_copy.default(y, 2, 3, 2),
    "diagonal": lambda y: aten.diagonal.default(y, 0, 1, 2),
    "roll, flip": lambda y: aten.flip.default(aten.roll.default(y, [2, -1], [2, 0]), [2]),
    "channel_shuffle": lambda y: aten.channel_shuffle.default(y, 2),
    "cdist": lambda y: aten.cdist.default(y, y),
    "einsum": lambda y: aten.einsum.default("bcl,bdl->bcd", [y, y]),
    "attention (math)": lambda y: aten._scaled_dot_product_attention_math.default(y, y, y)[0],
    "rms_norm": lambda y: aten.rms_norm.default(y, [7]),
    "guarded weight norm": lambda y: _guarded_weight_norm(y, torch.ones(5, 1, 1), 0),
    "gather": lambda y: aten.gather.default(y, 2, _IDX),
    "take": lambda y: aten.take.default(y, torch.tensor([0, 7, 41, 209])),
    "index": lambda y: aten.index.Tensor(y, [None, torch.tensor([5, 0]), None]),
    "scatter": lambda y: aten.scatter.src(y, 2, _IDX, aten.slice.Tensor(y, 2, 0, 3)),
    "tile": lambda y: aten.tile.default(y, [2, 1, 2]),
    "linalg_inv": lambda y: aten.linalg_inv.default(aten.slice.Tensor(y, 2, 0, 6) + 3 * torch.eye(6)),
    "grid_sampler_2d": lambda y: aten.grid_sampler_2d.default(aten.unsqueeze.default(y, 1), _GRID, 0, 0, False),
    "im2col": lambda y: aten.im2col.default(aten.unsqueeze.default(y, 0), [2, 2], [1, 1], [0, 0], [1, 1]),
    "_to_copy (double)": lambda y: aten._to_copy.default(y, dtype=torch.float64),
    "unflatten": lambda y: aten.unflatten.int(y, 1, [2, 3]),
}


def _guarded_weight_norm(v: torch.Tensor, g: torch.Tensor, dim: int) -> Any:
    """Weight norm behind the graph's guard (dense copies): its kernel reads a strided tensor
    as dense, and the grouped layout is strided (aten alone on it is wrong)."""
    from bench.graph import GUARDS, _guarded

    return _guarded(aten._weight_norm_interface.default, GUARDS["aten._weight_norm_interface.default"])(v, g, dim)


def _tuple(value: Any) -> tuple[torch.Tensor, ...]:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


@pytest.mark.parametrize("name", list(AFTER))
def test_ops_reading_the_grouped_layout_give_aten_s_results_and_no_run_reaches_another(name: str) -> None:
    """The batched 1-D convolution's output (runs beside the channels in memory) through each op a
    graph may call after it: aten's result on aten's convolution one run at a time (to float
    rounding); a NaN input and a huge weight in run 0 leave the other runs bit for bit."""
    op = AFTER[name]
    gen = torch.Generator().manual_seed(13)
    x, w = torch.randn(RUNS, 5, 4, 9, generator=gen), torch.randn(RUNS, 6, 4, 3, generator=gen) * 0.4
    outs = [_tuple(op(CONV1D(x[r], w[r]))) for r in range(RUNS)]
    expected = [torch.stack([o[i] for o in outs]) for i in range(len(outs[0]))]
    got = _tuple(vmap(lambda t, v: op(batched_ops.conv1d(t, v)))(x, w))
    assert len(got) == len(expected) and all(_close(p, q) for p, q in zip(expected, got, strict=True))
    xp, wp = x.clone(), w.clone()
    xp[0], wp[0] = math.nan, 1e30
    poisoned = _tuple(vmap(lambda t, v: op(batched_ops.conv1d(t, v)))(xp, wp))
    assert all(torch.equal(p[1:], q[1:]) for p, q in zip(got, poisoned, strict=True))


def _as_the_graph_runs(op: Any) -> Any:
    """``op`` as ``bench.graph.build_graph`` runs it: its faster form, if any."""
    return batched_ops.FASTER.get(op, op)


@pytest.mark.parametrize("source", ["conv1d", "pad"])
@pytest.mark.parametrize("view", ["view_as_complex", "view_as"])
def test_a_view_of_the_grouped_layout_answers_as_aten(source: str, view: str) -> None:
    """``view_as_complex`` (torch.export writes it for ``torch.view_as_complex``) and ``view_as``
    (on the allowlist; ``build_graph`` turns ``view`` into ``reshape`` but not it) after the
    batched 1-D convolution or the circular pad: aten answers one run at a time and under vmap
    (its own pad's and convolution's outputs are contiguous per run, as c69a526's forms' were
    before it), the batched forms' grouped layout makes them raise ("Tensor must have a last
    dimension with stride 1", "view size is not compatible"). Under the trainer the plain step
    then fails (the group trains under vmap(grad), none of the faster forms), or, when only the
    eval graph holds one, the whole group retrains one run at a time (torch.export writes no
    ``view_as``: only a hand-written graph has one). Fix: faster forms in ``batched_ops.FASTER``
    of ``aten.view_as_complex.default`` (a plain-batched input made ``.contiguous()`` first) and
    of ``aten.view_as.default`` (``reshape`` to the other's shape, as ``build_graph`` does for
    ``view``)."""
    gen = torch.Generator().manual_seed(14)
    # (5, 6, 8) per run either way: a 1-D convolution of (5, 4, 9), or a pad of (5, 6, 7)
    x = torch.randn(RUNS, 5, *((4, 9) if source == "conv1d" else (6, 7)), generator=gen)
    w = torch.randn(RUNS, 6, 4, 2, generator=gen)
    target = torch.zeros(5, 48)

    def head(y: torch.Tensor) -> torch.Tensor:  # each op as the graph's interpreter runs it
        if view == "view_as":
            out: torch.Tensor = _as_the_graph_runs(aten.view_as.default)(y, target)
            return out
        pairs = _as_the_graph_runs(aten.view_as_complex.default)(aten.reshape.default(y, [5, 6, 4, 2]))
        return aten.view_as_real.default(pairs)

    def make(t: torch.Tensor, v: torch.Tensor, conv: Any, pad: Any) -> torch.Tensor:
        out: torch.Tensor = conv(t, v) if source == "conv1d" else pad(t, [1, 0], "circular")
        return out

    expected = _per_run(lambda t, v: head(make(t, v, CONV1D, PAD)), x, w)
    assert _close(vmap(lambda t, v: head(make(t, v, CONV1D, PAD)))(x, w), expected)  # aten's own forms under vmap
    got, error = _try(lambda: vmap(lambda t, v: head(make(t, v, batched_ops.conv1d, batched_ops.pad)))(x, w))
    assert error is None, f"aten answers, the batched form raises: {error}"
    assert _close(got, expected)


# -- 5. the trainer: captured 1-D CNNs trained as a group ------------------------------------------


class _Circular(nn.Module):
    """Dynamics' circular CNN: circular convolutions with GELU and a residual between them."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(2, 4, 3, padding=1, padding_mode="circular")
        self.c2 = nn.Conv1d(4, 4, 5, padding=2, padding_mode="circular")
        self.c3 = nn.Conv1d(4, 1, 3, padding=1, padding_mode="circular")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.gelu(self.c1(x))
        h = h + nn.functional.gelu(self.c2(h))
        out: torch.Tensor = self.c3(h).squeeze(1)
        return out


class _Flat(nn.Module):
    """A circular convolution, a strided one, and the grouped output flattened into a Linear
    (``x.view(x.size(0), -1)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(2, 4, 3, padding=1, padding_mode="circular")
        self.c2 = nn.Conv1d(4, 3, 3, stride=2)
        self.head = nn.Linear(9, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.c2(torch.relu(self.c1(x))))
        out: torch.Tensor = self.head(h.view(h.size(0), -1))
        return out


@pytest.mark.parametrize(("model", "pads", "convs"), [(_Circular, 3, 3), (_Flat, 1, 2)])
def test_captured_1d_cnns_train_as_a_group_as_one_at_a_time(model: type[nn.Module], pads: int, convs: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Both captured models run the batched pad and convolution (no vmap(grad) fallback): the
    probe passes, each run of a group trains as ``bench.trainer.train`` trains it alone (to float
    rounding), and a group whose run 0 diverges (a huge rate) leaves the others bit for bit."""
    torch.manual_seed(0)
    captured: CapturedModel = through_capture(model(), [2, 8])
    targets = [getattr(node.target, "__wrapped__", node.target) for node in captured._graphs["train"][0].graph.nodes]
    assert targets.count(batched_ops.pad) == pads and targets.count(batched_ops.conv1d) == convs
    gen = torch.Generator().manual_seed(15)
    x = torch.randn(48, 2, 8, generator=gen)
    y = x.sum(1) * 0.3
    x_eval = torch.randn(20, 2, 8, generator=gen)
    rates = (0.01, 0.003, 0.03)
    alone = [train(m, RunConfig(lr=lr, epochs=2, batch_size=16), x, y, x_eval, order_seed=5)
             for m, lr in zip(runs_of(captured, RUNS), rates, strict=True)]
    no_functorch(monkeypatch)
    assert probe(runs_of(captured, RUNS), x, y, "mse") is None
    groups = []
    for lrs in (rates, (1e12, *rates[1:])):
        configs = [RunConfig(lr=lr, epochs=2, batch_size=16) for lr in lrs]
        groups.append(train_group(runs_of(captured, RUNS), configs, [(x, y, x_eval)], [0] * RUNS, [5] * RUNS))
    for a, b in zip(alone, groups[0], strict=True):
        assert not b.diverged and _close(a.predictions, b.predictions)
    assert not torch.equal(groups[0][0].predictions, groups[1][0].predictions)
    assert all(torch.equal(a.predictions, b.predictions) for a, b in zip(groups[0][1:], groups[1][1:], strict=True))


class _Spectral(nn.Module):
    """A circular 1-D convolution whose channels pair into complex numbers
    (``torch.view_as_complex``), squared, and read by a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, padding=1, padding_mode="circular")
        self.head = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        z = torch.view_as_complex(h.reshape(h.shape[0], 4, 4, 2))
        out: torch.Tensor = self.head(torch.view_as_real(z * z).flatten(1)[:, :16])
        return out


def test_a_captured_complex_view_after_a_circular_convolution_still_batches() -> None:
    """The trainer's view of the bug above: before c69a526 this model trained on the plain vmap
    level (the pad aten's, the convolution's output copied back runs-first: ``probe`` None). Now
    its plain step raises (the grouped layout), the vmap(grad) retry hits PyTorch's own internal
    assert ("wrapper == nullptr") on the complex view, and ``probe`` calls it not vectorizable:
    every run of the model trains one at a time. Fix: the faster form of
    ``aten.view_as_complex.default`` in ``batched_ops.FASTER`` (a plain-batched input made
    ``.contiguous()`` first: per run, its last dimension of stride 1)."""
    torch.manual_seed(0)
    captured = through_capture(_Spectral(), [2, 8])
    gen = torch.Generator().manual_seed(16)
    x, y = torch.randn(48, 2, 8, generator=gen), torch.randn(48, 8, generator=gen)
    assert probe(runs_of(captured, RUNS), x, y, "mse") is None


# -- 6. denormals: where each stage computes, and who can flip the flag ------------------------------

_THREADS = """
import os, threading
import bench.child, torch
before = len(os.listdir("/proc/self/task"))
bench.child.torch_settings()
seen = {}
def probe(key):
    seen[key] = (float(torch.full((1,), 1e-30) * 1e-9), 1e-300 * 1e-10)
probe("main")
late = threading.Thread(target=probe, args=("thread",))
late.start()
late.join()
import numpy, bench.capture, bench.vectorized, torch.func  # what a child imports after it
print(before, len(os.listdir("/proc/self/task")), seen["main"], seen["thread"], flush=True)
"""


def test_a_child_starts_no_thread_before_it_flushes_and_later_threads_inherit_the_mode(tmp_path: Path) -> None:
    """The flag is per thread (MXCSR): a thread that existed before ``torch_settings`` keeps the
    old mode. In a child's environment (``launcher._child_env``: one OpenMP thread, so neither
    torch nor numpy's OpenBLAS starts a pool) ``import torch`` starts no thread, so the child's
    one thread flushes, and a thread started later inherits the mode, for torch's float32 and
    for the Python floats a model's own code computes at capture (float64 denormals) alike. (A
    thread the imports after it start inherits the mode too; whether one starts varies with the
    host: a CI run saw one.)"""
    from bench.sandbox.launcher import _child_env

    env = _child_env(tmp_path)
    done = subprocess.run([sys.executable, "-c", _THREADS], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    before, _, flushed = done.stdout.strip().splitlines()[-1].split(" ", 2)
    assert before == "1"
    assert flushed == "(0.0, 0.0) (0.0, 0.0)"  # the main thread's and the later thread's


def test_only_a_capture_child_runs_submitted_code_and_it_scores_nothing() -> None:
    """Submitted code can call ``torch.set_flush_denormal(False)`` wherever it runs: the capture
    child (its file, ``build_model``, its forward under export, its ``measure``). That child
    never serves a trainer's command afterwards (``side_after``), a trainer child never takes a
    command that runs submitted code, and the child that captures a built-in track's own
    baseline and trains it loads no file and never measures: no graph is scored, predicted
    alone or probed in a mode a file set."""
    spec = {"role": "idea", "track": "smoke", "spec": {}, "param_cap": 1}
    side = wire.side_after(None, "capture_load", {**spec, "code": "x = 1"})
    assert side == "capture"
    for op in ("load", "check", "train", "probe", "more_inits"):
        with pytest.raises(BenchError):
            wire.side_after(side, op, {})
    assert wire.side_after(side, "measure", {}) == "capture"
    trainer = wire.side_after(None, "load", {})
    for op in ("capture_load", "capture", "rebuild", "measure", "make_data"):
        with pytest.raises(BenchError):
            wire.side_after(trainer, op, {})
    own = wire.side_after(None, "capture_load", {**spec, "trains": True})
    assert own == wire.OWN_BASELINE
    for op in ("measure", "capture_load", "make_data"):
        with pytest.raises(BenchError):
            wire.side_after(own, op, {"trains": True})
    for extra in ({"code": "x = 1"}, {"track_source": "x = 1"}):
        with pytest.raises(BenchError):
            wire.side_after(None, "capture_load", {**spec, "trains": True, **extra})


_MEASURING_FILE = """
import torch
from torch import nn

def build_model(spec):
    return nn.Linear(2, 1)

def measure(model, x):
    torch.set_flush_denormal(False)
    return float(model(x).sum().detach())
"""


def test_a_measure_can_unflush_its_own_capture_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The idea's ``measure`` runs in the capture child (``Capturer.measure``) and can turn the
    flag off there: what that child computes later is the file's own (further builds and
    measurements, reported ``self_measured``); the test above shows it serves no trainer's
    command. Here, in this process, the mode is off after the measure (and restored)."""
    from bench.capture import Capturer

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Capturer, "_count_starts", lambda self: None)  # leave this process's os and threading alone
    np.save(tmp_path / "probe.npy", np.ones((3, 2), dtype=np.float32))
    capturer = Capturer()
    capturer.load({"role": "idea", "spec": {"input_shape": [2], "output_shape": [1]}, "param_cap": 100,
                   "code": _MEASURING_FILE})
    torch.set_flush_denormal(True)
    try:
        assert float(torch.full((1,), 1e-30) * 1e-9) == 0.0
        capturer.measure({"runs": [{"config": 0, "seed_index": 0, "prefix": str(tmp_path / "t_"),
                                    "probe": str(tmp_path / "probe.npy")}],
                          "builds": {"configs": [{}], "init_seeds": [0], "targets": [[]]}})
        assert float(torch.full((1,), 1e-30) * 1e-9) > 0.0  # the file turned it off in its own child
    finally:
        torch.set_flush_denormal(False)


def test_the_settings_docstring_names_files_that_exist() -> None:
    """``torch_settings`` points the reader to its hostile test by path: that file must exist
    (it named a file that was never written, a review found)."""
    import re

    from bench.child import torch_settings

    named = re.findall(r"tests/[\w/]+\.py", torch_settings.__doc__ or "")
    assert named and all((ROOT / path).is_file() for path in named), named
