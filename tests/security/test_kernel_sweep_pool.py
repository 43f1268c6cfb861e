"""Red team, session 32: the pool, norm, index, loss, create, random and recurrent kinds of
``bench.oplist.ALLOWED_OPS``, called as a hostile capture child may write them.

Each op was called with inconsistent literals (negative, 0, 2**31, 2**32 + k, 2**62 + k,
2**63 - 1, -2**63, products that wrap int64, output sizes off the input), mismatched shapes,
empty, expanded (stride 0), strided and permuted tensors with -777 sentinels beside them, mixed
dtypes, and under ``vmap`` and ``vmap(grad)`` with run 0 poisoned (NaN, 1e30) and the others
compared bit for bit. Probes that could crash ran in a subprocess (``_in_child``). The harness is
``tests.security.test_kernel_shapes``'s. Holes found, each closed by a guard in
``bench.graph.GUARDS`` (the tests below were seen failing with the guard off):

- ``upsample_nearest1d/2d/3d.default``, ``_upsample_nearest_exact1d/2d/3d.default``,
  ``upsample_linear1d.default`` take an output size and a scale both; the kernel maps output
  ``i`` to input ``floor(i / scale)`` cast to int64 and clamped from above only, so a scale of
  1e-300 gives index -2**63: a uint8 input was read 2**63 bytes before its start, a segfault
  (float inputs wrapped onto their first element by luck). Guard ``_upsample_scales``.
- ``native_group_norm.default`` reads its weight and bias as dense vectors: an expanded
  one-element weight gave the values after it (a neighbour's -777s, heap NaN at 2**16
  channels), a strided one the elements between. Guard ``_group_norm_sizes`` (dense copies).
- ``im2col.default`` with a kernel of 2**32 x 2**32: the channels-times-taps product wraps to 0
  and the result has a negative size (1, 0, -51539607516); within 2**31, 4 channels and a
  kernel of 2**31 x 2**31 (padding 2**30) wrap to an empty result. Guard ``_im2col_sizes``.
- ``max_pool1d/2d/3d`` and their ``_with_indices`` forms: a window of dilated taps that steps
  over the input from the padding (length 2, padding 1, kernel 2, dilation 3) gives -inf and the
  index of its first tap, one row past the plane; the backward adds the window's gradient
  there: into the next sample's gradient (10, 20 where 0 was due), past the buffer for the last
  sample (a segfault at a width of 8192). Guard ``_max_pool_windows``, on every max-pool (it
  also holds session 31's ``max_pool1d`` kernel that wrapped).
- ``_pad_enum.default`` casts its int64 mode to 32 bits: mode ``2 + 2**32`` is circular to the
  kernel but slipped past session 31's circular-pad guard (which tested ``mode == 2``), and pads
  (-5, 5) returned uninitialised memory (heap pointers). Guard ``_pad_enum_mode``; the build's
  bound on integer literals (``MAX_INT_ARG``, added beside this sweep) refuses these modes too.

Probed and found sound (a clean error, or values only from the op's own inputs, under vmap too):

- pool: the other upsample forms (``.vec``, bicubic, trilinear, the ``_aa`` ones; NaN/inf/tiny
  scales on float; uint8 bilinear/bicubic/AA against float64 on 600 random sizes and layouts),
  adaptive avg/max pools 1-3d (sizes 0, negative, huge), avg pools 1-3d (kernels, strides,
  paddings, divisors up to 2**63 - 1; integer INT_MIN), max pools' literals past int32 (refused),
  reflection/replication pads 1-3d and ``constant_pad_nd`` with pads wrapping int64 (their
  gradients too), circular pads within the session-31 guard (under vmap too), ``col2im`` (kernel products that wrap: refused), ``pixel_shuffle``/
  ``pixel_unshuffle`` (factor 2**32, 2**63 - 1: refused), ``channel_shuffle``,
  ``native_channel_shuffle``, ``affine_grid_generator``, ``grid_sampler`` 2-D and 3-D (NaN, inf,
  huge, strided and expanded grids; their gradients), ``pad_sequence``; max_pool2d's batched form
  (``bench.batched_ops``) under vmap and vmap(grad).
- norm: ``native_layer_norm``, ``_fused_rms_norm`` (ignores its shape's values; strided and
  expanded weights read correctly), the batch norms (expanded and strided weights and statistics
  read correctly, bf16/fp16 mixed), ``group_norm``, ``renorm``, ``norm_except_dim``,
  ``rms_norm``; empty inputs write their statistics.
- index: ``take``, ``take_along_dim`` (wraps an index within the run's own extent, as aten
  does one run at a time), ``gather``, ``index.Tensor``, ``index_put``/``index_add``/
  ``index_copy``/``index_fill``/``index_select``, ``scatter*``, ``masked_scatter`` (short
  source), ``select_scatter``, ``slice_scatter`` (bounds wrapping int64), ``one_hot``,
  ``embedding`` (with ``padding_idx``), ``isin``: out-of-range indices refused under vmap too,
  strided sources read correctly.
- loss: ``nll_loss*`` and ``nll_loss2d_forward`` (targets out of range, wrong shapes, weights
  short, long, expanded, strided), ``multilabel_margin_loss_forward``, ``multi_margin_loss``
  (target shapes, weights, p), the elementwise losses. Under vmap nll_loss's decomposition
  refuses a wrong weight with an AssertionError, ``pixel_shuffle`` an overflowing factor with a
  ValueError: clean refusals (``bench.child`` reports any exception of a graph as the arm's).
- create: ``full``/``zeros``/``new_full``/``eye``/``linspace``/``logspace``/``hann_window``/
  ``rand``/``randperm`` with negative and wrapping sizes, ``arange`` (NaN, inf, step 0, tiny
  steps, int64 wrap: an empty or correct result), ``combinations`` (r = 70: refused),
  ``cartesian_prod``, ``meshgrid``, ``fill.Tensor``, ``_dim_arange``.
- random: ``native_dropout``/``dropout``/``alpha_dropout``/``feature_*dropout`` (p outside [0, 1],
  NaN), ``bernoulli`` (NaN probabilities), ``rrelu`` (bounds), ``randperm`` dtypes.
- recurrent: ``gru.input``, ``rnn_tanh.input``, ``rnn_relu.input`` under aten (states of the wrong
  layers, batch, width; weights of the wrong rows or columns; short and long biases broadcast or
  refused; huge and negative layer counts), ``gru_cell``, ``lstm_cell``, ``rnn_*_cell`` (states,
  weights, biases, dtypes), under vmap and vmap(grad); ``bench.batched_ops.lstm`` (behind
  ``_lstm_refused``) with expanded, strided and transposed states and weights.

Not reached: oneDNN's own LSTM path beyond ``_lstm_refused``'s shapes; ``embedding`` with
``sparse=True`` (a sparse weight gradient: an optimizer matter, not memory); ``combinations``/
adaptive pools with huge but allocatable outputs (bounded memory, the sandbox's limit); CUDA
kernels; the backward of every op (probed: pads, grid samplers, norms, losses, max pools).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bench.errors import BenchError
from bench.graph import GUARDS, _guarded, build_graph
from tests.security.test_kernel_shapes import CPU, _doc, _in_child, _leaks, _run

aten = torch.ops.aten

UPSAMPLE_DEFAULTS = [
    ("aten.upsample_nearest1d.default", [[7], 1e-300], 3),
    ("aten._upsample_nearest_exact1d.default", [[7], 1e-300], 3),
    ("aten.upsample_nearest2d.default", [[7, 7], 1e-300, 1e-300], 4),
    ("aten._upsample_nearest_exact2d.default", [[7, 7], 1e-300, 1e-300], 4),
    ("aten.upsample_nearest3d.default", [[7, 7, 7], 1e-300, 1e-300, 1e-300], 5),
    ("aten._upsample_nearest_exact3d.default", [[7, 7, 7], 1e-300, 1e-300, 1e-300], 5),
    ("aten.upsample_linear1d.default", [[7], False, 1e-300], 3),
]


# -- upsampling with a scale beside the output size ------------------------------------------
def test_an_upsample_scale_whose_inverse_overflows_does_not_crash() -> None:
    """Scale 1e-300: ``floor(i / scale)`` casts to -2**63, clamped from above only; a uint8 input
    (one byte an element) was read 2**63 bytes before its start. Every ``.default`` form must
    refuse (nearest 1-D segfaulted; the others read by luck or took another path)."""
    rc, out = _in_child(f"""
        for target, args, rank in {UPSAMPLE_DEFAULTS!r}:
            x = torch.arange(1, 1 + 5 ** (rank - 2), dtype=torch.uint8).reshape(1, 1, *[5] * (rank - 2))
            if "linear" in target:
                x = x.float()
            try:
                y = _run(_doc([("y", target, ["@x", *args])], "y"), x)
                print("RAN", target, flush=True)
            except (BenchError, RuntimeError):
                print("REFUSED", target, flush=True)
    """)
    assert rc == 0 and out.count("REFUSED") == len(UPSAMPLE_DEFAULTS), (rc, out[-600:])


@pytest.mark.parametrize("scale", [1e-19, 1e-9, 0.5, 3.0, -1.0, float("nan"), float("inf"), 0.0])
def test_upsample_scales_that_the_output_size_did_not_come_from_are_refused(scale: float) -> None:
    """Deny by default: 7 outputs of 5 come from a scale in [7/6, 8/5] only."""
    doc = _doc([("y", "aten.upsample_nearest1d.default", ["@x", [7], scale])], "y")
    with pytest.raises(RuntimeError, match="scale the output size"):
        _run(doc, torch.randn(1, 2, 5))


@pytest.mark.parametrize(("target", "args"), [
    ("aten.upsample_nearest1d.default", [[7], 1.4]),
    ("aten.upsample_nearest1d.default", [[7], None]),
    ("aten._upsample_nearest_exact1d.default", [[2], 0.5]),
    ("aten.upsample_linear1d.default", [[7], False, 1.5]),
    ("aten.upsample_nearest2d.default", [[7, 2], 1.4, 0.5]),
    ("aten._upsample_nearest_exact3d.default", [[7, 2, 5], 1.4, 0.5, None]),
])
def test_upsample_scales_the_output_size_came_from_give_atens_result(target: str, args: list[Any]) -> None:
    rank = len(args[0]) + 2
    x = torch.randn(1, 2, *[5] * (rank - 2))
    op = getattr(aten, target.split(".")[1]).default
    assert torch.equal(_run(_doc([("y", target, ["@x", *args])], "y"), x), op(x, *args))


# -- native_group_norm: a weight read as a dense vector ---------------------------------------
def _node(name: str, target: str, args: list[Any], **kwargs: Any) -> dict[str, Any]:
    def encode(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("@"):
            return {"$node": value[1:]}
        return [encode(v) for v in value] if isinstance(value, list) else value
    return {"name": name, "op": "call_function", "target": target, "args": encode(args), "kwargs": kwargs}


FLOAT32 = {"dtype": {"$dtype": "float32"}}
# base = [0, 1, ..., 15] made in the graph; the weight and bias a view of it
WEIGHT_VIEWS = {
    "expanded": ([_node("one", "aten.slice.Tensor", ["@base", 0, 5, 6]),
                  _node("w", "aten.expand.default", ["@one", [4]])], [5.0, 5.0, 5.0, 5.0]),  # read 5, 6, 7, 8
    "strided": ([_node("w", "aten.slice.Tensor", ["@base", 0, 1, 16, 4])], [1.0, 5.0, 9.0, 13.0]),  # read 1, 2, 3, 4
}


@pytest.mark.parametrize("view", sorted(WEIGHT_VIEWS))
def test_group_norm_reads_no_weight_past_an_expanded_or_strided_weight(view: str) -> None:
    """The kernel read a view's weight and bias as a dense vector from its first element: an
    expanded one-element weight gave the elements after it (another tensor's, the heap's)."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3)
    nodes, weight = WEIGHT_VIEWS[view]
    doc = _doc([("gn", "aten.native_group_norm.default", ["@x", "@w", "@w", 2, 4, 3, 2, 1e-5]),
                ("y", "operator.getitem", ["@gn", 0])], "y")
    doc["nodes"][1:1] = [_node("base", "aten.arange.default", [16], **FLOAT32), *nodes]
    dense = torch.tensor(weight)
    expected = aten.native_group_norm.default(x, dense, dense, 2, 4, 3, 2, 1e-5)[0]
    assert torch.equal(_run(doc, x), expected), "the kernel read past its weight"
    # the backward reads the weight as densely: the gradient is the dense weight's too
    x.requires_grad_()
    (got,) = torch.autograd.grad(_run(doc, x).square().sum(), x)
    (want,) = torch.autograd.grad(aten.native_group_norm.default(x, dense, dense, 2, 4, 3, 2, 1e-5)[0].square().sum(), x)
    assert torch.allclose(got, want), "the backward read past its weight"


