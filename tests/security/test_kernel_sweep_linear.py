"""Red team, session 32: the "linear", "shape", "reduce", "complex", "pointwise", "size" and
"check" kinds of ``bench.oplist`` called with literals and shapes a hand-written graph sets.

The harness of ``tests.security.test_kernel_shapes`` (``_doc``, ``_run``, ``_in_child``) builds
each graph as the trainer does (``bench.graph.build_graph``) and runs it as ``Program``, one model
at a time and under ``torch.func.vmap`` / ``vmap(grad)`` over a group of runs (what
``bench.vectorized`` does). The holes found, each closed by a guard (``bench.graph.GUARDS``;
each test below was seen failing with its guard taken out):

- ``linalg_matrix_power.default`` / ``matrix_power.default`` with ``n = -2**63``: the kernel
  negates the exponent (which stays ``-2**63``) and halves it until it is 0: one call on a 3x3
  matrix loops for ever. Guard ``_matrix_power_exponent``: ``|n| <= 2**32``.
- ``_prelu_kernel.default`` with a weight of fewer dimensions than the input: the batching
  rule of its backward lines the weight up by its trailing dimensions, run axis included, so
  under ``vmap(grad)`` run i's input gradient is scaled by run j's weight (a run poisoned with
  1e30 shows in the others' gradients). Guard ``_prelu_weight_rank``: the weight has the input's
  rank, each size 1 or the input's (``prelu.default``, what models capture, is unaffected).
- ``_euclidean_dist.default`` with inputs of different ranks, (2, 3, 4) and (3, 4): its batching
  rule lines them up by trailing dimensions, so under ``vmap`` (forward) run 1's distances are
  to run 0's points. Guard ``_distance_ranks``: same rank (at least 2) and width (``cdist``,
  what models capture, expands itself and is unaffected).

Held by a guard only: ``bench.batched_ops.scaled_dot_product_attention`` (the faster form under
vmap) multiplies the runs' physical tensors, so a key and value of lower rank than the query
line their run axis up with the query's heads (runs mixed); ``_attention_shapes`` refuses
ranks that differ before it runs (tests below pin that down).

Probed and found sound (a clean RuntimeError, or aten's values from the inputs alone, no
sentinel from freed memory, runs kept apart under vmap / vmap(grad)):

- linear: ``_cdist_forward`` (modes, p, batch broadcast, empty), ``_pdist_forward`` (negative p,
  non-contiguous refused), ``_convolution_mode`` ("same" with dilation ``2**62``, strides),
  ``convolution`` / ``conv*d`` / ``conv_transpose*`` (padding, stride, dilation that wrap int64
  read only the input, also in ``bench.batched_ops``' grouped form; output_padding, groups,
  bias), ``_scaled_dot_product_attention_math`` (gqa heads, masks, dropout masks, scale,
  short keys), einsum (equations and paths), tensordot, kron, cross, bilinear, addmm/baddbmm/
  addr/linear broadcasts, cov weights and corrections, linalg solve/inv/det/eigh/svd/qr on empty
  and strided, NaN or infinite inputs (no hang), matrix_exp of inf, vander / linalg_vander N,
  matrix norms; every op of these five kinds that takes two or more tensors (669 calls), with
  operands of different ranks under vmap and vmap(grad), and the tensor-list ops (cat, stack,
  block_diag, multi_dot...) likewise: only the two above mixed runs.
- shape: ``_chunk_cat`` (no batching rule: refused under vmap), ``_to_copy``, ``unfold_copy``,
  diagonal/diag/diagflat/diag_embed offsets, narrow, slice steps, select, tensor_split,
  split_with_sizes sums that wrap, chunk, unflatten/view/reshape sizes that wrap, expand and
  broadcast_to, repeat/tile (products that wrap), repeat_interleave output_size, roll shifts of
  ``+-2**63``, rot90, movedim, permute, squeeze dims, flip, tril/triu, cat/stack families,
  sum_to_size: eager and under vmap / vmap(grad).
- reduce: topk k, quantile/nanquantile q and interpolation, median.dim, diff n and prepends,
  _softmax/_log_softmax half_to_float, _safe_softmax dtype, reductions' dim lists, std/var
  corrections, norms with huge p, glu, cumsum/cumprod dtypes, sort/argsort/msort strided,
  cumulative_trapezoid/trapezoid x, gradient spacing lists and edge orders.
- complex: fft_* with n/s/dim that disagree, shifts, stft/istft (n_fft, hop, win_length, window
  length, length, align_to_window), view_as_complex/view_as_real on strided views, polar/complex.
- pointwise: mvlgamma/special_multigammaln p (2**31 allocates, bounded, and fails cleanly),
  special_polygamma n, integer pow and float_power with exponents of ``+-2**63``, gammainc,
  special_round decimals, isin (assume_unique on duplicates gives values from the inputs),
  broadcasts that disagree, where/nan_to_num/threshold with int64 extremes.
- size and check: size/sym_size dims out of range, _assert_tensor_metadata.

Not reached: stochastic behaviour of dropout_p in the math attention kernel beyond shapes,
``linalg_eigh`` / ``svd`` numerical edge cases (NaN inputs), and compute that a literal size
justifies (``expand`` to 2**40 rows then a reduction runs for hours: no memory, bounded only by
the trainer's time limit).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.func import grad, vmap

from bench.errors import BenchError
from bench.graph import build_graph
from tests.security.test_kernel_shapes import CPU, _doc, _in_child, _run

aten = torch.ops.aten
REFUSED = (BenchError, RuntimeError)


# -- matrix_power: an exponent of -2**63 ------------------------------------------------------
@pytest.mark.parametrize("target", ["aten.linalg_matrix_power.default", "aten.matrix_power.default"])
def test_a_matrix_power_of_min_int64_is_refused_quickly(target: str) -> None:
    """``-(-2**63)`` is ``-2**63``: the kernel's halving loop never reaches 0 on a 3x3 matrix."""
    rc, out = _in_child(f"""
        doc = _doc([("y", "{target}", ["@x", -2**63])], "y")
        with refused():
            y = _run(doc, torch.eye(3) * 2)
            print("RAN", tuple(y.shape), flush=True)
    """, timeout=8.0)
    assert rc == 0 and "REFUSED" in out, (rc, out[-400:])


