"""Red team of the compute count (``bench.cost``, session 33): models that pass the op list and
the count, but whose real forward costs far more than counted, or whose count itself is slow.

Each hole is a test of the safe behaviour; each failed before its fix (``bench.cost``'s prices,
``MAX_OPS`` and ``OP_COST``, and the count of every row count the trainer runs,
``forward_sizes``). Measured on this machine (one thread, torch 2.13 CPU),
against an honest MLP (1024-1024-1024) counted 7.35e7 for 16 rows and run in 1.1 ms:

- ``polygamma(n >= 2, x)`` runs ``zeta(n + 1, x)``, whose loop walks from ``x`` up to 9 one step
  at a time: for x = -1e6 + 0.5, 13 ms per element (16 rows: counted 1,090, real 263 ms); in
  float64 the walk is unbounded (x = -1e12 + 0.5: hours per element). ``polygamma`` is in LINEAR.
- ``bilinear`` reaches the count as ``_trilinear``, neither priced, FLOP-counted nor SUSPECT:
  counted as what it reads and writes. Bilinear(256, 256, 256): 2,816 per example counted,
  2 x 256**3 = 3.4e7 real (10.6 ms for 16 rows).
- ``multilabel_margin_loss_forward`` is quadratic in the width per row: width 4096, 16,390 per
  example counted, 1.7e7 real (484 ms for 16 rows).
- ``isin`` compares each element with each test element (up to ~10 n**0.145 of them), or sorts
  both: n = 2**20, m = 74: 5.2e6 counted, 124 ms (m = 20,000: 158 ms); ``sin`` of the same
  n: 2.1e6 counted, 0.64 ms.
- ``igamma`` / ``igammac`` (LINEAR) run series of up to 2,000 terms: about 70 ns an element,
  100 x a ``sin`` of the same count.
- every op costs its elements plus one a tensor, while it costs ~1-5 us to dispatch for real and
  ~0.4 ms to count on fake tensors: an ``rnn_tanh`` over a constant sequence of L steps (one
  node, L a literal) is ~5 ops a step; 2000 steps: fixed 88,073 counted (under the free 2**20),
  real forward 7-10 ms, forward + backward 53 ms, and ``forward_costs`` 18.8 s (a GRU: 272,081,
  20 ms, 205 ms, 44 s). L = 23,000: fixed 1,012,505, under the free 2**20; real forward 82 ms,
  forward + backward 0.73 s; ONE fake forward of the count 94 s (four of them: ~6 minutes).
- the cost per example is extrapolated from 8 and 16 rows: a gadget costing B**4 (rows alone
  unchanged) is counted 16,259 an example, 526,588 at a batch of 64 (35 ms), 3.4e7 at 256 (59 s).
- a size computed from the batch that is 0 at 8 and 16 rows (``n % 8``, or ``(n - 8) * (n - 16)``)
  sizes an expanded sum: counted 144 / 272 for 8 / 16 rows, 2**59 for the 2 rows
  ``check_output_shape`` runs right after the count (and 1 row alone, 7 for the probes).
- ``matrix_exp`` squares its Pade approximant ceil(log2(|A| / theta)) times, a value: 64 x 64 in
  float64 at scale 1e300, 16 rows: counted 8.45e7 (as at scale 1), real 264 ms (17 ms at scale 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from bench import cost
from bench.decide import dearest_forward, dearest_per_example
from bench.errors import BenchError, ErrorCode
from bench.graph import rebuild
from tests.capture_helpers import capture_docs, graph_of, through_capture

ROOT = Path(__file__).resolve().parents[2]
ROWS = 2 * cost.FLOP_ROWS


def _counted(module: nn.Module, shape: list[int]) -> cost.Costs | None:
    """(per example, fixed) as the trainer counts them, or None when the count refuses the model
    (a clean compute-parity refusal is the other safe answer)."""
    model = through_capture(module, shape)
    try:
        return cost.forward_costs(model, torch.randn(ROWS, *shape))
    except BenchError as exc:
        assert exc.code is ErrorCode.COMPUTE_PARITY, exc
        return None


class _Head(nn.Module):
    """``fn(x)`` next to a linear head, so the model trains and its output has a row per example."""

    def __init__(self, fn: Any, width: int = 8) -> None:
        super().__init__()
        self.fn, self.out = fn, nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) + self.fn(x)


def _polygamma(q: float) -> nn.Module:
    # the argument from the input, so the work is per row: x * 0 + q, in float64
    return _Head(lambda x: torch.special.polygamma(2, (x[:, :1] * 0 + q).double()).float())


class _Bilinear(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.b = nn.Bilinear(n, n, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(x, x)


class _MultilabelMargin(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # targets all 0 (never the -1 that ends a row's list): width x width pairs a row
        target = torch.zeros(x.shape[0], x.shape[1], dtype=torch.long)
        return F.multilabel_margin_loss(x, target, reduction="none").unsqueeze(1)


class _Isin(nn.Module):
    def __init__(self, m: int) -> None:
        super().__init__()
        self.t = nn.Parameter(torch.randn(m))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isin(x, self.t).float()


# -- holes: work hidden inside one kernel ----------------------------------------------------
def test_polygamma_of_a_large_negative_argument_is_priced_or_refused() -> None:
    """zeta(n + 1, q) for q < 0 not an integer adds pow(a, -x) for a = q, q + 1, ..., 9: one
    million steps an element here (13 ms), 1e12 in float64 at -1e12 + 0.5. Counted: 65 an
    example. Closed: polygamma with n >= 2 is refused (``bench.cost._polygamma``)."""
    counted = _counted(_polygamma(-1e6 + 0.5), [8])
    assert counted is None or counted.per_example >= 1e6, counted


def test_bilinear_is_priced_by_its_products() -> None:
    """Bilinear(n, n, n) multiplies each row by an n x n x n weight: 2 n**3 an example; counted
    as _trilinear's inputs and output (3 n an example, the weight once)."""
    n = 64
    counted = _counted(_Bilinear(n), [n])
    assert counted is None or counted.per_example >= 2 * n**3, counted