def test_group_norm_with_a_dense_weight_gives_atens_result() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3)
    doc = _doc([("gn", "aten.native_group_norm.default", ["@x", "@w", None, 2, 4, 3, 2, 1e-5]),
                ("y", "operator.getitem", ["@gn", 0])], "y")
    doc["nodes"][1:1] = [_node("w", "aten.arange.start", [1, 5], **FLOAT32)]
    expected = aten.native_group_norm.default(x, torch.arange(1.0, 5.0), None, 2, 4, 3, 2, 1e-5)[0]
    assert torch.equal(_run(doc, x), expected)


def test_group_norm_weights_of_another_shape_are_refused() -> None:
    doc = _doc([("w", "aten.full.default", [[2, 2], 1.0]),
                ("gn", "aten.native_group_norm.default", ["@x", "@w", None, 2, 4, 3, 2, 1e-5]),
                ("y", "operator.getitem", ["@gn", 0])], "y")
    with pytest.raises(RuntimeError, match="one value per channel"):
        _run(doc, torch.randn(2, 4, 3))


# -- im2col: channels times taps wrapping to 0 -------------------------------------------------
@pytest.mark.parametrize("args", [
    [[2**31, 2**31], [1, 1], [2**30, 2**30], [2**31, 2**31]],  # 4 x 2**62 taps wrap to 0: an empty result
    [[2**32, 2**32], [1, 1], [0, 0], [1, 1]],  # wraps to 0 too: a size of -51539607516 (refused when built)
    [[2**62 + 1, 1], [4, 1], [0, 0], [1, 1]],
    [[2, 2], [1, 1], [-1, 0], [1, 1]],
    [[6, 1], [1, 1], [0, 0], [1, 1]],
])
def test_im2col_with_sizes_that_wrap_or_leave_no_block_is_refused(args: list[Any]) -> None:
    doc = _doc([("y", "aten.im2col.default", ["@x", *args])], "y")
    try:
        y = _run(doc, torch.randn(1, 4, 5, 5))
    except (BenchError, RuntimeError):
        return
    raise AssertionError(f"im2col ran: {tuple(y.shape)}")


