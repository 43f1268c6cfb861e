"""What a captured model's forward costs, counted by the trusted trainer before it runs one
(issue 25.12: compute parity; the compute bound from literal sizes).

The count runs the model's graph under ``FakeTensorMode``: every op computes its result's shape
and nothing else, so a graph that sums an expanded constant of 2**40 elements, or inverts a
matrix of 2**15 rows, is counted in milliseconds and refused before any real forward (until
session 33 the count ran the forward itself: such a graph held the trainer for the job's whole
timeout, and a cost that did not grow with the batch was not counted at all: a gadget summing
2**29 elements a forward made a smoke job 45 times slower and was judged).

What an op costs (``Work``), deny by default:

- every op costs ``OP_COST`` to run (a second red team measured 7-8 us a node of the trainer's
  interpreter forward, as much backward: 1,100 nodes of nothing took 146 times a tabular
  step), and reads its tensor inputs and writes its outputs: their elements, and one for each
  tensor; each tensor it takes beyond its first two, and makes beyond its first, costs
  ``TENSOR_COST`` more (a stack of 2,000 references, or an unbind of 2,000 rows, counted a few
  thousand, was 4.4-4.6 ms forward and backward, session 35); every node the interpreter calls
  costs ``NODE_COST`` besides (getitems, size arithmetic and size queries dispatch no op); a
  tensor has at most ``MAX_RANK`` dimensions; a forward may dispatch at most ``MAX_OPS`` ops (a
  red team's RNN of width 1 over 23,000 constant steps counted as little and took 82 ms a
  forward, and 94 s to count), and an arm's check count at most ``COUNT_BUDGET`` ops, nodes
  and tensors (``CountBudget``);
- matrix products, convolutions and fused attention: ``FlopCounterMode``'s FLOPs on top;
- ops whose work grows faster than what they read and write, or whose values choose a slow
  path, are priced by a formula of their own (``PRICED``: factorisations and inverses cubic in
  the matrix and at least ``MATRIX_FLOOR`` a matrix, ``matrix_exp`` at its dtype's most
  squarings, pools by their window, recurrent layers by their weights per step and at least
  ``RNN_STEP`` a step, distances by the feature width, sorts and FFTs by a logarithm,
  ``mvlgamma`` by its ``p``, convolutions off float32, grouped ones and thin ones, ``logit``,
  ``fmod`` and kin at their slowest path, and every pointwise op of 12 ns an element or more,
  forward and backward, at the power of two above its time: ``ELEMENT_PRICES``); ``polygamma``
  from order 1 is refused (its cost, or its derivative's, is a walk of |x| steps);
- an op with a complex input or output costs ``COMPLEX_ELEMENT`` an output element on top of
  any price above, unless it is a view, a copy, a fill, a sum or the arithmetic of two reals
  (``COMPLEX_CHEAP``: 4 or 8 an element, ``COMPLEX_WIDE``): complex transcendental kernels take
  45-310 ns an element;
- an op whose name says it may be one of those (``SUSPECT``) and that is neither priced nor
  known to be linear (``LINEAR``) is refused: the bench cannot say what it costs.

From the counts of ``FLOP_ROWS`` and ``2 * FLOP_ROWS`` rows, in train and eval mode, come the
cost per example (what each added row costs) and the fixed cost (what a forward costs besides);
and every row count a trainer runs a forward of is counted too (``forward_sizes``), each in its
mode: ``bench.decide.compute_error`` holds the dearest of them, per example of at least a
training batch, to the same ratio (a red team's cost was 0 at 8 and 16 rows and 2**59 at 2).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from bench.errors import BenchError, ErrorCode
from bench.oplist import KIND

FLOP_ROWS = 8
# A forward of 2 x FLOP_ROWS rows past this many counted operations (tens of CPU-seconds) is
# refused in the trainer, before the output-shape check runs the model for real: no built-in
# baseline comes within a thousandth of it. The track's compute_ratio refuses far less.
MAX_FORWARD_COST = float(2**34)
MAX_OPS = 2**14  # ops a forward may dispatch: the count follows each at ~0.3 ms on fake tensors
# Ops, graph nodes and tensors beyond an op's first (``CountBudget``) one arm's check may count in
# all: each config's forwards, at every row count and mode the trainer runs (20-60 s here). The
# everyday examples spend 60-1,600 (dynamics' GRU baseline: 132 ops a forward, 8 forwards); two
# configs of a recurrent layer over 3,000 literal steps, each forward under MAX_OPS, held the
# trusted trainer's check 171 s before the parent refused them, 85 s a config (session 35; 59 s
# with the budget).
COUNT_BUDGET = 2**16
OP_COST = 2**13  # an op through the trainer's interpreter: ~8 us forward (as much backward)
CUBIC = 4  # LU, QR, Cholesky, eigen- and singular value decompositions: a few n**3 each
# A factorisation's least cost a matrix: each is a LAPACK call of 1-7 us forward and backward up
# to 7 x 7 (third and fourth red teams, session 34: svdvals of 20,000 2 x 2 matrices took 20 ms,
# counted 9.3e5; 6 x 6 ones 3-7 us each with their backward)
MATRIX_FLOOR = 2048  # times CUBIC
RNN_STEP = OP_COST // 4  # a recurrent kernel's step: ~1.4 us forward and backward at any width
# A tensor an op takes beyond its first two, or makes beyond its first: 2.2-3.4 us a tensor forward
# and backward (stack of 2,000 references to one parameter 4.4 ms, unbind of 2,000 rows stacked
# again 4.6 ms; session 35)
TENSOR_COST = OP_COST // 4
# Each node the trainer's interpreter calls, besides what its ops cost: getitems, size arithmetic
# and size queries dispatch no op (19,000 of them 23-83 ms a step, counted nothing: red team,
# session 35), 1.2-4 us each
NODE_COST = OP_COST // 2
# The most dimensions a tensor may have: a broadcast over 1,000 dimensions of size 1 took 134 ms
# a training step (work and autograd grow as their square), ~1 s an op to count (red team)
MAX_RANK = 16
COMPLEX_ELEMENT = 256  # an element of a complex transcendental op: 45-310 ns forward and backward


def _numel(value: Any) -> int:
    return sum(t.numel() + 1 for t in tree_leaves(value) if isinstance(t, torch.Tensor))


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(max(n, 2))))


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _matrices(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """Cubic in each matrix argument (..., r, c): batch x r x c x max(r, c), at least
    ``MATRIX_FLOOR`` a matrix, times CUBIC."""
    total = 0
    for t in _tensors((args, kwargs)):
        if t.dim() >= 2:
            r, c = t.shape[-2], t.shape[-1]
            total += (t.numel() // max(r * c, 1)) * max(r * c * max(r, c), MATRIX_FLOOR)
    return float(CUBIC * total)


def _matrix_exp(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """A Pade approximant of degree up to 18 (about ten products) and one squaring for each
    doubling of the matrix's norm past about 5, a value (red team, session 33: 64 x 64 in float64
    at a norm of 1e300, about 1,000 squarings): priced at the most its dtype's range allows."""
    squarings = max((math.ceil(math.log2(torch.finfo(t.dtype).max)) for t in _tensors(args)
                     if t.is_floating_point() or t.is_complex()), default=128)
    return float((10 + squarings) * 2.0 * _matrices(args, kwargs, out) / CUBIC)


