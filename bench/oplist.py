"""The op allowlist (issue 25.2): every ATen op a captured graph may call, each under its reason.

Deny by default. An op runs in the trusted trainer only if it is named here; the schema rules
of ``bench.graph.resolve_op`` (core ATen, decomposed by core ATen or a composite of ATen ops;
no mutable schema; none of ``DENIED_OPS``; none of ``_impure``'s views with explicit strides,
in-place running statistics or uninitialised memory) still apply to every op on the list, as a
second wall. Before this list, those rules alone admitted 895 overloads, among them ops that
change process state (``_cufft_set_plan_cache_max_size``), query the layout of a tensor
(``sym_is_contiguous``: a model could tell a row alone from a batch), skip bounds checks by
name (``_unsafe_index``, ``unsafe_split``), make sparse or quantised tensors, or compute
gradients (``*_backward``) in a forward.

How the list was made (2026-12-04, torch 2.13): every overload the rules admitted, less those
(``*_backward``, ``_foreach``, sparse, quantised, ``unsafe``, ``is_*`` queries, device and
layout moves, data-dependent sizes such as ``nonzero``, packed sequences, numerical
factorisations no model layer needs), sorted by what it does. Each kind below has one reason
(``REASONS``) that holds for every op of it. The ops that real models capture to (the track
baselines and examples, ``examples/ideas``, and a zoo of ``torch.nn`` layers: linear,
convolutions, norms, pooling, recurrent, attention, embeddings, FFTs, noise) are all here
(``tests/security/test_oplist.py`` captures them). To add an op: put it under the kind whose
reason it meets, with a test of its own if it is in none.

"Checked by the kernel" holds for public ops; a private kernel (``_native_batch_norm_legit*``,
``_weight_norm*``) trusts what its public wrapper checked, so it runs behind a check of its own
(``bench.graph.GUARDS``), as integer division does. The red team of this list found five such
kernels reading or writing past a tensor (a neighbour row, a segfault, heap bytes): the private
FFTs, ``_scaled_dot_product_flash_attention_for_cpu`` and the embedding bags, which no model
captures to, are off the list; batch and weight norm are guarded. Off it too since session 32: ops
whose result's size or offset is a tensor's value (``where`` of a condition alone, which is
``nonzero``; ``narrow.Tensor``'s start; a red team read a count of true values back through
``sym_size``): a size is never data.
"""

from __future__ import annotations


def _ops(*names: str) -> frozenset[str]:
    return frozenset(f"aten.{name}" for name in names)


REASONS: dict[str, str] = {
    "pointwise": "an elementwise function: each output element depends only on the same element of each "
                 "(broadcast) input",
    "reduce": "a reduction, scan, sort or softmax along dimensions of its input, within the input's own extent",
    "shape": "a new shape, order, selection or copy of its input's elements: sizes and offsets checked against "
             "the input by the kernel, no explicit strides",
    "index": "reads, or writes into a new tensor, positions given by index tensors or masks, each checked "
             "against the bounds by the kernel",
    "linear": "linear algebra, convolution, distances or attention over its inputs' own extents",
    "norm": "a normalisation by its input's own statistics; a batch norm only in its functional form, which "
            "returns new running statistics and writes none",
    "pool": "pooling, padding, resampling or patch extraction over its input's own extent",
    "create": "a new tensor whose every element is set from its arguments (never uninitialised memory)",
    "random": "fresh random numbers from the process's generator (dropout, noise); reads no memory it chooses",
    "loss": "a loss or similarity between its inputs, elementwise then reduced",
    "complex": "complex views and Fourier transforms: pure functions of their input",
    "size": "the size of a dimension or the number of elements (symbolic sizes in a dynamic batch)",
    "recurrent": "a recurrent layer (GRU, LSTM, RNN) over its input sequence with the weights it is given",
    "check": "asserts its input's dtype or device (what .float() and .long() leave in a graph); returns "
             "nothing and changes nothing",
}