def test_im2col_of_honest_sizes_gives_atens_result() -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 5)
    args = [[2, 3], [1, 2], [1, 0], [2, 1]]
    assert torch.equal(_run(_doc([("y", "aten.im2col.default", ["@x", *args])], "y"), x),
                       torch.nn.functional.unfold(x, (2, 3), (1, 2), (1, 0), (2, 1)))


# -- max pools: a window of dilated taps that misses the input ------------------------------
# Length 2, padding 1, kernel 2, dilation 3: the window at -1 taps -1 and 2, neither in the input;
# its index is the plane's length, and the backward adds its gradient there.
EMPTY_WINDOWS = [
    ("aten.max_pool1d_with_indices.default", [[2], [1], [1], [3], False], 3, True),
    ("aten.max_pool1d.default", [[2], [1], [1], [3], False], 3, False),
    ("aten.max_pool2d_with_indices.default", [[2, 1], [1, 1], [1, 0], [3, 1], False], 4, True),
    ("aten.max_pool2d.default", [[2, 2], [2, 2], [1, 1], [3, 3], True], 4, False),
    ("aten.max_pool3d_with_indices.default", [[2, 1, 1], [1, 1, 1], [1, 0, 0], [3, 1, 1], False], 5, True),
    ("aten.max_pool3d.default", [[2, 1, 1], [1, 1, 1], [1, 0, 0], [3, 1, 1], False], 5, False),
]


