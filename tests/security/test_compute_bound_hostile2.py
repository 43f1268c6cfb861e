"""Second red team of the compute count (``bench.cost`` at 64b08a9): models the count admits whose
training step or forward really costs far more, none of them the first pass's attacks
(``tests/security/test_compute_bound_hostile.py``).

Each hole is a test of the safe behaviour, which failed before its fix (``bench.cost``:
``polygamma`` refused from order 1, the slow pointwise paths and off-float32 or grouped
convolutions priced, ``OP_COST`` 2**13); the sound checks are plain tests. Measured on this machine (2 shared cores, one torch thread, denormals
flushed as ``bench.child.torch_settings`` sets them, torch 2.13 CPU). The reference: the tabular
track's baseline (Linear(10, 32)-ReLU-Linear(32, 1), batch 32), counted 843 an example and run in
0.02 ms a forward, 0.11 ms a forward and backward; ``FIXED_FREE`` (2**20) is described as "about
1 ms", i.e. one counted operation ~ 1 ns.

- BACKWARD: ``polygamma(1, z)`` (trigamma) is admitted (``_polygamma`` refuses n >= 2 only) and
  its forward is bounded, but its derivative is ``polygamma(2, z)``, the zeta walk the first pass
  found: |z| steps an element in the BACKWARD pass, which the count never sees. z = -1e6 + 0.5
  (float64) on one column, 32 rows: counted 89 an example (fixed 16,460), forward 0.2 ms, forward
  and backward 551 ms (-1e5 + 0.5: 66 ms; 0.5: 0.5 ms); at -1e12 + 0.5, hours an element.
- VALUES: pointwise kernels whose slow path is chosen by the values, each priced as what it reads
  and writes (~3 an element): ``logit`` of x outside [0, 1] (NaN) 250 ns an element against 0.4 ns
  inside it (~600 x, float32 and float64); ``fmod`` / ``remainder`` in float64 of -inf or of far
  exponents 60-120 ns (2.3 ns at ordinary values); ``pow`` of int64 by a huge exponent 60 ns.
  K = 240,000 logits of 2.0 on a constant fit the free 2**20: 30 ms a forward, 1,500 x the
  tabular baseline's, admitted.
- DISPATCH: ``OP_COST`` (2**10) prices a node as ~1 us, but a node through ``CapturedModel``'s
  interpreter costs ~7-8 us forward and as much again backward; with ``FIXED_FREE`` a forward gets
  about a thousand nodes for nothing. A chain of 1,100 multiplications of a (1, 1) parameter next
  to the tabular baseline: admitted (dearest 2,500 an example against 4 x 843); forward 8 ms,
  forward and backward 16.4 ms a step, 146 x the baseline's 0.11 ms.
- KERNELS: FLOPs are not time: a depthwise (grouped) convolution in float64, dilated, runs at
  824 ps a FLOP (dense float32 convolution: 7 ps; mm: 9 ps); float64 convolutions go to the slow
  (thnn) path, 130 ps a FLOP. Counted at its FLOPs, so a vision idea of depthwise float64
  convolutions at the compute ratio runs ~100 x a dense one of the same count.

Checked and sound (no test where the check is a timing): denormals (flushed in every child: a
512 x 512 mm of denormal inputs takes 290 ms unflushed, 1.8 ms flushed, float32 and float64);
``cumprod``'s and ``prod``'s backward with zeros (2x, linear); pools', sorts', ``unfold``'s,
``gather``'s, ``embedding``'s, ``cdist``'s and linalg backward (within a constant of the priced
forward); ``matrix_exp``'s backward (a 2n x 2n matrix_exp: ~8 x the priced forward, below 20 x);
int32/int64/complex mm (40-56 ps a FLOP, ~6 x float32); every row count the trainer runs (probes
run in the predicted batch's context, ``check_applies`` on 7 rows, ``check_output_shape`` on 2 in
train mode, the vmap probe on 8 in train and eval, vmap training and evaluation at the same batch
and chunk sizes): all in ``forward_sizes``; a vmap batching-rule fallback (a Python loop over
runs) is caught by ``bench.vectorized.probe``'s warning check; LSTM and GRU count alike on fake and
real tensors.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from bench import cost
from bench.decide import compute_error, dearest_forward, dearest_per_example
from bench.errors import BenchError, ErrorCode
from bench.graph import rebuild
from tests.capture_helpers import graph_of, through_capture

ROOT = Path(__file__).resolve().parents[2]
ROWS = 2 * cost.FLOP_ROWS
BATCH, N_TRAIN, N_EVAL, RATIO = 32, 2000, 1024, 4.0  # the tabular track's batch and ratio


def _counted(model: nn.Module, shape: list[int]) -> cost.Costs | None:
    """The trainer's count (every row count it runs), or None where it refuses the model cleanly."""
    try:
        return cost.forward_costs(model, torch.randn(ROWS, *shape), *cost.forward_sizes(N_TRAIN, BATCH, [N_EVAL]))
    except BenchError as exc:
        assert exc.code is ErrorCode.COMPUTE_PARITY, exc
        return None