def _kernel_taps(kernel: Any) -> int:
    sizes = [int(k) for k in (kernel if isinstance(kernel, list | tuple) else [kernel])]
    return math.prod(max(k, 1) for k in sizes)


def _pool(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """A pool reads its window once per output element."""
    kernel = args[1] if len(args) > 1 else kwargs.get("kernel_size", 1)
    return float(_tensors(out)[0].numel() * _kernel_taps(kernel))


def _window(x: torch.Tensor, y: torch.Tensor, dims: int) -> int:
    """The input elements one output element spans over the last ``dims`` dimensions: the
    input's extent over the output's, plus one, in each."""
    return math.prod(-(-x.shape[-d] // max(y.shape[-d], 1)) + 1 for d in range(1, dims + 1))


def _adaptive_pool(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """An adaptive pool reads its window (``_window``) once per output element."""
    y = _tensors(out)[0]
    return float(y.numel() * _window(args[0], y, len(args[1]) if len(args) > 1 else 1))


def _resampling(taps: int) -> Callable[[Sequence[Any], dict[str, Any], Any], float]:
    """Upsampling or a grid sample: each output element reads ``taps`` inputs a dimension (one
    for nearest, two for linear, four for cubic) over its window (``_window``: an anti-aliased
    downsampling reads the whole window)."""

    def price(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
        x, y = args[0], _tensors(out)[0]
        dims = max(x.dim() - 2, 1)
        return float(y.numel() * taps**dims * _window(x, y, dims))

    return price


def _rnn_layer(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``mkldnn_rnn_layer(input, w_ih, w_hh, ...)``: each step and row
    multiplies by both weights, and each step costs at least ``RNN_STEP`` (a third red team,
    session 34: an LSTM of width 1 over 30,000 constant steps counted 24 an operation a step, and
    took 43 ms a training step next to the tabular baseline's 0.1-0.6; the batched path runs its
    steps one at a time)."""
    x = args[0]
    steps_rows = x.numel() // max(x.shape[-1], 1)
    steps = x.shape[0] if x.dim() else 1  # time first here, whatever the module's batch_first
    return float(2 * steps_rows * (args[1].numel() + args[2].numel()) + RNN_STEP * steps)


def _distances(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """Each output distance reads one row of each input: its width in features, and a ``pow``
    (32, ``_pow``) for each of them where p is not 0, 1, 2 or infinity (a fourth red team, session
    34: ``cdist`` of p = 3.7, 25 times a smoke step)."""
    # p: _cdist_forward(x1, x2, p, mode), _pdist_forward(x, p); _euclidean_dist(x1, x2) is 2
    p = next((a for a in args[1:3] if isinstance(a, int | float) and not isinstance(a, bool)), 2.0)
    per_feature = 3 if float(p) in (0.0, 1.0, 2.0, math.inf) else 32
    return float(per_feature * _tensors(out)[0].numel() * args[0].shape[-1])


def _attention(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """q (..., L, E) against k (..., S, E) and v (..., S, Ev): two products of L x S x E."""
    q, k, v = args[0], args[1], args[2]
    batch = q.numel() // max(q.shape[-1] * q.shape[-2], 1)
    return float(2 * batch * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1]))


def _addbmm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``addbmm(input, b1 (B, n, k), b2 (B, k, m))``: 2 B n k m."""
    return float(2 * args[1].numel() * args[2].shape[-1])


def _sorting(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    return float(_log2(_numel((args, kwargs))) * _numel((args, kwargs)))


def _fourier(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    return float(_log2(_numel(out)) * (_numel((args, kwargs)) + _numel(out)))


def _polygamma(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``polygamma(n, x)``: digamma is a few steps an element; from n = 2 on the kernel's Hurwitz
    zeta walks from a negative x up to 9 one step at a time (x = -1e6 + 0.5: 13 ms an element;
    red team, session 33), and trigamma's derivative is that walk (a second red team: 551 ms a
    training step, its forward 0.2 ms): a cost of values, which a count of shapes cannot bound,
    so from n = 1 on it is refused."""
    n = args[0] if args else kwargs.get("n", 0)
    if not isinstance(n, int) or n >= 1:  # trigamma's own derivative is polygamma(2) (red team, session 33)
        raise BenchError(ErrorCode.COMPUTE_PARITY, "The model calls polygamma of order 1 or more, whose kernel or "
                         "derivative walks |x| steps an element: the bench cannot bound its cost, so it is not "
                         "judged.", "Use digamma (polygamma of order 0), or another function.")
    return float(32 * _numel(out))


def _trilinear(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, ...)`` (what ``bilinear``
    calls): each input takes size-1 dimensions at its ``expand`` positions, and the product runs
    over the union of every dimension: 2 x the product of the largest size in each (a
    Bilinear(n, n, n) costs 2 n**3 an example; it was counted 3 n, red team, session 33)."""
    shapes = []
    for tensor, expand in zip(args[:3], args[3:6], strict=True):
        shape = list(tensor.shape)
        for d in sorted(expand):
            shape.insert(d, 1)
        shapes.append(shape)
    return float(2 * math.prod(max(shape[d] for shape in shapes) for d in range(len(shapes[0]))))


def _pairs_per_row(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``multilabel_margin_loss_forward(x, target, ...)``: every listed target against every
    class, width**2 a row."""
    x = args[0]
    return float(x.numel() * (x.shape[-1] if x.dim() else 1))


def _isin(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``isin(elements, test_elements)``: each element against each test element, or a sort of
    both (the kernel picks by sizes): the dearer of the two."""
    n, m = _numel(args[0]), _numel(args[1]) if len(args) > 1 else 1
    return float(max(n * m, 4 * (n + m) * _log2(n + m)))


def _per_element(k: int, when: Callable[[Sequence[Any], dict[str, Any]], bool] | None = None,
                 ) -> Callable[[Sequence[Any], dict[str, Any], Any], float]:
    """A pointwise op whose kernel takes a slow path its values choose, priced at that path: ``k``
    an output element (``when``: only for such arguments). A second red team (session 33)
    measured, one thread: ``logit`` outside [0, 1] 250 ns an element (0.4 inside), the incomplete
    gamma functions' series about 100 times a ``sin``, ``fmod`` and
    ``remainder`` of -inf or far exponents in float64 60-120 ns, integer ``pow`` of a huge
    exponent 60 ns, ``i0``, ``digamma``, ``log_ndtr`` and ``sinc`` of extreme values 17-34 ns:
    240,000 logits of 2.0 fitted the free allowance and took 30 ms a forward."""

    def price(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
        return float(k * _numel(out)) if when is None or when(args, kwargs) else 0.0

    return price


def _integer(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    return any(not (t.is_floating_point() or t.is_complex()) for t in _tensors(args[:1]))


def _rounded(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    return kwargs.get("rounding_mode") is not None


# The pointwise ops of 12 ns an element or more, forward and backward, in float32 or float64 at
# their dearest values, at the power of two at or above their time (benchmarks/pointwise_prices.py
# --min-ns 12, session 34, this 2-core host, and a fourth red team's runs of it: erf 23, exp 21,
# log 20, float64 sqrt 20; the names the count sees: aliases and ``special_`` forms reach it as
# these). Below 12 ns an op is a few times an add's 2-3 ns at most.
ELEMENT_PRICES = {
    "acosh": 16, "atan2": 16, "gelu": 16, "log2": 16, "maximum": 16, "minimum": 16,
    "acos": 32, "asin": 32, "asinh": 32, "cos": 32, "sin": 32, "tan": 32, "logaddexp2": 32, "mish": 32,
    "erf": 32, "exp": 32, "log": 32, "log10": 32, "sqrt": 32, "clamp": 32, "renorm": 32, "logspace": 32,
    "erfc": 32, "special_ndtr": 32, "special_entr": 32, "logaddexp": 64, "erfinv": 64, "lgamma": 64,
    "special_log_ndtr": 64, "xlogy": 64, "special_xlog1py": 64, "i0": 128, "digamma": 128, "sinc": 128,
    # normal draws, one element at a time: 20-38 ns an element in float64 (fourth red team)
    "randn": 32, "normal": 32, "randn_like": 32,
}


def _pow(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``pow``: 30 ns an element forward and backward in float (``ELEMENT_PRICES``' rule); an
    integer one of a huge exponent 60 ns forward (a second red team, session 33)."""
    return float((64 if _integer(args, kwargs) else 32) * _numel(out))


THIN = 8  # output channels a group below which a convolution is priced as a grouped one
# input channels a group times taps (what each output element sums) below which it is too: a
# fourth red team (session 34) ran 1 x 1 convolutions from one channel into eight at 9 ns a
# counted operation, 67-126 times a cifar10 step
THIN_REDUCTION = 16


def _convolution(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """On top of ``FlopCounterMode``'s FLOPs: a convolution off float32 (float64 goes to a slow
    kernel: 130 ps a FLOP against 7) at 16 times its FLOPs, and a grouped one (depthwise: each
    output reads few inputs, a slow kernel), one of fewer than ``THIN`` output channels a group
    (the kernel vectorises over them) or of fewer than ``THIN_REDUCTION`` inputs an output element
    16 more an output element and tap (a second red team, session 33: a depthwise dilated float64
    convolution at 824 ps a FLOP; a third, session 34: a float32 convolution of one channel into
    one at 3.9-4.7 ns a FLOP forward and backward, against 66 ps for 16 into 32, ten of them 40-80
    times a cifar10 step)."""
    x, weight, y = args[0], args[1], _tensors(out)[0]
    groups = int(args[8]) if len(args) > 8 else int(kwargs.get("groups", 1))
    transposed = bool(args[6]) if len(args) > 6 else False
    outputs = weight.shape[1] * groups if transposed else weight.shape[0]
    taps = math.prod(weight.shape[2:])
    flops = 2 * max(x.numel(), y.numel()) * math.prod(weight.shape[1:])
    extra = 15.0 * flops if x.dtype not in (torch.float32, torch.bfloat16) else 0.0
    inputs = weight.shape[0] // max(groups, 1) if transposed else weight.shape[1]
    thin = groups > 1 or outputs // max(groups, 1) < THIN or inputs * taps < THIN_REDUCTION
    return extra + (16.0 * y.numel() * taps if thin else 0.0)


def _mvlgamma(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``mvlgamma(x, p)`` sums p log-gammas per element: 64 each (``ELEMENT_PRICES``' lgamma)."""
    p = args[1] if len(args) > 1 else kwargs.get("p", 1)
    return float(64 * _numel(out) * max(int(p), 1))


PRICED: dict[str, Callable[[Sequence[Any], dict[str, Any], Any], float]] = {
    **{f"aten.{name}": _matrices for name in (
        "linalg_inv_ex", "_linalg_det", "_linalg_slogdet", "_linalg_eigh", "_linalg_svd", "_linalg_solve_ex",
        "linalg_cholesky_ex", "linalg_lu_factor_ex", "linalg_lu", "linalg_qr", "_linalg_eigvals", "linalg_eig",
        "linalg_lstsq", "linalg_solve_triangular", "triangular_solve", "linalg_householder_product",
        "cholesky_solve", "_cholesky_solve_helper", "linalg_lu_solve", "lu_solve", "geqrf", "ormqr",
        "linalg_ldl_factor_ex", "linalg_ldl_solve", "cholesky_inverse")},
    "aten.linalg_matrix_exp": _matrix_exp,
    **{f"aten.{name}": _pool for name in (
        "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
        "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
        "fractional_max_pool2d", "fractional_max_pool3d")},
    **{f"aten.{name}": _adaptive_pool for name in (
        "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d", "adaptive_max_pool3d",
        "adaptive_avg_pool1d", "adaptive_max_pool1d")},
    **{f"aten.{name}": _resampling(1) for name in (
        "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d", "_upsample_nearest_exact3d")},
    **{f"aten.{name}": _resampling(2) for name in (
        "upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d", "_upsample_bilinear2d_aa")},
    **{f"aten.{name}": _resampling(4) for name in (
        "upsample_bicubic2d", "_upsample_bicubic2d_aa", "grid_sampler_2d", "grid_sampler_3d")},
    "aten.mkldnn_rnn_layer": _rnn_layer,
    "aten._cdist_forward": _distances,
    "aten._pdist_forward": _distances,
    "aten._euclidean_dist": _distances,
    "aten._scaled_dot_product_flash_attention_for_cpu": _attention,
    "aten._scaled_dot_product_attention_math": _attention,
    "aten.addbmm": _addbmm,
    **{f"aten.{name}": _sorting for name in (
        "sort", "topk", "kthvalue", "median", "nanmedian", "mode", "msort", "argsort", "searchsorted",
        "bucketize", "quantile", "nanquantile")},
    **{f"aten.{name}": _fourier for name in ("_fft_r2c", "_fft_c2r", "_fft_c2c")},
    "aten.mvlgamma": _mvlgamma,
    "aten.polygamma": _polygamma,
    "aten.igamma": _per_element(2000),  # a series of up to 2,000 terms an element
    "aten.igammac": _per_element(2000),
    "aten._trilinear": _trilinear,
    "aten.multilabel_margin_loss_forward": _pairs_per_row,
    "aten.isin": _isin,
    "aten.convolution": _convolution,
    "aten.logit": _per_element(256),
    "aten.fmod": _per_element(128),
    "aten.remainder": _per_element(128),
    "aten.floor_divide": _per_element(64),
    "aten.div": _per_element(64, _rounded),
    "aten.pow": _pow,
    # the rest of the dear pointwise ops, at their slowest values forward and backward
    # (benchmarks/pointwise_prices.py, session 34: a third red team's 60 gammaln of each input
    # element were 140 times a cifar10 step; an add measures 2-3 ns and counts about 3): an
    # op of 12 ns an element or more costs the power of two at or above its nanoseconds
    **{f"aten.{name}": _per_element(price) for name, price in ELEMENT_PRICES.items()},
}

# Names that may hide work beyond what an op reads and writes: such an op must be priced above,
# counted by FlopCounterMode, or listed in LINEAR (checked to read each input element a bounded
# number of times), or the count refuses it.
SUSPECT = re.compile(
    r"(?:^|_)(?:linalg|cholesky|solve|det|slogdet|logdet|eig\w*|svd\w*|qr|lstsq|lu|inv|inverse|pinv|matrix|"
    r"\w*pool\w*|rnn|lstm|gru|\w*dist|\w*fft\w*|i?stft|\w*sort\w*|topk|kthvalue|\w*median|mode|\w*quantile|"
    r"bucketize|\w*gamma\w*|\w*mm|\w*mv|conv\w*|\w*attention\w*|\w*dot|einsum|upsample\w*|grid\w*|im2col|"
    r"col2im|unfold\w*|embedding\w*|hist\w*|bincount|ctc\w*|\w*power|kron|cross|tensordot|vander|cartesian\w*|"
    r"combinations|\w*interp\w*|\w*bessel\w*|zeta|\w*linear|multilabel\w*|isin)(?:$|_|\d)"
)
LINEAR = frozenset(f"aten.{name}" for name in (
    # each reads its inputs and writes its outputs a bounded number of times per element
    "linalg_vector_norm", "linalg_cross", "_linalg_check_errors", "linalg_vander", "linalg_diagonal",
    "mv", "addmv", "dot", "vdot", "addr", "im2col", "col2im", "unfold", "unfold_copy", "embedding",
    "histc", "bincount", "affine_grid_generator", "float_power", "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
))
# What a complex tensor may go through at its elements' price: views, copies and the arithmetic
# of two reals; every other op with a complex input or output costs COMPLEX_ELEMENT an output
# element (a third red team, session 34: complex acos, cosh, log, pow at 75-310 ns an element
# forward and backward, counted as an add; ten acosh of a constant made a smoke job 12 times a
# baseline copy's). Products, convolutions and FFTs are counted by their own rules.
COMPLEX_CHEAP = frozenset(f"aten.{name}" for name in (
    "add", "sub", "mul", "neg", "conj", "_conj", "conj_physical", "resolve_conj", "resolve_neg", "real", "imag",
    "view_as_real", "view_as_complex", "complex", "abs", "clone", "copy", "copy_", "_to_copy", "sum", "mean",
    "cat", "stack", "alias", "lift_fresh", "detach", "full", "zeros", "ones", "zeros_like", "ones_like",
    "full_like", "scalar_tensor",
))
# ... each at 4 an element in complex64 and 8 in complex128 (a fourth red team, session 34:
# complex128 mul 24-37 ns an element forward and backward)
COMPLEX_WIDE = {torch.complex64: 4, torch.complex128: 8}


class Work(TorchDispatchMode):  # type: ignore[no-untyped-call]  # (torch's, untyped)
    """Counts the operations a forward's ops cost (the module docstring's rules); under a
    ``FakeTensorMode`` below it, nothing runs."""

    def __init__(self, flop_counted: frozenset[Any], budget: CountBudget | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.flop_counted = flop_counted
        self.elements = 0.0
        self.ops = 0
        self.budget = budget

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        packet = func.overloadpacket
        name = str(packet)
        if name == "prim.device":  # a query fake tensors make of their inputs' devices: no work
            return func(*args, **kwargs)
        self.ops += 1
        if self.ops > MAX_OPS:
            raise BenchError(ErrorCode.COMPUTE_PARITY,
                             f"A forward of the model runs more than {MAX_OPS} ops (counted by the bench): it is "
                             "not judged.", "Fewer, larger ops: a loop over steps of a literal length "
                             "unrolls into the graph; batch it into tensor ops.")
        given = _tensors((args, kwargs))
        _check_rank(given)
        if self.budget is not None:  # (the count's own time grows with the tensors too: spent first)
            self.budget.spend(1 + max(0, len(given) - 2))
        out = func(*args, **kwargs)
        made = _tensors(out)
        _check_rank(made)
        if self.budget is not None and len(made) > 1:
            self.budget.spend(len(made) - 1)  # (unbind into 19,000 rows: 3.3 s a forward to count)
        self.elements += (OP_COST + sum(t.numel() + 1 for t in given + made)
                          + TENSOR_COST * (max(0, len(given) - 2) + max(0, len(made) - 1)))
        priced = PRICED.get(name)
        if priced is not None:
            self.elements += priced(args, kwargs, out)
        elif packet not in self.flop_counted and name not in LINEAR and SUSPECT.search(name.split(".", 1)[-1]):
            raise BenchError(ErrorCode.COMPUTE_PARITY,
                             f"The model calls {name}, whose cost the bench cannot count: it is not judged.",
                             "Build the model from listed ops whose cost is known (docs/idea-contract.md, "
                             "compute): matrix products, convolutions, pools, norms, elementwise ops.")
        if (packet not in self.flop_counted and not name.startswith("aten._fft")
                and KIND.get(str(func)) not in ("shape", "size", "check")):
            widths = [COMPLEX_WIDE[t.dtype] for t in _tensors((args, kwargs, out)) if t.dtype in COMPLEX_WIDE]
            if widths:  # complex: on top of any price above
                self.elements += (max(widths) if name in COMPLEX_CHEAP else COMPLEX_ELEMENT) * _numel(out)
        return out


def _never_compiled(mode: type) -> None:
    """Let ``mode``'s ``__torch_dispatch__`` run without importing ``torch._dynamo``.

    ``TorchDispatchMode`` wraps each subclass's ``__torch_dispatch__`` in ``torch._disable_dynamo``,
    whose first call imports all of ``torch._dynamo`` (about 1 CPU-second, as much as ``import
    torch``) only to keep a ``torch.compile`` out of the mode's frames. The count compiles
    nothing, so the wrapper is handed the function itself as its disabled form (the cache it
    fills on that first call): the same function runs, without the import. A torch that wraps
    otherwise is left alone (the import comes back, nothing else changes). (``FakeTensorMode``
    imports dynamo's config, hence dynamo, when it is made: a trainer forked from a fork server
    has it already, ``bench.child.prepare``.)"""
    raw = getattr(mode.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if callable(raw) and getattr(raw, "__dynamo_disable", None) is None:
        setattr(raw, "__dynamo_disable", raw)  # noqa: B010 - a literal name, never mangled


def _check_rank(tensors: list[torch.Tensor]) -> None:
    deepest = max((t.dim() for t in tensors), default=0)
    if deepest > MAX_RANK:
        raise BenchError(ErrorCode.COMPUTE_PARITY,
                         f"The model makes a tensor of {deepest} dimensions; the bench counts at most {MAX_RANK}: "
                         "it is not judged.", "Reshape to fewer dimensions (merge the ones of size 1).")


def _nodes(model: nn.Module) -> int:
    """The nodes the interpreter calls in one forward of a captured model in its mode (0 for
    another module: a test's)."""
    graphs = getattr(model, "_graphs", None)
    if not isinstance(graphs, dict):
        return 0
    return len(graphs["train" if model.training else "eval"][0])


class CountBudget:
    """The ops, graph nodes and tensors beyond an op's first two in or first one out that an
    arm's check may still count (``COUNT_BUDGET``), shared by all its forwards: the count's own
    time is bounded per arm, not per forward (``MAX_OPS``) alone."""

    def __init__(self, ops: int | None = None) -> None:
        self.total = COUNT_BUDGET if ops is None else ops
        self.left = self.total

    def spend(self, ops: int = 1) -> None:
        """``ops`` more counted (an op, a graph's nodes, an op's tensors beyond its first); past
        the budget, the arm is not judged."""
        self.left -= ops
        if self.left < 0:
            raise BenchError(
                ErrorCode.COMPUTE_PARITY,
                f"Counting the model's forwards takes more than {self.total} ops, nodes and tensors in all "
                "(each config's forward at every row count the trainer runs, counted by the bench): it is "
                "not judged.",
                "Declare fewer configs (HPARAMS), or build the model from fewer, larger ops: a loop over "
                "steps of a literal length unrolls into the graph; batch it into tensor ops.")


def forward_cost(model: nn.Module, x: torch.Tensor, rows: int, fake: bool = True,
                 budget: CountBudget | None = None) -> float:
    """The operations one forward of ``model`` on ``rows`` rows shaped as ``x``'s costs
    (``Work``), counted on fake tensors: nothing is computed (``fake=False``, for tests: the
    same count of a forward on ``x[:rows]``, computed). Each node, op and tensor counted is
    spent from ``budget``, when given."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils import flop_counter
    from torch.utils.flop_counter import FlopCounterMode

    for mode in (flop_counter._FlopCounterMode, Work, FakeTensorMode):
        _never_compiled(mode)
    nodes = _nodes(model)
    if budget is not None:
        budget.spend(nodes)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        if fake:
            stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
            batch = torch.zeros((rows, *x.shape[1:]), dtype=x.dtype)
        else:
            batch = x[:rows]
        counter = stack.enter_context(FlopCounterMode(display=False))
        work = stack.enter_context(Work(frozenset(counter.flop_registry), budget))
        model(batch)
    return float(counter.get_total_flops() + work.elements + NODE_COST * nodes)


@dataclass(frozen=True)
class Costs:
    """What a model's forwards cost (``forward_costs``)."""

    per_example: float  # what each added row costs, from 8 and 16 rows
    fixed: float  # what a forward of 8 rows costs besides its rows
    forwards: tuple[tuple[int, float], ...]  # (rows, cost) of each forward counted


def forward_sizes(n_train: int, batch_size: int, eval_rows: Sequence[int],
                  probed: bool = True) -> tuple[set[int], set[int]]:
    """The row counts of the forwards the trainer runs (train mode, eval mode): the training
    batch and an epoch's last, shorter one, the output check's 2 rows and the batched probe's
    ``FLOP_ROWS``; the evaluation in chunks of ``EVAL_CHUNK`` (and each split's last chunk), the
    rows predicted alone and the mechanism check's 7 (``probed``: a probe is declared). A red
    team (session 33) made a cost zero at 8 and 16 rows and 2**59 at 2 (a size ``n % 8`` from
    the batch), and one that grew as the batch's fourth power: every count the trainer runs is
    counted."""
    from bench.trainer import EVAL_CHUNK

    train = {2, FLOP_ROWS, 2 * FLOP_ROWS, batch_size, n_train % batch_size}
    evaluate = {1, FLOP_ROWS, 2 * FLOP_ROWS} | ({7} if probed else set())
    for n in eval_rows:
        evaluate |= {min(n, EVAL_CHUNK), n % EVAL_CHUNK}
    return train - {0}, evaluate - {0}


def _one_graph(model: nn.Module) -> bool:
    """Whether a captured model runs the same graph in train and eval mode (no dropout, no
    batch statistics): then a count in one mode is the count in both."""
    graphs = getattr(model, "_graphs", None)
    if not isinstance(graphs, dict) or set(graphs) != {"train", "eval"}:
        return False
    return bool(str(graphs["train"][0].graph) == str(graphs["eval"][0].graph))


def forward_costs(model: nn.Module, x: torch.Tensor, train_rows: set[int] | None = None,
                  eval_rows: set[int] | None = None, budget: CountBudget | None = None) -> Costs:
    """What each added row of a forward costs (the count of ``2 * FLOP_ROWS`` rows less that of
    ``FLOP_ROWS``, over ``FLOP_ROWS``), what a forward costs besides (a weight transposed once,
    a constant the model builds), in eval mode and in train mode, the larger of each; and the
    cost of a forward of every row count in ``train_rows`` (train mode) and ``eval_rows`` (eval
    mode): ``forward_sizes``. A weight-tied block applied twenty times holds one block's
    parameters and costs twenty. A forward past ``MAX_FORWARD_COST`` per ``2 * FLOP_ROWS`` rows is
    refused at once, and so is one the count cannot follow (it reads a tensor's values as a
    size): the bench cannot bound it; and so are forwards past what ``budget`` (an arm's, shared
    by its configs: ``CountBudget``) leaves to count."""
    was_training = model.training
    per_example, fixed = 0.0, 0.0
    forwards: dict[int, float] = {}
    sizes = {True: (train_rows or set()) | {FLOP_ROWS, 2 * FLOP_ROWS},
             False: (eval_rows or set()) | {FLOP_ROWS, 2 * FLOP_ROWS}}
    modes: tuple[bool, ...] = (False, True)
    if _one_graph(model):  # the same ops in either mode: each row count once
        sizes[False] |= sizes[True]
        modes = (False,)
    try:
        for training in modes:
            model.train(training)
            counted = {}
            for rows in sorted(sizes[training]):
                counted[rows] = forward_cost(model, x, rows, budget=budget)
                limit = MAX_FORWARD_COST * max(1.0, rows / (2 * FLOP_ROWS))
                if counted[rows] > limit:
                    raise BenchError(ErrorCode.COMPUTE_PARITY,
                                     f"A forward of {rows} row{'s' * (rows != 1)} costs {counted[rows]:.4g} operations (counted by "
                                     f"the bench), past {limit:.4g}: the model is not judged.")
                forwards[rows] = max(forwards.get(rows, 0.0), counted[rows])
            small, large = counted[FLOP_ROWS], counted[2 * FLOP_ROWS]
            row = max(0.0, large - small) / FLOP_ROWS
            per_example, fixed = max(per_example, row), max(fixed, small - FLOP_ROWS * row)
    finally:
        model.train(was_training)
    return Costs(per_example, max(fixed, 0.0), tuple(sorted(forwards.items())))