@pytest.mark.parametrize("n", [-3, 0, 1, 5, 64])
def test_honest_matrix_powers_give_aten_values(n: int) -> None:
    x = torch.eye(3) + 0.01 * torch.arange(9.0).reshape(3, 3)
    for target in ("aten.linalg_matrix_power.default", "aten.matrix_power.default"):
        y = _run(_doc([("y", target, ["@x", n])], "y"), x)
        assert torch.equal(y, aten.linalg_matrix_power.default(x, n))


# -- vmap over a group of runs: one run's output must not read another's inputs -----------------
def _runs_apart(doc: dict[str, Any], xs: torch.Tensor, *, with_grad: bool) -> None:
    """Raises (refused) or checks that the graph under vmap (or vmap(grad)) gives each run what it
    gives alone, and that poisoning run 0 with 1e30 leaves the other runs bit for bit."""
    program, _ = build_graph(doc, CPU)

    def one(x: torch.Tensor) -> torch.Tensor:
        out = program(x)[0]
        assert isinstance(out, torch.Tensor)
        return out

    def loss(x: torch.Tensor) -> torch.Tensor:
        return one(x).pow(2).sum()

    fn = grad(loss) if with_grad else one
    batched = vmap(fn)(xs)
    alone = torch.stack([fn(x) for x in xs])
    poisoned = xs.clone()
    poisoned[0] = 1e30
    assert torch.equal(vmap(fn)(poisoned)[1:], batched[1:]), "run 0's inputs reached the other runs"
    assert torch.allclose(batched, alone, atol=1e-4, rtol=1e-4)