def test_multilabel_margin_loss_is_priced_by_its_pairs() -> None:
    """Each row compares every listed target with every class: width**2 an example."""
    width = 1024
    counted = _counted(_MultilabelMargin(), [width])
    assert counted is None or counted.per_example >= width**2, counted


def test_isin_is_priced_like_a_sort() -> None:
    """isin(x, t) with t of 70 elements: each element against each of t (numpy's heuristic), or
    a sort of both: at least a sort's n log n. Counted: five an element."""
    n = 4096
    counted = _counted(_Isin(70), [n])
    assert counted is None or counted.per_example >= 10 * n, counted


def test_incomplete_gamma_is_priced_by_its_series() -> None:
    """gammainc(a, x): continued fractions and series of up to 2,000 terms an element (~70 ns
    where sin takes under 1 ns). Counted: three an element."""
    counted = _counted(_Head(lambda x: torch.special.gammainc(x.abs() + 20, x.abs() + 21).sum(1, keepdim=True), 1024), [1024])
    assert counted is None or counted.per_example >= 100 * 1024, counted


def _matrix_exp(scale: float, n: int) -> nn.Module:
    """A hand-built graph (``matrix_exp.default`` is listed; an export writes
    ``linalg_matrix_exp``, which is not): each row an n x n float64 matrix times ``scale``."""
    doc = graph_of(("d", "aten._to_copy.default", ["@x"], {"dtype": {"$dtype": "float64"}}),
                   ("v", "aten.view.default", ["@d", [-1, n, n]], {}),
                   ("s", "aten.mul.Tensor", ["@v", scale], {}),
                   ("e", "aten.matrix_exp.default", ["@s"], {}),
                   ("r", "aten.view.default", ["@e", [-1, n * n]], {}))
    return rebuild({"train": doc, "eval": doc}, {}, torch.device("cpu"))


def test_matrix_exp_is_priced_by_its_squarings_or_its_norm_is_bounded() -> None:
    """Scaling and squaring: ceil(log2(|A| / theta_18)) matrix products after the Pade step, a
    value, not a shape. 64 x 64, 16 rows: counted 8.45e7 at any scale; real 17 ms at scale 1,
    264 ms at 1e300 (~1000 squarings, 100 x the price). Closed: priced at the most squarings
    its dtype's range allows (``bench.cost._matrix_exp``: 1,024 in float64)."""
    n = 16
    model = _matrix_exp(1e300, n)
    x = torch.randn(ROWS, n * n)
    try:
        per_example = cost.forward_costs(model, x).per_example
    except BenchError as exc:
        assert exc.code is ErrorCode.COMPUTE_PARITY
        return
    if per_example < 2 * 1000 * n**3:  # not priced for its squarings: the run must refuse it
        with pytest.raises(BenchError):
            model(x)