class _TabularBaseline(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(10, 32), nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def _parity(idea: nn.Module) -> BenchError | None:
    """``bench.decide.compute_error`` (``Job.check_counts``) for one idea config against the tabular
    baseline."""
    base = _counted(through_capture(_TabularBaseline(), [10]), [10])
    mine = _counted(idea, [10])
    if mine is None:
        return BenchError(ErrorCode.COMPUTE_PARITY, "refused by the count")
    assert base is not None
    base_rows, base_costs = zip(*base.forwards, strict=True)
    base_dearest = dearest_per_example(*dearest_forward(base_rows, base_costs, BATCH), BATCH)
    rows, costs = zip(*mine.forwards, strict=True)
    return compute_error({}, mine.per_example, max(base.per_example, 2.0 * 385), RATIO,
                         dearest_forward(rows, costs, BATCH), BATCH, base_dearest)


# -- hole: a backward far dearer than its forward ----------------------------------------------
class _Trigamma(nn.Module):
    """trigamma of a value a parameter scales (so the backward runs): bounded forward, zeta walk
    of |z| steps an element backward."""

    def __init__(self, q: float) -> None:
        super().__init__()
        self.q, self.out, self.w = q, nn.Linear(10, 1), nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = (x[:, :1] * 0 + self.q).double() * self.w.double()
        return self.out(x) + torch.special.polygamma(1, z).float() * 0


def test_trigamma_whose_backward_walks_is_refused() -> None:
    """The count covers the forward; trigamma's derivative is polygamma(2, z), which
    ``bench.cost._polygamma`` itself refuses as unboundable. Closed: ``polygamma`` is refused from
    order 1 (a model that trains differentiates it)."""
    assert _counted(through_capture(_Trigamma(-1e6 + 0.5), [10]), [10]) is None


def test_the_trigamma_walk_is_in_the_backward_only() -> None:
    """What the hole is made of, small: the forward at -1e4 + 0.5 is bounded (reflection), the
    backward walks (``polygamma(2)``): one element each way, timed by their ratio of work."""
    z = torch.full((4,), -1e4 + 0.5, dtype=torch.float64, requires_grad=True)
    y = torch.special.polygamma(1, z)
    (g,) = torch.autograd.grad(y.sum(), z)
    assert torch.allclose(g, torch.special.polygamma(2, z.detach()))  # the walker, in the backward


# -- hole: pointwise kernels whose slow path the values choose -----------------------------------
def _pointwise(op: str, value: Any, dtype: str, k: int, other: Any = None) -> nn.Module:
    """A constant of ``k`` elements (contiguous: an expanded one is computed once), ``op`` on it,
    summed into the output times 0. One node each: the forward's count is ~4 k plus the ops."""
    args = ["@c"] if other is None else ["@c", "@d"]
    calls = [("c", "aten.full.default", [[k], value], {"dtype": {"$dtype": dtype}})]
    if other is not None:
        calls.append(("d", "aten.full.default", [[k], other], {"dtype": {"$dtype": dtype}}))
    calls += [("f", op, args, {}),
              ("s", "aten.nansum.default" if dtype.startswith("float") else "aten.sum.default", ["@f"], {}),
              ("z", "aten.mul.Tensor", ["@s", 0.0], {}), ("y", "aten.add.Tensor", ["@x", "@z"], {})]
    doc = graph_of(*calls)
    return rebuild({"train": doc, "eval": doc}, {}, torch.device("cpu"))


SLOW_POINTWISE = {  # op, value, dtype, other; measured ns an element (slow / ordinary values)
    "logit_nan": ("aten.logit.default", 2.0, "float32", None),  # 250 / 0.4
    "fmod_inf": ("aten.fmod.Tensor", float("-inf"), "float64", 1e-30),  # 120 / 2.3
    "pow_int64": ("aten.pow.Tensor_Tensor", 2**31 - 1, "int64", 2**62),  # 60 / 1.5
}


@pytest.mark.parametrize("label", sorted(SLOW_POINTWISE))
def test_a_pointwise_slow_path_is_priced_at_its_worst(label: str) -> None:
    """At FIXED_FREE's own rate (2**20 ~ 1 ms: 1 ns an operation) an op of 60-250 ns an element
    must count at least ~16 an element. Closed: these ops are priced at their worst path
    (``bench.cost._per_element``: ``logit`` 256 an element, ``fmod`` and ``remainder`` 128,
    ``floor_divide``, ``div`` with rounding and integer ``pow`` 64, ``i0``, ``digamma``,
    ``log_ndtr`` and ``sinc`` 32)."""
    op, value, dtype, other = SLOW_POINTWISE[label]
    k = 2**16
    model = _pointwise(op, value, dtype, k, other)
    assert cost.forward_cost(model, torch.randn(ROWS, 10), ROWS) >= 16 * k


@pytest.mark.parametrize("label", sorted(SLOW_POINTWISE))
def test_the_slow_pointwise_gadgets_count_alike_fake_and_real(label: str) -> None:
    """No divergence: the fake count is the real one (the hole is the price, not the count)."""
    op, value, dtype, other = SLOW_POINTWISE[label]
    model = _pointwise(op, value, dtype, 256, other)
    x = torch.randn(ROWS, 10)
    assert cost.forward_cost(model, x, ROWS) == pytest.approx(cost.forward_cost(model, x, ROWS, fake=False),
                                                             abs=2 * cost.TENSOR_COST + 1)


def test_the_logit_gadget_is_refused_next_to_the_tabular_baseline() -> None:
    """The numbers of the hole above: 240,000 logits of 2.0 a forward fitted the free 2**20 (fixed
    ~9.7e5) and were admitted against the tabular baseline (30 ms a forward, its 0.02 ms); priced
    at the slow path, they are refused."""
    assert _parity(_pointwise("aten.logit.default", 2.0, "float32", 240_000)) is not None


# -- hole: nodes priced at a fraction of what the interpreter spends on them ---------------------
class _Chain(nn.Module):
    """``n`` multiplications of a (1, 1) parameter, next to a linear head: n graph nodes whose
    elements are nothing, each ~7-8 us forward and as much backward through ``CapturedModel``."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.w, self.out = n, nn.Parameter(torch.ones(1, 1)), nn.Linear(10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.w
        for _ in range(self.n):
            h = h * 1.0001
        return self.out(x) + h * 0


def test_a_thousand_free_nodes_are_not_admitted_next_to_a_tiny_baseline() -> None:
    """Closed: a node costs ``OP_COST`` 2**13 (~8 us at 1 ns an operation: the interpreter's
    forward; the free 2**20 covers 128 of them)."""
    assert _parity(through_capture(_Chain(1100), [10])) is not None


# -- hole: FLOPs of a slow convolution kernel ----------------------------------------------------
class _Depthwise(nn.Module):
    """A depthwise (groups = channels) dilated 3 x 3 convolution in float64 on 64 x 32 x 32."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(64, 64, 3, padding=3, dilation=3, groups=64, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(x.double()).float().flatten(1)[:, :1]


def test_a_slow_convolution_kernel_is_priced_above_its_flops() -> None:
    """Closed: a convolution off float32 / bfloat16 costs 16 x its FLOPs, a grouped one 16 more
    an output element and tap (``bench.cost._convolution``)."""
    model = through_capture(_Depthwise(), [64, 32, 32])
    x = torch.randn(ROWS, 64, 32, 32)
    with FlopCounterMode(display=False) as flops, torch.no_grad():
        model(x)
    assert cost.forward_cost(model, x, ROWS) >= 14 * flops.get_total_flops()


# -- checked and sound ---------------------------------------------------------------------------
DENORMAL = """
import sys, torch
sys.path.insert(0, ".")
from bench.child import torch_settings
torch_settings()
for dtype, tiny in ((torch.float32, 1e-39), (torch.float64, 1e-310)):
    a = torch.full((64, 64), tiny, dtype=dtype)
    assert float((a @ torch.ones(64, 64, dtype=dtype)).abs().max()) == 0.0, dtype  # read as zero
    assert float((a * 1.0).abs().max()) == 0.0, dtype
print("flushed")
"""


def test_denormals_are_flushed_in_every_child() -> None:
    """A 512 x 512 mm of denormal inputs: 290 ms unflushed, 1.8 ms flushed (160 x), elementwise
    25 x: the trainer's children flush them (``bench.child.torch_settings``) in float32 and
    float64, so a model cannot scale its activations into the slow range."""
    out = subprocess.run([sys.executable, "-c", DENORMAL], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "flushed", out.stderr[-2000:]


class _Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.r, self.g, self.o = nn.LSTM(4, 8, batch_first=True), nn.GRU(4, 8, batch_first=True), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x.view(x.shape[0], 4, 4)
        return self.o(self.r(z)[0][:, -1] + self.g(z)[0][:, -1])


def test_lstm_and_gru_count_alike_fake_and_real() -> None:
    """The fake count of recurrent layers follows the ops the real forward dispatches."""
    model = through_capture(_Recurrent(), [16])
    x = torch.randn(ROWS, 16)
    for training in (False, True):
        model.train(training)
        assert cost.forward_cost(model, x, ROWS) == pytest.approx(cost.forward_cost(model, x, ROWS, fake=False),
                                                             abs=2 * cost.TENSOR_COST + 1)

