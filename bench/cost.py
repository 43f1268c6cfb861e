"""What a captured model's forward costs, counted by the trusted trainer before it runs one
(issue 25.12: compute parity; the compute bound from literal sizes).

The count runs the model's graph under ``FakeTensorMode``: every op computes its result's shape
and nothing else, so a graph that sums an expanded constant of 2**40 elements, or inverts a
matrix of 2**15 rows, is counted in milliseconds and refused before any real forward (until
session 33 the count ran the forward itself: such a graph held the trainer for the job's whole
timeout, and a cost that did not grow with the batch was not counted at all: a gadget summing
2**29 elements a forward made a smoke job 45 times slower and was judged).

What an op costs (``Work``), deny by default:

- every op reads its tensor inputs and writes its outputs: their elements, and one for each
  tensor (a split into four million empty pieces costs four million);
- matrix products, convolutions and fused attention: ``FlopCounterMode``'s FLOPs on top;
- ops whose work grows faster than what they read and write are priced by a formula of their
  own (``PRICED``: factorisations and inverses cubic in the matrix, pools by their window,
  recurrent layers by their weights per step, distances by the feature width, sorts and FFTs by
  a logarithm, ``mvlgamma`` by its ``p``);
- an op whose name says it may be one of those (``SUSPECT``) and that is neither priced nor
  known to be linear (``LINEAR``) is refused: the bench cannot say what it costs.

From the counts of ``FLOP_ROWS`` and ``2 * FLOP_ROWS`` rows, in train and eval mode, come the
cost per example (what each added row costs) and the fixed cost (what a forward costs besides);
``bench.decide.compute_error`` spreads the fixed cost over the track's batch.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from bench.errors import BenchError, ErrorCode

FLOP_ROWS = 8
# A forward of 2 x FLOP_ROWS rows past this many counted operations (tens of CPU-seconds) is
# refused in the trainer, before the output-shape check runs the model for real: no built-in
# baseline comes within a thousandth of it. The track's compute_ratio refuses far less.
MAX_FORWARD_COST = float(2**34)
CUBIC = 4  # LU, QR, Cholesky, eigen- and singular value decompositions: a few n**3 each


def _numel(value: Any) -> int:
    return sum(t.numel() + 1 for t in tree_leaves(value) if isinstance(t, torch.Tensor))


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(max(n, 2))))


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _matrices(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """Cubic in each matrix argument (..., r, c): batch x r x c x max(r, c), times CUBIC."""
    total = 0
    for t in _tensors((args, kwargs)):
        if t.dim() >= 2:
            r, c = t.shape[-2], t.shape[-1]
            total += (t.numel() // max(r * c, 1)) * r * c * max(r, c)
    return float(CUBIC * total)


def _matrix_exp(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    # a Pade approximant of degree up to 18 and squarings: about twenty products
    return 5.0 * _matrices(args, kwargs, out)


def _window(kernel: Any) -> int:
    sizes = [int(k) for k in (kernel if isinstance(kernel, list | tuple) else [kernel])]
    return math.prod(max(k, 1) for k in sizes)


def _pool(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """A pool reads its window once per output element."""
    kernel = args[1] if len(args) > 1 else kwargs.get("kernel_size", 1)
    return float(_tensors(out)[0].numel() * _window(kernel))


def _adaptive_pool(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """An adaptive pool's window is about the input's extent over the output's, plus one."""
    x, y = args[0], _tensors(out)[0]
    dims = len(args[1]) if len(args) > 1 else 1
    window = math.prod(-(-x.shape[-d] // max(y.shape[-d], 1)) + 1 for d in range(1, dims + 1))
    return float(y.numel() * window)


def _resample(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """Upsampling or a grid sample: each output element reads at most 4**d taps of a window the
    input's extent over the output's wide (anti-aliased downsampling reads the whole window)."""
    x, y = args[0], _tensors(out)[0]
    dims = max(x.dim() - 2, 1)
    window = math.prod(-(-x.shape[-d] // max(y.shape[-d], 1)) + 1 for d in range(1, dims + 1))
    return float(y.numel() * 4**dims * window)


def _rnn_layer(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``mkldnn_rnn_layer(input, w_ih, w_hh, ...)``: each step and row multiplies by both weights."""
    x = args[0]
    steps_rows = x.numel() // max(x.shape[-1], 1)
    return float(2 * steps_rows * (args[1].numel() + args[2].numel()))


def _distances(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """Each output distance reads one row of each input: its width in features."""
    return float(3 * _tensors(out)[0].numel() * args[0].shape[-1])


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


def _mvlgamma(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float:
    """``mvlgamma(x, p)`` sums p log-gammas per element."""
    p = args[1] if len(args) > 1 else kwargs.get("p", 1)
    return float(_numel(out) * max(int(p), 1))


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
        "fractional_max_pool2d", "fractional_max_pool3d", "max_unpool2d", "max_unpool3d")},
    **{f"aten.{name}": _adaptive_pool for name in (
        "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d", "adaptive_max_pool3d",
        "adaptive_avg_pool1d", "adaptive_max_pool1d")},
    **{f"aten.{name}": _resample for name in (
        "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
        "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa",
        "grid_sampler_2d", "grid_sampler_3d")},
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
}

# Names that may hide work beyond what an op reads and writes: such an op must be priced above,
# counted by FlopCounterMode, or listed in LINEAR (checked to read each input element a bounded
# number of times), or the count refuses it.
SUSPECT = re.compile(
    r"(?:^|_)(?:linalg|cholesky|solve|det|slogdet|logdet|eig\w*|svd\w*|qr|lstsq|lu|inv|inverse|pinv|matrix|"
    r"\w*pool\w*|rnn|lstm|gru|\w*dist|\w*fft\w*|i?stft|\w*sort\w*|topk|kthvalue|\w*median|mode|\w*quantile|"
    r"bucketize|\w*gamma\w*|\w*mm|\w*mv|conv\w*|\w*attention\w*|\w*dot|einsum|upsample\w*|grid\w*|im2col|"
    r"col2im|unfold\w*|embedding\w*|hist\w*|bincount|ctc\w*|\w*power|kron|cross|tensordot|vander|cartesian\w*|"
    r"combinations|\w*interp\w*|\w*bessel\w*|zeta)(?:$|_|\d)"
)
LINEAR = frozenset(f"aten.{name}" for name in (
    # each reads its inputs and writes its outputs a bounded number of times per element
    "linalg_vector_norm", "linalg_cross", "_linalg_check_errors", "linalg_vander", "linalg_diagonal",
    "mv", "addmv", "dot", "vdot", "addr", "im2col", "col2im", "unfold", "unfold_copy", "embedding",
    "histc", "bincount", "affine_grid_generator", "float_power", "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "lgamma", "digamma", "polygamma", "special_polygamma", "special_multigammaln", "special_gammaln",
    "special_digamma", "special_psi", "igamma", "igammac", "special_gammainc", "special_gammaincc",
    "special_zeta", "special_bessel_j0", "special_bessel_j1", "special_bessel_y0", "special_bessel_y1",
    "special_modified_bessel_i0", "special_modified_bessel_i1", "special_modified_bessel_k0",
    "special_modified_bessel_k1", "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1",
    "special_spherical_bessel_j0",
))


class Work(TorchDispatchMode):  # type: ignore[no-untyped-call]  # (torch's, untyped)
    """Counts the operations a forward's ops cost (the module docstring's rules); under a
    ``FakeTensorMode`` below it, nothing runs."""

    def __init__(self, flop_counted: frozenset[Any]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.flop_counted = flop_counted
        self.elements = 0.0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        name = str(packet)
        if name == "prim.device":  # a query fake tensors make of their inputs' devices: no work
            return out
        self.elements += _numel((args, kwargs)) + _numel(out)
        priced = PRICED.get(name)
        if priced is not None:
            self.elements += priced(args, kwargs, out)
        elif packet not in self.flop_counted and name not in LINEAR and SUSPECT.search(name.split(".", 1)[-1]):
            raise BenchError(ErrorCode.COMPUTE_PARITY,
                             f"The model calls {name}, whose cost the bench cannot count: it is not judged.",
                             "Build the model from listed ops whose cost is known (docs/idea-contract.md, "
                             "compute): matrix products, convolutions, pools, norms, elementwise ops.")
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


def forward_cost(model: nn.Module, rows: torch.Tensor, fake: bool = True) -> float:
    """The operations one forward of ``model`` on ``rows`` costs (``Work``), counted on fake
    tensors: nothing is computed (``fake=False``, for tests: the same count, computed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils import flop_counter
    from torch.utils.flop_counter import FlopCounterMode

    for mode in (flop_counter._FlopCounterMode, Work, FakeTensorMode):
        _never_compiled(mode)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        if fake:
            rows = stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True)).from_tensor(rows)
        counter = stack.enter_context(FlopCounterMode(display=False))
        work = stack.enter_context(Work(frozenset(counter.flop_registry)))
        model(rows)
    return float(counter.get_total_flops() + work.elements)


def forward_costs(model: nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """``(per example, fixed)``: what each added row of a forward costs (the count of ``2 *
    FLOP_ROWS`` rows less that of ``FLOP_ROWS``, over ``FLOP_ROWS``) and what a forward costs
    besides (a weight transposed once, a constant the model builds), in eval mode and in train
    mode, the larger of each. A weight-tied block applied twenty times holds one block's
    parameters and costs twenty. Refused past ``MAX_FORWARD_COST``; a forward the count cannot
    follow (it reads a tensor's values as a size) is refused too: the bench cannot bound it."""
    was_training = model.training
    per_example, fixed = 0.0, 0.0
    try:
        for training in (False, True):
            model.train(training)
            small, large = (forward_cost(model, x[:n]) for n in (FLOP_ROWS, 2 * FLOP_ROWS))
            if large > MAX_FORWARD_COST:
                raise BenchError(ErrorCode.COMPUTE_PARITY,
                                 f"A forward of {2 * FLOP_ROWS} rows costs {large:.4g} operations (counted by the "
                                 f"bench), past {MAX_FORWARD_COST:.4g}: the model is not judged.")
            row = max(0.0, large - small) / FLOP_ROWS
            per_example, fixed = max(per_example, row), max(fixed, small - FLOP_ROWS * row)
    finally:
        model.train(was_training)
    return per_example, max(fixed, 0.0)