# -- holes: many ops, each counted as a few elements -------------------------------------------
class _Recurrence(nn.Module):
    """An RNN over a constant sequence: one graph node, a step's ops per step of a literal length."""

    def __init__(self) -> None:
        super().__init__()
        self.r, self.out = nn.RNN(1, 1, batch_first=True), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) + self.r(torch.zeros(1, 4, 1))[0].sum() * 0


def _recurrence(steps: int) -> nn.Module:
    """``_Recurrence`` captured at 4 steps, its literal set to ``steps`` (what a capture child
    writes for a longer constant): nothing else changes."""
    docs, tensors = capture_docs(_Recurrence(), [8])
    text = json.dumps(docs)
    assert text.count("[[1, 4, 1]]") == 2  # the zeros of each mode's graph
    return rebuild(json.loads(text.replace("[[1, 4, 1]]", f"[[1, {steps}, 1]]")), tensors, torch.device("cpu"))


class _Ops(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


def test_each_op_a_forward_dispatches_is_priced_as_a_dispatch() -> None:
    """An RNN of width 1 over 100 constant steps: ~500 ops of one element, fixed 4,500
    counted (23,000 steps stay under the free 2**20, 80 ms a forward). Closed: ``Work`` adds
    ``OP_COST`` (2**10) per op dispatched."""
    model = _recurrence(100)
    ops = _Ops()
    with torch.no_grad(), ops:
        model(torch.randn(ROWS, 8))
    try:
        fixed = cost.forward_costs(model, torch.randn(ROWS, 8)).fixed
    except BenchError as exc:
        assert exc.code is ErrorCode.COMPUTE_PARITY
        return
    assert fixed >= 1000 * ops.n, (fixed, ops.n)


MANY_OPS = """
import sys, time, torch
sys.path.insert(0, ".")
from bench.cost import forward_costs
from bench.errors import BenchError
from tests.security.test_compute_bound_hostile import _recurrence

model = _recurrence(50_000)
try:
    print("counted", forward_costs(model, torch.randn(16, 8)), flush=True)
except BenchError as exc:
    print(exc.code.value, exc.message, flush=True)
"""


def test_a_forward_of_too_many_ops_is_refused_before_the_count_outlasts_it() -> None:
    """50,000 steps of a width-1 RNN: ~250,000 ops a forward, four forwards counted at ~0.4 ms
    an op (minutes; 2,000 steps took 18.8 s here) for a fixed cost the count would call cheap.
    Closed: ``Work`` refuses a forward past ``MAX_OPS`` dispatched ops (2**14)."""
    try:
        out = subprocess.run([sys.executable, "-c", MANY_OPS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the count ran past 120 s (unbounded it takes about 400 s here; bounded, about 7)")
    assert out.stdout.startswith("compute_parity"), (out.stdout, out.stderr[-2000:])


# -- hole: a cost that grows faster than the batch, extrapolated from 8 and 16 rows ------------
class _Quartic(nn.Module):
    """Rows alone give the same output (the gadget is multiplied by 0), but it costs B**4: x @ x.T
    (B x B), and its outer product with itself (B**4 elements)."""

    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x @ x.T
        return self.out(x) + (a[:, :, None, None] * a[None, None, :, :]).sum() * 0


def test_a_cost_superlinear_in_the_batch_is_counted_at_the_batch_the_trainer_runs() -> None:
    """B**4: counted 16,259 an example from 8 and 16 rows; a forward of 64 rows (a track's batch)
    costs 526,588 an example (32 x; 35 ms real), of 128 rows 4.2e6 (258 x; 477 ms), of 256 rows
    3.4e7 (2064 x; 59 s and 17 GB). Counted here on fake tensors only. Closed: ``forward_costs``
    also counts forwards of the row counts the trainer runs (``forward_sizes``), and the dearest
    per example of at least a batch is held to the ratio (``bench.decide.compute_error``)."""
    model = through_capture(_Quartic(), [8])
    try:
        costs = cost.forward_costs(model, torch.randn(64, 8), *cost.forward_sizes(256, 64, [256]))
    except BenchError as exc:
        assert exc.code is ErrorCode.COMPUTE_PARITY
        return
    at_64 = cost.forward_cost(model, torch.randn(64, 8), 64) / 64
    rows, counted = zip(*costs.forwards, strict=True)
    assert dearest_per_example(*dearest_forward(rows, counted, 64), 64) >= at_64 / 2, costs


# -- hole: a cost that vanishes at exactly the rows the count runs ----------------------------
def _vanishing_at_8_and_16(form: str) -> nn.Module:
    """A sum over a ones(1, 1) expanded to (k, 2**30) rows, k a size computed from the batch n
    that is 0 at n = 8 and n = 16: ``n % 8`` x 2**28, or ``(n - 8) * (n - 16)`` x 2**24 (no
    ``mod`` needed). Every integer stays within the literal bound (2**31) at 1, 2 and 7 rows."""
    if form == "mod":
        size = [("r", "operator.mod", ["@n", 8], {}), ("k", "operator.mul", ["@r", 2**28], {})]
    else:
        size = [("a", "operator.sub", ["@n", 8], {}), ("b", "operator.sub", ["@n", 16], {}),
                ("p", "operator.mul", ["@a", "@b"], {}), ("k", "operator.mul", ["@p", 2**24], {})]
    doc = graph_of(("n", "aten.sym_size.int", ["@x", 0], {}), *size, ("o", "aten.ones.default", [[1, 1]], {}),
                   ("e", "aten.expand.default", ["@o", ["@k", 2**30]], {}), ("s", "aten.sum.default", ["@e"], {}),
                   ("z", "aten.mul.Tensor", ["@s", 0.0], {}), ("y", "aten.add.Tensor", ["@x", "@z"], {}))
    return rebuild({"train": doc, "eval": doc}, {}, torch.device("cpu"))


@pytest.mark.parametrize("form", ["mod", "polynomial"])
def test_a_cost_that_vanishes_at_the_counted_rows_is_refused_before_any_forward(form: str) -> None:
    """Counted (16, 16): 144 and 272 for 8 and 16 rows, 1,040 for 64. But ``check_output_shape``
    runs 2 rows right after the count (``bench.child.check``): 2**59 additions (mod) or 2**60
    (polynomial), the trainer held until the job's timeout; the rows-alone check runs 1 row, the
    probes 7, an epoch's last batch its remainder. (With 2**2 columns in place of 2**30, 2 rows
    take 0.2 s where 8 take 0.4 ms.) Closed: ``forward_costs`` also counts, on fake tensors, every
    row count the trainer will run a forward of (1, 2, 7, the batch, the eval batch, their
    remainders: ``forward_sizes``), refusing past ``MAX_FORWARD_COST``."""
    model = _vanishing_at_8_and_16(form)
    assert cost.forward_cost(model, torch.randn(2, 8), 2) > cost.MAX_FORWARD_COST  # what 2 rows cost
    with pytest.raises(BenchError) as raised:
        cost.forward_costs(model, torch.randn(64, 8), *cost.forward_sizes(256, 64, [256]))
    assert raised.value.code is ErrorCode.COMPUTE_PARITY


# -- checked and sound ---------------------------------------------------------------------
@pytest.mark.parametrize("label", ["bilinear", "multilabel", "isin", "recurrence"])
def test_the_hostile_models_dispatch_alike_fake_and_real(label: str) -> None:
    """No divergence between the fake count and the forward that runs: each model above goes
    through the same ops, fake or real (its hidden work is inside one kernel, or in many ops)."""
    module, shape = {
        "bilinear": (_Bilinear(16), [16]),
        "multilabel": (_MultilabelMargin(), [32]),
        "isin": (_Isin(5), [64]),
        "recurrence": (None, [8]),
    }[label]
    model = _recurrence(6) if module is None else through_capture(module, shape)
    for training in (False, True):
        model.train(training)
        x = torch.randn(ROWS, *shape)
        assert cost.forward_cost(model, x, ROWS) == pytest.approx(cost.forward_cost(model, x, ROWS, fake=False), abs=1)


def test_polygamma_of_order_below_two_has_no_walk() -> None:
    """polygamma(0) is digamma and polygamma(1) trigamma: fixed work an element whatever the
    value (reflection for x < 0), so only n >= 2 needs a price."""
    x = torch.full((4096,), -1e12 + 0.5, dtype=torch.float64)
    for n in (0, 1):
        assert torch.special.polygamma(n, x).shape == x.shape  # would take hours if it walked


def test_ops_whose_sizes_come_from_values_fail_at_capture_not_in_the_count() -> None:
    """``combinations`` (a masked select) reads values into a size: refused when captured, so the
    count never meets a data-dependent size."""
    with pytest.raises(BenchError) as raised:
        through_capture(_Head(lambda x: torch.combinations(x[0], 2).sum().expand(x.shape[0], 1)), [8])
    assert raised.value.code is ErrorCode.NOT_CAPTURABLE