def test_a_max_pool_window_that_misses_the_input_writes_no_gradient_past_its_plane() -> None:
    """Each sample's empty windows sent their gradient one row past its plane: into the next
    sample's gradient, and past the buffer for the last (a segfault at a width of 8192)."""
    rc, out = _in_child(f"""
        for target, args, rank, indexed in {EMPTY_WINDOWS!r}:
            nodes = [("p", target, ["@x", *args])] + ([("y", "operator.getitem", ["@p", 0])] if indexed else [])
            doc = _doc(nodes, "y" if indexed else "p")
            x = torch.zeros(1, 64, *[2] * (rank - 3), 2 if rank == 3 else 8192, requires_grad=True)
            try:
                y = _run(doc, x)
                torch.autograd.grad(y, x, torch.ones_like(y))
                print("RAN", target, flush=True)
            except (BenchError, RuntimeError):
                print("REFUSED", target, flush=True)
    """)
    assert rc == 0 and out.count("REFUSED") == len(EMPTY_WINDOWS), (rc, out[-600:])


def test_a_max_pool_window_that_misses_the_input_is_refused() -> None:
    doc = _doc([("p", "aten.max_pool2d_with_indices.default", ["@x", [2, 1], [1, 1], [1, 0], [3, 1], False]),
                ("y", "operator.getitem", ["@p", 0])], "y")
    with pytest.raises(RuntimeError, match="holds no element of the input"):
        _run(doc, torch.randn(2, 1, 2, 2))