# Each kind's ops (names as bench.graph writes them: aten.<op>.<overload>).
ALLOWED_OPS: dict[str, frozenset[str]] = {
    "pointwise": _ops(
        "hypot.default",
        "__and__.Scalar", "__and__.Tensor", "__or__.Scalar", "__or__.Tensor", "__xor__.Scalar",
        "__xor__.Tensor", "abs.default", "absolute.default", "acos.default", "acosh.default", "add.Scalar",
        "add.Tensor", "addcdiv.default", "addcmul.default", "arccos.default", "arccosh.default",
        "arcsin.default", "arcsinh.default", "arctan.default", "arctan2.default", "arctanh.default",
        "asin.default", "asinh.default", "atan.default", "atan2.default", "atanh.default", "bitwise_and.Scalar",
        "bitwise_and.Tensor", "bitwise_not.default", "bitwise_or.Scalar", "bitwise_or.Tensor",
        "bitwise_xor.Scalar", "bitwise_xor.Tensor", "ceil.default", "celu.default", "clamp.Tensor",
        "clamp.default", "clamp_max.Tensor", "clamp_max.default", "clamp_min.Tensor", "clamp_min.default",
        "clip.Tensor", "clip.default", "cos.default", "cosh.default", "deg2rad.default", "div.Scalar",
        "div.Scalar_mode", "div.Tensor", "div.Tensor_mode", "divide.Scalar", "divide.Scalar_mode",
        "divide.Tensor", "divide.Tensor_mode", "elu.default", "eq.Scalar", "eq.Tensor", "erf.default",
        "exp.default", "expm1.default", "fix.default", "float_power.Scalar", "float_power.Tensor_Scalar",
        "float_power.Tensor_Tensor", "floor.default", "floor_divide.Scalar", "floor_divide.default",
        "fmod.Scalar", "fmod.Tensor", "frac.default", "ge.Scalar", "ge.Tensor", "gelu.default",
        "greater.Scalar", "greater.Tensor", "greater_equal.Scalar", "greater_equal.Tensor", "gt.Scalar",
        "gt.Tensor", "hardshrink.default", "hardsigmoid.default", "hardswish.default", "hardtanh.default",
        "heaviside.default", "isclose.default", "isfinite.default", "isinf.default", "isnan.default",
        "isneginf.default", "isposinf.default", "isreal.default", "le.Scalar", "le.Tensor",
        "leaky_relu.default", "lerp.Scalar", "lerp.Tensor", "less.Scalar", "less.Tensor", "less_equal.Scalar",
        "less_equal.Tensor", "log.default", "log10.default", "log1p.default", "log2.default",
        "log_sigmoid.default", "log_sigmoid_forward.default", "logaddexp.default", "logaddexp2.default",
        "logical_and.default", "logical_not.default", "logical_or.default", "logical_xor.default",
        "logit.default", "lt.Scalar", "lt.Tensor", "maximum.default", "minimum.default", "mish.default",
        "mul.Scalar", "mul.Tensor", "multiply.Scalar", "multiply.Tensor", "mvlgamma.default",
        "nan_to_num.default", "ne.Scalar", "ne.Tensor", "neg.default", "negative.default", "not_equal.Scalar",
        "not_equal.Tensor", "positive.default", "pow.Scalar", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
        "rad2deg.default", "reciprocal.default", "relu.default", "relu6.default", "remainder.Scalar",
        "remainder.Tensor", "round.default", "rsqrt.default", "rsub.Scalar", "rsub.Tensor", "selu.default",
        "sgn.default", "sigmoid.default", "sign.default", "silu.default", "sin.default", "sinc.default",
        "sinh.default", "softplus.default", "softshrink.default", "special_digamma.default",
        "special_entr.default", "special_erf.default", "special_erfc.default", "special_erfinv.default",
        "special_exp2.default", "special_expit.default", "special_expm1.default", "special_gammainc.default",
        "special_gammaincc.default", "special_gammaln.default", "special_i0.default", "special_log1p.default",
        "special_log_ndtr.default", "special_logit.default", "special_multigammaln.default",
        "special_ndtr.default", "special_polygamma.default", "special_psi.default", "special_round.default",
        "special_sinc.default", "special_xlog1py.default", "special_xlog1py.other_scalar",
        "special_xlog1py.self_scalar", "special_xlogy.default", "special_xlogy.other_scalar",
        "special_xlogy.self_scalar", "sqrt.default", "square.default", "sub.Scalar", "sub.Tensor",
        "subtract.Scalar", "subtract.Tensor", "tan.default", "tanh.default", "threshold.default",
        "true_divide.Scalar", "true_divide.Tensor", "trunc.default", "where.Scalar", "where.ScalarOther",
        "where.ScalarSelf", "where.self", "xlogy.Scalar_Other", "xlogy.Scalar_Self",
        "xlogy.Tensor",
    ),
    "reduce": _ops(
        "linalg_vector_norm.default", "cumprod.default", "median.dim",
        "_log_softmax.default", "_safe_softmax.default", "_softmax.default", "all.default", "all.dim",
        "all.dims", "amax.default", "amin.default", "aminmax.default", "any.default", "any.dim", "any.dims",
        "argmax.default", "argmin.default", "argsort.default", "argsort.stable", "count_nonzero.default",
        "count_nonzero.dim_IntList", "cumsum.default", "cumulative_trapezoid.dx", "cumulative_trapezoid.x",
        "diff.default", "frobenius_norm.dim", "glu.default", "gradient.array", "gradient.scalararray",
        "gradient.scalarint", "gradient.scalarrayarray", "gradient.scalarrayint", "gradient.tensorarray",
        "gradient.tensorarrayint", "log_softmax.int", "logsumexp.default", "max.dim", "max.other",
        "mean.default", "mean.dim", "min.dim", "min.other", "msort.default", "nanmean.default",
        "nanquantile.default", "nanquantile.scalar", "nansum.default", "norm.Scalar", "norm.ScalarOpt_dim",
        "norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dtype", "prod.default", "prod.dim_int", "quantile.default",
        "quantile.scalar", "softmax.int", "sort.default", "special_log_softmax.default",
        "special_logsumexp.default", "special_softmax.default", "std.correction", "std.default", "std.dim",
        "std_mean.correction", "std_mean.default", "std_mean.dim", "sum.default", "sum.dim_IntList",
        "topk.default", "trapezoid.dx", "trapezoid.x", "trapz.dx", "trapz.x", "var.correction", "var.default",
        "var.dim", "var_mean.default", "var_mean.dim",
    ),
    "shape": _ops(
        "_chunk_cat.default", "_to_copy.default", "adjoint.default", "alias.default", "alias_copy.default",
        "atleast_1d.Sequence", "atleast_1d.default", "atleast_2d.Sequence", "atleast_2d.default",
        "atleast_3d.Sequence", "atleast_3d.default", "broadcast_tensors.default", "broadcast_to.default",
        "cat.default", "chunk.default", "clone.default", "column_stack.default", "concat.default",
        "concatenate.default", "contiguous.default", "copy.default", "detach.default", "diag.default",
        "diag_embed.default", "diagflat.default", "diagonal.default", "diagonal_copy.default", "dsplit.array",
        "dsplit.int", "dstack.default", "expand.default", "expand_as.default", "expand_copy.default",
        "flatten.using_ints", "flip.default", "fliplr.default", "flipud.default", "hsplit.array", "hsplit.int",
        "hstack.default", "mH.default", "mT.default", "matrix_H.default", "moveaxis.int", "moveaxis.intlist",
        "movedim.int", "movedim.intlist", "narrow.default", "numpy_T.default",
        "permute.default", "ravel.default", "repeat.default", "repeat_interleave.self_int", "reshape.default",
        "reshape_as.default", "roll.default", "rot90.default", "row_stack.default", "select.int",
        "slice.Tensor", "split.Tensor", "split.sizes", "split_with_sizes.default",
        "split_with_sizes_copy.default", "squeeze.default", "squeeze.dim", "squeeze.dims",
        "squeeze_copy.default", "squeeze_copy.dim", "squeeze_copy.dims", "stack.default", "sum_to_size.default",
        "swapaxes.default", "swapdims.default", "t.default", "t_copy.default", "tensor_split.indices",
        "tensor_split.sections", "tile.default", "to.dtype", "transpose.int", "transpose_copy.int",
        "tril.default", "triu.default", "type_as.default", "unbind.int", "unflatten.int", "unfold_copy.default",
        "unsqueeze.default", "unsqueeze_copy.default", "view.default", "view_as.default", "vsplit.array",
        "vsplit.int", "vstack.default",
    ),
    "index": _ops(
        "embedding.default", "gather.default", "index.Tensor", "index_add.default", "index_copy.default",
        "index_fill.int_Scalar", "index_fill.int_Tensor", "index_put.default", "index_select.default",
        "isin.Scalar_Tensor", "isin.Tensor_Scalar", "isin.Tensor_Tensor", "masked_fill.Scalar",
        "masked_fill.Tensor", "masked_scatter.default", "one_hot.default", "scatter.src", "scatter.value",
        "scatter_add.default", "scatter_reduce.two", "select_scatter.default", "slice_scatter.default",
        "take.default", "take_along_dim.default",
    ),
    "linear": _ops(
        "_cdist_forward.default", "_convolution_mode.default",
        "_euclidean_dist.default", "_pdist_forward.default", "_prelu_kernel.default",
        "_scaled_dot_product_attention_math.default",
        "addmm.default", "addr.default", "baddbmm.default", "baddbmm.dtype", "bilinear.default",
        "block_diag.default", "bmm.default", "cdist.default", "chain_matmul.default", "conv1d.default",
        "conv1d.padding", "conv2d.default", "conv2d.padding", "conv3d.default", "conv3d.padding",
        "conv_transpose1d.default", "conv_transpose2d.input", "conv_transpose3d.input", "convolution.default",
        "corrcoef.default", "cov.default", "cross.default", "det.default", "dot.default", "einsum.default",
        "ger.default", "inner.default", "inverse.default",
        "kron.default", "linalg_cross.default", "linalg_det.default", "linalg_diagonal.default",
        "linalg_eigh.default", "linalg_eigvalsh.default", "linalg_inv.default", "linalg_matmul.default",
        "linalg_matrix_norm.default", "linalg_matrix_norm.str_ord", "linalg_matrix_power.default",
        "linalg_multi_dot.default", "linalg_norm.default", "linalg_norm.ord_str", "linalg_slogdet.default",
        "linalg_solve.default", "linalg_solve_ex.default", "linalg_svd.default", "linalg_svdvals.default",
        "linalg_vander.default", "linalg_vecdot.default", "linear.default", "logdet.default", "matmul.default",
        "matrix_exp.default", "matrix_power.default", "mm.default", "mv.default", "outer.default",
        "pdist.default", "prelu.default", "qr.default", "scaled_dot_product_attention.default", "svd.default",
        "tensordot.default", "trace.default", "vander.default", "vdot.default",
    ),
    "norm": _ops(
        "_fused_rms_norm.default", "_native_batch_norm_legit.no_stats",
        "_native_batch_norm_legit_functional.default", "_native_batch_norm_legit_no_training.default",
        "_weight_norm.default", "_weight_norm_interface.default", "group_norm.default", "layer_norm.default",
        "native_group_norm.default", "native_layer_norm.default", "norm_except_dim.default", "renorm.default",
        "rms_norm.default",
    ),
    "pool": _ops(
        "adaptive_max_pool2d.default",
        "_adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default", "_pad_circular.default",
        "_pad_enum.default", "_upsample_bicubic2d_aa.vec", "_upsample_bilinear2d_aa.vec",
        "_upsample_lanczos2d_aa.vec", "_upsample_nearest_exact1d.default", "_upsample_nearest_exact1d.vec",
        "_upsample_nearest_exact2d.default", "_upsample_nearest_exact2d.vec",
        "_upsample_nearest_exact3d.default", "_upsample_nearest_exact3d.vec", "adaptive_avg_pool1d.default",
        "adaptive_avg_pool2d.default", "adaptive_avg_pool3d.default", "adaptive_max_pool1d.default",
        "affine_grid_generator.default", "avg_pool1d.default", "avg_pool2d.default", "avg_pool3d.default",
        "channel_shuffle.default", "col2im.default", "constant_pad_nd.default", "grid_sampler.default",
        "grid_sampler_2d.default", "im2col.default", "max_pool1d.default", "max_pool1d_with_indices.default",
        "max_pool2d.default", "max_pool2d_with_indices.default", "max_pool3d.default",
        "max_pool3d_with_indices.default", "native_channel_shuffle.default", "pad.default",
        "pad_sequence.default", "pixel_shuffle.default", "pixel_unshuffle.default", "reflection_pad1d.default",
        "reflection_pad2d.default", "reflection_pad3d.default", "replication_pad1d.default",
        "replication_pad2d.default", "replication_pad3d.default", "upsample_bicubic2d.vec",
        "upsample_bilinear2d.vec", "upsample_linear1d.default", "upsample_linear1d.vec",
        "upsample_nearest1d.default", "upsample_nearest1d.vec", "upsample_nearest2d.default",
        "upsample_nearest2d.vec", "upsample_nearest3d.default", "upsample_nearest3d.vec",
        "upsample_trilinear3d.vec",
    ),
    "create": _ops(
        "_dim_arange.default", "arange.default", "arange.start", "arange.start_step", "cartesian_prod.default",
        "combinations.default", "eye.default", "eye.m", "fill.Scalar", "fill.Tensor", "full.default",
        "full_like.default", "hann_window.default", "hann_window.periodic", "lift_fresh_copy.default",
        "linspace.Scalar_Tensor", "linspace.Tensor_Scalar", "linspace.Tensor_Tensor", "linspace.default",
        "logspace.Scalar_Tensor", "logspace.Tensor_Scalar", "logspace.Tensor_Tensor", "logspace.default",
        "meshgrid.default", "meshgrid.indexing", "new_full.default", "new_ones.default", "new_zeros.default",
        "ones.default", "ones_like.default", "scalar_tensor.default", "zero.default", "zeros.default",
        "zeros_like.default",
    ),
    "random": _ops(
        "randn_like.default", "rand_like.default",
        "alpha_dropout.default", "bernoulli.default", "dropout.default", "feature_alpha_dropout.default",
        "feature_dropout.default", "native_dropout.default", "rand.default", "randn.default",
        "randperm.default", "rrelu.default",
    ),
    "loss": _ops(
        "binary_cross_entropy.default", "binary_cross_entropy_with_logits.default",
        "cosine_embedding_loss.default", "cosine_similarity.default", "cross_entropy_loss.default",
        "hinge_embedding_loss.default", "huber_loss.default", "kl_div.default", "l1_loss.default",
        "margin_ranking_loss.default", "mse_loss.default", "multi_margin_loss.default",
        "multilabel_margin_loss.default", "multilabel_margin_loss_forward.default", "nll_loss.default",
        "nll_loss2d.default", "nll_loss2d_forward.default", "nll_loss_forward.default", "nll_loss_nd.default",
        "pairwise_distance.default", "poisson_nll_loss.default", "smooth_l1_loss.default",
        "soft_margin_loss.default", "triplet_margin_loss.default",
    ),
    "complex": _ops(
        "_conj.default", "complex.default",
        "conj.default", "conj_physical.default", "fft_fft.default", "fft_fft2.default", "fft_fftn.default",
        "fft_fftshift.default", "fft_hfft.default", "fft_hfft2.default", "fft_hfftn.default",
        "fft_ifft.default", "fft_ifft2.default", "fft_ifftn.default", "fft_ifftshift.default",
        "fft_ihfft.default", "fft_ihfft2.default", "fft_ihfftn.default", "fft_irfft.default",
        "fft_irfft2.default", "fft_irfftn.default", "fft_rfft.default", "fft_rfft2.default",
        "fft_rfftn.default", "imag.default", "istft.default", "polar.default", "real.default",
        "resolve_conj.default", "resolve_neg.default", "stft.center", "stft.default", "view_as_complex.default",
        "view_as_real.default",
    ),
    "size": _ops(
        "dim.default", "numel.default", "size.int", "sym_numel.default", "sym_size.int",
    ),
    "recurrent": _ops(
        "gru.input", "gru_cell.default", "lstm.input", "lstm_cell.default", "rnn_relu.input",
        "rnn_relu_cell.default", "rnn_tanh.input", "rnn_tanh_cell.default",
    ),

    "check": _ops("_assert_tensor_metadata.default"),
}

# The kind of each allowed op.
KIND: dict[str, str] = {op: kind for kind, ops in ALLOWED_OPS.items() for op in ops}