def _prelu_doc(weight_rank: int) -> dict[str, Any]:
    """y = _prelu_kernel(x, w), x (2, 3, 4), w taken from x: (4,) at rank 1, (1, 1, 4) at 3."""
    if weight_rank == 1:
        calls: list[tuple[str, str, list[Any]]] = [("a", "aten.select.int", ["@x", 0, 0]),
                                                   ("w", "aten.select.int", ["@a", 0, 0])]
    else:
        calls = [("a", "aten.slice.Tensor", ["@x", 0, 0, 1]), ("w", "aten.slice.Tensor", ["@a", 1, 0, 1])]
    return _doc([*calls, ("y", "aten._prelu_kernel.default", ["@x", "@w"])], "y")


def test_prelu_kernel_under_vmap_grad_keeps_runs_apart() -> None:
    """A weight of rank 1 against an input of rank 3, three runs (the input's middle size):
    the backward's batching rule took run j's weight for run i's input gradient."""
    torch.manual_seed(0)
    try:
        _runs_apart(_prelu_doc(1), torch.randn(3, 2, 3, 4), with_grad=True)
    except REFUSED as exc:
        assert "weight" in str(exc)


@pytest.mark.parametrize("with_grad", [False, True])
def test_prelu_kernel_with_a_weight_of_the_input_rank_batches_as_aten(with_grad: bool) -> None:
    """Passing probe: a (1, 1, 4) weight, aten's values alone and runs apart under vmap."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    assert torch.equal(_run(_prelu_doc(3), x), aten._prelu_kernel.default(x, x[:1, :1]))
    _runs_apart(_prelu_doc(3), torch.randn(3, 2, 3, 4), with_grad=with_grad)


def _distance_doc(same_rank: bool) -> dict[str, Any]:
    """y = _euclidean_dist(x, p), x (2, 3, 4), p x's first row: (3, 4), or (1, 3, 4) kept."""
    first = ("p", "aten.slice.Tensor", ["@x", 0, 0, 1]) if same_rank else ("p", "aten.select.int", ["@x", 0, 0])
    return _doc([first, ("y", "aten._euclidean_dist.default", ["@x", "@p"])], "y")


def test_euclidean_dist_of_two_ranks_under_vmap_keeps_runs_apart() -> None:
    """(2, 3, 4) against (3, 4), two runs: the batching rule lined the runs of the second up with
    the first's leading dimension (run 1 measured against run 0's points)."""
    torch.manual_seed(0)
    try:
        _runs_apart(_distance_doc(False), torch.randn(2, 2, 3, 4), with_grad=False)
    except REFUSED as exc:
        assert "dimensions" in str(exc)