@pytest.mark.parametrize(("target", "args", "shape"), [
    ("aten.max_pool1d_with_indices.default", [[3], [1], [1], [2], False], (1, 2, 5)),  # taps -1, 1, 3
    ("aten.max_pool1d.default", [[3], [2], [1], [2], True], (2, 6)),
    ("aten.max_pool2d_with_indices.default", [[3, 3], [2, 2], [1, 1], [1, 1], True], (1, 2, 7, 6)),
    ("aten.max_pool2d_with_indices.default", [[3, 2], [1, 2], [1, 1], [2, 3], False], (2, 3, 5, 6)),
    ("aten.max_pool3d_with_indices.default", [[3, 2, 2], [2, 1, 2], [1, 1, 0], [2, 1, 1], True], (1, 2, 5, 4, 4)),
])
def test_max_pools_whose_windows_hold_input_give_atens_result(target: str, args: list[Any], shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    x = torch.randn(*shape)
    op = getattr(aten, target.split(".")[1]).default
    expected = op(x, *args)
    nodes = [("p", target, ["@x", *args])]
    if isinstance(expected, tuple):
        nodes += [("v", "operator.getitem", ["@p", 0]), ("i", "operator.getitem", ["@p", 1])]
        assert torch.equal(_run(_doc(nodes, "i"), x), expected[1])
        expected = expected[0]
    assert torch.equal(_run(_doc(nodes, nodes[-1][0] if len(nodes) == 1 else "v"), x), expected)


# -- _pad_enum: a mode that wraps to circular ------------------------------------------------
WRAPPED_MODES = [2 + 2**32, 2 - 2**32, 2 + 2**62, -(2**63) + 2]


@pytest.mark.parametrize("mode", WRAPPED_MODES)
@pytest.mark.parametrize("pad", [[-5, 5], [-7, 3]])
def test_a_pad_mode_that_wraps_to_circular_reads_no_uninitialised_memory(mode: int, pad: list[int]) -> None:
    """The kernel casts the mode to 32 bits: 2 + 2**32 is circular to it but was not 2 to the
    circular pad's guard, and (-5, 5) returned memory nobody wrote (heap pointers). Refused when
    the graph is built (integers beyond 2**31) or when it runs (``_pad_enum_mode``)."""
    try:
        assert _leaks("aten._pad_enum.default", [mode, None], pad) == []
    except BenchError as exc:
        assert "mode" in str(exc)


@pytest.mark.parametrize("mode", WRAPPED_MODES)
def test_the_pad_mode_guard_refuses_wrapped_modes_itself(mode: int) -> None:
    """The guard alone, as the trainer runs the op (a second wall behind the build's bound)."""
    guarded = _guarded(aten._pad_enum.default, GUARDS["aten._pad_enum.default"])
    with pytest.raises(RuntimeError, match="the mode must be"):
        guarded(torch.arange(1.0, 6.0).reshape(1, 1, 5), [-5, 5], mode, None)


@pytest.mark.parametrize("mode", [4, -1, 2**62, 2**32])
def test_pad_modes_off_the_list_are_refused(mode: int) -> None:
    doc = _doc([("y", "aten._pad_enum.default", ["@x", [2, 1], mode, None])], "y")
    with pytest.raises((BenchError, RuntimeError), match="mode"):
        _run(doc, torch.randn(1, 1, 5))


@pytest.mark.parametrize("mode", range(4))
def test_the_four_pad_modes_give_atens_result(mode: int) -> None:
    x = torch.randn(1, 2, 5)
    doc = _doc([("y", "aten._pad_enum.default", ["@x", [2, 1], mode, None])], "y")
    assert torch.equal(_run(doc, x), aten._pad_enum.default(x, [2, 1], mode, None))


# -- stopped: what the kernels check or what stays in bounds ----------------------------------
@pytest.mark.parametrize(("call", "match"), [
    (lambda: aten.pixel_shuffle.default(torch.randn(1, 4, 2, 2), 2**32), "overflow"),
    (lambda: aten.col2im.default(torch.randn(1, 4, 6), [3, 3], [2**32, 2**32], [1, 1], [0, 0], [1, 1]),
     "overflow"),
    (lambda: aten.replication_pad2d.default(torch.randn(1, 1, 5, 5), [2**63 - 1, -(2**63 - 1), 0, 0]),
     "concrete integers"),
    (lambda: aten.adaptive_max_pool2d.default(torch.randn(1, 2, 5, 5), [-1, -1]), "negative"),
    (lambda: aten.nll_loss2d_forward.default(torch.randn(2, 4, 3, 3), torch.zeros(2, 2, 3, dtype=torch.long),
                                             None, 0, -100), "size mismatch"),
    (lambda: aten.lstm_cell.default(torch.randn(3, 5), [torch.zeros(3, 6), torch.zeros(1, 6)],
                                    torch.randn(24, 5), torch.randn(24, 6), None, None), "batch size"),
    (lambda: aten.gru.input(torch.randn(4, 3, 5), torch.zeros(2, 3, 6),
                            [torch.randn(18, 5), torch.randn(18, 6)], False, 1, 0.0, False, False, False),
     "hidden states"),
    (lambda: aten.masked_scatter.default(torch.randn(4, 5), torch.ones(4, 5, dtype=torch.bool), torch.ones(2)),
     "source"),
])
def test_kernels_that_check_what_a_graph_sets(call: Any, match: str) -> None:
    """Clean refusals (the trainer's child reports any exception of a graph as the arm's)."""
    with pytest.raises((RuntimeError, ValueError), match=match):
        call()


def test_nll_loss_under_vmap_reads_no_other_runs_class() -> None:
    """A run's target of 4 with 4 classes: under vmap the decomposition gathers along the
    run's own classes and refuses, never reading the next run's row."""
    x, t = torch.randn(3, 3, 4), torch.tensor([[0, 3, 1], [0, 4, 1], [2, 2, 2]])
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.func.vmap(lambda a, b: aten.nll_loss_forward.default(a, b, None, 1, -100)[0])(x, t)


def test_built_graphs_of_the_guarded_ops_run_under_vmap_and_grad() -> None:
    """The guards see the logical (per-run) tensors under ``vmap(grad)``: the honest forms run
    batched and give each run's own result."""
    torch.manual_seed(0)
    doc = _doc([("u", "aten.upsample_nearest1d.default", ["@x", [7], 1.4]),
                ("w", "aten.full.default", [[2], 1.5]),
                ("gn", "aten.native_group_norm.default", ["@u", "@w", "@w", 1, 2, 7, 1, 1e-5]),
                ("g", "operator.getitem", ["@gn", 0]),
                ("y", "aten.im2col.default", ["@g", [1, 2], [1, 1], [0, 0], [1, 1]])], "y")
    program, _ = build_graph(doc, CPU)
    xs = torch.randn(3, 1, 2, 5)
    batched = torch.func.vmap(torch.func.grad(lambda x: (program(x)[0] ** 2).sum()))(xs)
    one = torch.stack([torch.func.grad(lambda x: (program(x)[0] ** 2).sum())(xs[i]) for i in range(3)])
    assert torch.allclose(batched, one, atol=1e-5)


@pytest.mark.parametrize("target", ["aten.max_pool2d.default", "aten.max_pool2d_with_indices.default"])
def test_guarded_max_pools_run_in_their_batched_form_under_vmap(target: str) -> None:
    """Under a plain vmap level the trainer runs max_pool2d's grouped form (bench.batched_ops):
    behind the guard it still gives each run's own pool, and its gradient."""
    torch.manual_seed(0)
    nodes = [("p", target, ["@x", [3, 2], [2, 1], [1, 1], [2, 2], True])]
    if "indices" in target:
        nodes.append(("y", "operator.getitem", ["@p", 0]))
    program, _ = build_graph(_doc(nodes, nodes[-1][0]), CPU)
    xs = torch.randn(3, 2, 4, 7, 6)
    batched = torch.func.vmap(lambda x: program(x)[0])(xs)
    assert torch.equal(batched, torch.stack([program(xs[i])[0] for i in range(3)]))
    grads = torch.func.vmap(torch.func.grad(lambda x: program(x)[0].sum()))(xs)
    assert torch.equal(grads, torch.stack([torch.func.grad(lambda x: program(x)[0].sum())(xs[i]) for i in range(3)]))