@pytest.mark.parametrize("with_grad", [False, True])
def test_euclidean_dist_of_one_rank_batches_as_aten(with_grad: bool) -> None:
    """Passing probe: (2, 3, 4) against (1, 3, 4), aten's values and runs apart under vmap."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    assert torch.equal(_run(_distance_doc(True), x), aten._euclidean_dist.default(x, x[:1]))
    _runs_apart(_distance_doc(True), torch.randn(2, 2, 3, 4), with_grad=with_grad)


def test_cdist_of_two_ranks_batches_as_aten() -> None:
    """Passing probe: ``cdist`` (what models capture to) of (2, 40, 4) points against (30, 4)
    centres, the matrix-product path, expands before ``_euclidean_dist``: runs apart."""
    torch.manual_seed(0)
    doc = _doc([("c", "aten.select.int", ["@x", 0, 0]), ("s", "aten.slice.Tensor", ["@c", 0, 0, 30]),
                ("y", "aten.cdist.default", ["@x", "@s", 2.0, 1])], "y")
    _runs_apart(doc, torch.randn(2, 2, 40, 4), with_grad=True)


@pytest.mark.parametrize("with_grad", [False, True])
def test_attention_of_two_ranks_under_vmap_keeps_runs_apart(with_grad: bool) -> None:
    """Query (2, 3, 4, 4) against a key and value of rank 2: ``bench.batched_ops``' faster
    attention (matrix products on the runs' physical tensors) lines the key's run axis up with
    the query's heads and mixed the runs; ``_attention_shapes`` refuses ranks that differ first.
    Keep it that way (or make the faster form check ranks) if that guard is ever relaxed."""
    torch.manual_seed(0)
    doc = _doc([("a", "aten.select.int", ["@x", 0, 0]), ("k", "aten.select.int", ["@a", 0, 0]),
                ("y", "aten.scaled_dot_product_attention.default", ["@x", "@k", "@k"])], "y")
    try:
        _runs_apart(doc, torch.randn(3, 2, 3, 4, 4), with_grad=with_grad)
    except REFUSED as exc:
        assert "rank" in str(exc)


@pytest.mark.parametrize("with_grad", [False, True])
def test_attention_with_broadcast_batch_and_heads_under_vmap_batches_as_aten(with_grad: bool) -> None:
    """Passing probe: a query of one batch row, a key and value of one head (one rank), through
    the faster form under vmap: each run's values, runs apart."""
    torch.manual_seed(0)
    doc = _doc([("a", "aten.slice.Tensor", ["@x", 1, 0, 1]), ("q", "aten.slice.Tensor", ["@x", 0, 0, 1]),
                ("y", "aten.scaled_dot_product_attention.default", ["@q", "@a", "@x"])], "y")
    _runs_apart(doc, torch.randn(3, 2, 3, 4, 4), with_grad=with_grad)


# -- stopped: what the kernels check (a sample of the sweep) ---------------------------------
@pytest.mark.parametrize(("call", "match"), [
    (lambda: aten._cdist_forward.default(torch.randn(3, 4), torch.randn(5, 4), -1.0, None), "non-negative"),
    (lambda: aten._pdist_forward.default(torch.randn(4, 5).t(), 2.0), "contiguous"),
    (lambda: aten._convolution_mode.default(torch.randn(1, 2, 5), torch.randn(3, 2, 3), None, [1], "same",
                                            [2**63 - 1], 1), "negative padding"),
    (lambda: aten.unfold_copy.default(torch.randn(10), 0, 2**62, 1), "maximum size"),
    (lambda: aten.split_with_sizes.default(torch.randn(10), [2**62, 2**62, -2**63 + 10], 0), "concrete integers"),
    (lambda: aten.repeat.default(torch.randn(2, 3), [2**63 - 1, 2]), "negative dimension"),
    (lambda: aten.repeat_interleave.self_int(torch.randn(3), 2, 0, output_size=2**62), "output_size"),
    (lambda: aten.narrow.default(torch.randn(5, 4), 0, 2, 2**63 - 1), "exceeds"),
    (lambda: aten.expand.default(torch.randn(3, 1), [-1, 2**62]), "overflow"),
    (lambda: aten.topk.default(torch.randn(3, 5), 2**32 + 1), "out of range"),
    (lambda: aten.stft.default(torch.randn(2, 64), 16, window=torch.randn(7), return_complex=True), "window"),
    (lambda: aten.istft.default(torch.randn(2, 9, 17, dtype=torch.complex64), 16, window=torch.randn(7)), "window"),
    (lambda: aten.fft_fft.default(torch.randn(2, 8), 2**62, -1), "overflow"),
    (lambda: aten._scaled_dot_product_attention_math.default(
        torch.randn(1, 4, 3, 8), torch.randn(1, 3, 5, 8), torch.randn(1, 3, 5, 8), enable_gqa=True), "heads"),
])
def test_kernels_that_check_what_a_graph_sets(call: Any, match: str) -> None:
    with pytest.raises(RuntimeError, match=match):
        call()
