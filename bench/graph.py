"""A submitted model as data: capture it as a graph, check it, rebuild it in trusted code.

Submitted code only *builds* a model, in a capture sandbox with no data
(``bench.child``'s ``capture`` command). There the model is exported with
``torch.export`` (a dynamic batch dimension, non-strict) and lowered to core ATen
(``run_decompositions()``), once in train mode and once in eval mode. ``serialize``
writes the graph as our own plain JSON: nodes, the op of each call as a name, and the
argument structure; the model's tensors go out as ``.npy`` arrays. No pickle anywhere:
``torch.export.load`` and ``torch.load`` unpickle, so nothing a capture child wrote is
ever given to them.

``rebuild`` (in the trusted trainer, which imports no submitted code) parses that JSON,
refuses any op that is not on the allowlist (the ATen ops ``bench.oplist`` names, each of
which must also pass the schema rules of ``resolve_op``, and integer arithmetic on the batch
size; private kernels that trust their wrappers run behind ``GUARDS``), any non-tensor
constant and any input or output kind but parameters, buffers, tensor constants, one
user input, buffer mutations and one user output, and returns a ``CapturedModel``: a
plain ``nn.Module`` whose forward runs the graph on its own parameters, so the engine's
trainers (one at a time and vectorized) train it as any module, and count every tensor
it holds.
"""

from __future__ import annotations

import math
import operator
import zlib
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import torch
from torch import fx, nn

from bench import batched_ops
from bench.contract import MODULE_PATH
from bench.errors import BenchError, ErrorCode, user_frame
from bench.oplist import KIND

FORMAT = 1
MAX_NODES = 20_000
# Entries in one argument list, and in all of a graph's arguments: a stack of 500,000 references
# to one tensor (the 8 MiB file allows about 520,000) took 17.7 s to rebuild and 90-104 s to
# count a forward (red team, session 35); the examples' longest list holds 9 entries, and their
# largest graph 331 in all.
MAX_LIST = 4096
MAX_ARGUMENTS = 2**16
# ATen ops outside torch.Tag.core that core-ATen graphs of ordinary models still hold.
EXTRA_OPS = frozenset({
    "aten.sym_size.int",
    "aten._native_batch_norm_legit_functional.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten.native_dropout.default",
    "aten.alias.default",
    "aten.lift_fresh_copy.default",
    "aten.polar.default",
    "aten.complex.default",
    "aten.view_as_real.default",
    "aten.view_as_complex.default",
    "aten.real.default",
    "aten.imag.default",
    "aten.conj_physical.default",
    "aten._conj.default",
    # pure ops of everyday models with kernels of their own (F.normalize, torch.randn_like,
    # cumprod, hypot, median, AdaptiveMaxPool2d): on bench.oplist under their kinds
    "aten.linalg_vector_norm.default",
    "aten.randn_like.default",
    "aten.rand_like.default",
    "aten.cumprod.default",
    "aten.hypot.default",
    "aten.median.dim",
    "aten.adaptive_max_pool2d.default",
    "aten._assert_tensor_metadata.default",  # what .float() / .long() leave in a graph
})
# Ops that read uninitialised memory or reinterpret storage: results that depend on
# whatever the trainer's memory held. Decompositions of ordinary models do not need them.
DENIED_OPS = frozenset({
    "aten.empty_strided.default",
    "aten.as_strided.default",
    "aten.as_strided_scatter.default",
    "aten.set_.source_Tensor",
    "aten.resize_.default",
    # Side effects on autograd (``_backward`` writes .grad) and autograd-state or
    # tensor-value reads (``item`` turns a value into a size): no pure function needs them.
    "aten._backward.default",
    "aten.is_leaf.default",
    "aten._version.default",
    "aten.output_nr.default",
    "aten.retains_grad.default",
    "aten.item.default",
    "aten._local_scalar_dense.default",
    # Where a tensor lies in its storage, not what it holds: a row given alone as a view of the
    # eval batch learnt its position from its storage offset (red team).
    "aten.storage_offset.default",
    "aten.sym_storage_offset.default",
    "aten.stride.int",
    "aten.stride.default",
    "aten.sym_stride.int",
    "aten.sym_stride.default",
    "aten.is_contiguous.default",
    "aten.is_contiguous.memory_format",
    "aten.is_non_overlapping_and_dense.default",
    "aten.is_strides_like_format.default",
})
# Python callables a graph may hold: integer arithmetic on symbolic sizes, tuple access. Each
# result is bounded (``MAX_SIZE_INT``) and ``pow`` checks its exponent before it computes: a
# captured ``pow(batch, 10**12)`` made the trainer compute for ever (red team).
MAX_SIZE_INT = 1 << 48


def _bounded(fn: Any) -> Any:
    def call(*args: Any) -> Any:
        result = fn(*args)
        if not isinstance(result, int | float) or isinstance(result, bool):
            # a negative size to a fractional power is complex: unbounded by the test below, it reached
            # a Scalar at 2**141 (a complex tensor of inf; red team, session 32). Only ints and floats.
            raise OverflowError(f"size arithmetic gave a {type(result).__name__}, not an int or a float")
        if not abs(result) <= MAX_SIZE_INT:
            raise OverflowError(f"size arithmetic gave {str(result)[:20]}, beyond {MAX_SIZE_INT}")
        return result
    return call


def _size_pow(base: Any, exponent: Any) -> Any:
    if not (isinstance(exponent, int | float) and -64 <= exponent <= 64):
        raise OverflowError("size arithmetic takes exponents between -64 and 64")
    return _bounded(operator.pow)(base, exponent)


PYTHON_OPS: dict[str, Any] = {
    "operator.getitem": operator.getitem,
    "operator.add": _bounded(operator.add),
    "operator.sub": _bounded(operator.sub),
    "operator.mul": _bounded(operator.mul),
    "operator.floordiv": _bounded(operator.floordiv),
    "operator.truediv": _bounded(operator.truediv),
    "operator.mod": _bounded(operator.mod),
    "operator.neg": _bounded(operator.neg),
    "operator.pow": _size_pow,
}
INPUT_KINDS = ("parameter", "buffer", "constant", "user")
OUTPUT_KINDS = ("user", "buffer_mutation")
# The dtypes a graph may name or store (deny by default): no half, byte or short types, whose
# kernels are separate code paths (an upsample's uint8 path read 2**63 bytes before its input,
# red team, session 32) that no track's model needs: inputs are float32, labels int64
DTYPES = {
    name: getattr(torch, name)
    for name in ("float32", "float64", "int32", "int64", "bool", "complex64", "complex128")
}
LAYOUTS = {"strided": torch.strided}
MEMORY_FORMATS = {"contiguous_format": torch.contiguous_format, "preserve_format": torch.preserve_format,
                  "channels_last": torch.channels_last}


def not_capturable(message: str, hint: str | None = None) -> BenchError:
    """The error of a model that cannot be captured as a plain ATen graph."""
    return BenchError(ErrorCode.NOT_CAPTURABLE, message[:900], hint)


# -- capture side (in the sandbox that runs submitted code) -------------------------
def eval_mutation() -> BenchError:
    """The refusal of an eval-mode graph that updates buffers (``not_capturable``)."""
    return not_capturable(
        "the model changes its buffers in eval mode",
        "Only training may update buffers (as BatchNorm's running statistics do): a model that "
        "keeps state across evaluation calls could answer the bench's probes otherwise than it "
        "predicts. Compute eval-mode outputs from the parameters and buffers alone.",
    )


def _op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # "aten.mm.default"
    module = getattr(target, "__module__", "") or ""
    name = f"{'operator' if module == '_operator' else module}.{getattr(target, '__name__', '?')}"
    return name


def _encode(value: Any) -> Any:
    if isinstance(value, fx.Node):
        return {"$node": value.name}
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v) for v in value]}
    if isinstance(value, torch.dtype):
        return {"$dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"$device": value.type}
    if isinstance(value, torch.layout):
        return {"$layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"$memory_format": str(value).removeprefix("torch.")}
    raise not_capturable(
        f"the captured graph holds a value of type {type(value).__name__}, which ideabench cannot send",
        "Keep Python objects out of forward: only tensors, numbers, shapes and dtypes can cross.",
    )


CAPTURE_ERROR_MODULES = ("torch._dynamo", "torch.fx", "torch.export", "torch._export", "torch._subclasses",
                         "torch.utils._sympy", "torch._guards")


def _is_capture_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from torch.export's tracing (data-dependent control flow, an op it
    cannot trace, ...) rather than from the model's own code or a plain shape error."""
    return any(type(exc).__module__.startswith(m) for m in CAPTURE_ERROR_MODULES)


def _is_functional_aten(program: Any) -> bool:
    """Whether an exported graph already holds only ops of the allowlist (non-mutating ATen
    ops and size arithmetic; most models): then functionalising it again changes nothing
    and costs ~0.1 s. The trusted side checks the allowlist again, whatever this says."""
    try:
        for node in program.graph_module.graph.nodes:
            if node.op == "call_function":
                resolve_op(_op_name(node.target))
    except BenchError:
        return False
    return True


CONSTRUCTS = (  # what torch.export's message means, in the submitter's terms, and its fix
    (("data-dependent", "GuardOnDataDependent", "data dependent"),
     "a branch, a loop or a size that depends on a tensor's values",
     "Compute both sides and pick with torch.where (or a mask) instead of an if on a tensor."),
    ((".item()", "item()", "tolist", "numpy"), "a tensor's value read into Python (.item(), .tolist(), numpy)",
     "Keep values as tensors inside forward."),
)


def _clip(text: str, limit: int) -> str:
    """``text`` cut at a word boundary before ``limit`` characters."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " ..."


def export_failure(exc: BaseException, filename: str | None) -> BenchError:
    """The ``not_capturable`` of a model torch.export could not trace: it leads with the file's
    line and its text and the construct, then the fix, then the exporter's words, cut at a word
    (issue 27.8: ~1,000 characters of exporter output cut mid-word)."""
    raw = f"{type(exc).__name__}: {exc}"
    construct, fix = "a construct torch.export cannot trace", (
        "The model must be a fixed graph of tensor ops for a batch of any size: no control flow on tensor "
        "values (use torch.where), no Python-side state changed in forward, no .item()/.tolist()/numpy "
        "inside forward.")
    for needles, what, how in CONSTRUCTS:
        if any(n in raw for n in needles):
            construct, fix = what, how + " See docs/idea-contract.md."
            break
    found = user_frame(exc, filename) if filename else None
    where = f"{filename} line {found[0]}: `{found[1]}`: " if found else ""
    return not_capturable(f"{where}{construct} cannot be captured. torch.export said: {_clip(raw, 400)}", fix)


def export_graph(model: nn.Module, example: torch.Tensor, *, filename: str | None = None,
                 ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``model`` (in its current train/eval mode) as graph JSON and its tensors by target name
    (``filename``: the submitted file's name, to quote its line when the export fails)."""
    from torch.export import Dim, export

    try:
        program = export(model, (example,), dynamic_shapes=({0: Dim("batch", min=1)},), strict=False)
        if not _is_functional_aten(program):  # in-place ops, grad-mode switches: functionalise
            # An empty table functionalises without decomposing: composites such as linear,
            # gru or attention stay whole, so the trainer runs eager PyTorch's kernels.
            program = program.run_decompositions(decomp_table={})
    except BenchError:
        raise
    except Exception as exc:
        if not _is_capture_error(exc):
            raise  # the model's own error (the caller names its line): not a capture problem
        raise export_failure(exc, filename) from None
    return serialize(program)


def serialize(program: Any) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """An ``ExportedProgram`` (core ATen) as JSON data and its tensors by target name."""
    from torch.export.graph_signature import InputKind, OutputKind

    sig = program.graph_signature
    kinds = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer",
             InputKind.CONSTANT_TENSOR: "constant", InputKind.USER_INPUT: "user"}
    inputs = []
    tensors: dict[str, torch.Tensor] = {}
    state = program.state_dict
    for spec in sig.input_specs:
        if spec.kind not in kinds:
            raise not_capturable(f"the model has an input of kind {spec.kind.name}, which ideabench refuses")
        kind = kinds[spec.kind]
        inputs.append({"kind": kind, "name": spec.arg.name, "target": spec.target})
        if kind in ("parameter", "buffer"):
            tensors[spec.target] = state[spec.target] if spec.target in state else program.constants[spec.target]
        elif kind == "constant":
            value = program.constants[spec.target]
            if not isinstance(value, torch.Tensor):
                raise not_capturable("the model holds a constant that is not a tensor")
            tensors[spec.target] = value
    out_kinds = {OutputKind.USER_OUTPUT: "user", OutputKind.BUFFER_MUTATION: "buffer_mutation"}
    outputs = []
    for spec in sig.output_specs:
        if spec.kind not in out_kinds:
            raise not_capturable(
                f"the model's forward has an output of kind {spec.kind.name} (it changes its input "
                "or something but a buffer)", "Do not modify the input tensor in place.")
        outputs.append({"kind": out_kinds[spec.kind], "target": spec.target})
    nodes = []
    for node in program.graph_module.graph.nodes:
        entry: dict[str, Any] = {"name": node.name, "op": node.op}
        if node.op == "call_function":
            entry["target"] = _op_name(node.target)
            entry["args"] = _encode(list(node.args))
            entry["kwargs"] = {k: _encode(v) for k, v in node.kwargs.items()}
            module = _module_of(node)
            if module:
                entry["module"] = module
        elif node.op == "output":
            entry["args"] = _encode(list(node.args))
        elif node.op != "placeholder":
            raise not_capturable(f"the graph holds a node of kind {node.op}, which ideabench refuses")
        nodes.append(entry)
    return {"format": FORMAT, "inputs": inputs, "outputs": outputs, "nodes": nodes}, {
        k: v.detach() for k, v in tensors.items()
    }


def _module_of(node: fx.Node) -> str:
    """The path of the innermost submodule whose forward made ``node`` ("block.mix"; "" for
    the model's own forward), from torch.export's ``nn_module_stack``. A label the capture
    side gives: ``bench.probes``' module probes measure the part of the graph it names."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = [entry[0] for entry in stack.values() if isinstance(entry, tuple) and isinstance(entry[0], str)]
    path = paths[-1] if paths else ""
    return path if MODULE_PATH.fullmatch(path) else ""


# -- trusted side ---------------------------------------------------------------------
@cache
def _decomposable_ops() -> frozenset[str]:
    """ATen ops that core ATen decomposes (``torch._decomp.core_aten_decompositions``): pure
    tensor functions by construction, kept whole in graphs for eager kernels and speed."""
    from torch._decomp import core_aten_decompositions

    return frozenset(str(op) for op in core_aten_decompositions() if isinstance(op, torch._ops.OpOverload))


def _is_composite(op: Any) -> bool:
    """Whether an ATen op is defined in terms of other ATen ops (a CompositeImplicitAutograd
    kernel: ``reshape``, ``contiguous``, ``unflatten``...), never by a kernel of its own."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"))


def resolve_op(name: Any) -> Any:
    """The callable of an op name, if the allowlist has it; else ``not_capturable``.

    Allowed: integer arithmetic on sizes (``PYTHON_OPS``), and the ATen ops ``bench.oplist``
    names (each under its reason). Every one of those must also pass the schema rules, a
    second wall: core ATen, or decomposed by core ATen, or a composite of other ATen ops, or
    ``EXTRA_OPS``; never an in-place op, ``DENIED_OPS`` or what ``_impure`` finds.
    """
    if not isinstance(name, str):
        raise not_capturable("a graph node names no op")
    if name in PYTHON_OPS:
        return PYTHON_OPS[name]
    parts = name.split(".")
    refused = not_capturable(f"the graph calls {name[:80]!r}, which is not on ideabench's op allowlist",
                             "Use ordinary torch tensor operations; see docs/idea-contract.md.")
    if len(parts) != 3 or parts[0] != "aten" or name in DENIED_OPS or name not in KIND:
        raise refused  # deny by default: only the ops bench.oplist names, each under its reason
    try:
        op = getattr(getattr(torch.ops.aten, parts[1]), parts[2])
    except (AttributeError, RuntimeError):
        raise refused from None
    if not isinstance(op, torch._ops.OpOverload):
        raise refused
    if not (torch.Tag.core in op.tags or name in EXTRA_OPS or name in _decomposable_ops()
            or _is_composite(op)):
        raise refused
    if op._schema.is_mutable:
        raise not_capturable(f"the graph calls the in-place op {name[:80]!r}")
    why = _impure(op)
    if why:
        raise not_capturable(f"the graph calls {name[:80]!r}, which ideabench refuses: {why}",
                             "Use ordinary torch tensor operations; see docs/idea-contract.md.")
    return op


# Functional batch-norm forms: the ones export's functionalisation gives, which return new
# running statistics instead of writing the old ones.
FUNCTIONAL_NORMS = frozenset({"aten._native_batch_norm_legit_functional.default",
                              "aten._native_batch_norm_legit_no_training.default"})


def _impure(op: Any) -> str:
    """Why an ATen op that the rules above admit is still not a pure, bounds-checked function
    of its arguments ("" when it is). These are properties of the schema, not names: an op
    that takes explicit strides makes a view of any size over any storage with no bounds check
    (``_reshape_alias``, ``as_strided``, ``*_strided``); one that takes running statistics and is
    not a functional form writes them in place although its schema does not say so
    (``batch_norm``, ``_batch_norm_impl_index``, ``instance_norm``, ``cudnn_batch_norm``...);
    an ``empty``/``resize`` op returns memory nobody wrote."""
    schema = op._schema
    names = {a.name for a in schema.arguments}
    if "stride" in names and any(r.alias_info is not None for r in schema.returns):
        return "it makes a view with explicit strides, unchecked against its storage"
    if {"running_mean", "running_var"} & names and str(op) not in FUNCTIONAL_NORMS:
        return "it writes its running statistics in place (export's functional form is allowed)"
    base = schema.name.split("::")[-1]
    if "empty" in base or "resize" in base:
        return "its result is uninitialised memory"
    return ""


# Integer arguments that name a mode: a value off the kernel's list left grid_sampler_2d's
# output unwritten (uninitialised memory, earlier tensors' values among it; red team).
INT_ENUMS = {"interpolation_mode": 3, "padding_mode": 3, "reduction": 3}
# Integer division of INT_MIN by -1 kills the process with SIGFPE (red team): these ops run only
# when a floating tensor takes part (avg_pool with ``divisor_override=-1`` divides too).
INTEGER_DIVISIONS = frozenset({
    "aten.div.Tensor_mode", "aten.div.Scalar_mode", "aten.divide.Tensor_mode", "aten.divide.Scalar_mode",
    "aten.fmod.Tensor", "aten.fmod.Scalar", "aten.remainder.Tensor", "aten.remainder.Scalar",
    "aten.remainder.Scalar_Tensor", "aten.floor_divide.default", "aten.floor_divide.Scalar",
    "aten.avg_pool2d.default", "aten.avg_pool3d.default",
})


def _floating_only(op: Any, given: dict[str, Any]) -> None:
    tensors = [a for a in given.values() if isinstance(a, torch.Tensor)]
    if tensors and not any(t.is_floating_point() or t.is_complex() for t in tensors):
        raise RuntimeError(f"{op} of integer tensors is refused (INT_MIN / -1 kills the process)")


def _per_channel(op: Any, given: dict[str, Any]) -> None:
    """A batch norm's kernel trusts its weight, bias and running statistics to hold one value
    per channel: a longer one read past the input (a neighbour row, red team), a shorter one
    was written past its end (a segfault)."""
    x = given.get("input")
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise RuntimeError(f"{op} needs an input of at least two dimensions")
    for name in ("weight", "bias", "running_mean", "running_var"):
        value = given.get(name)
        if value is not None and (not isinstance(value, torch.Tensor) or value.dim() != 1
                                  or value.numel() != x.size(1)):
            raise RuntimeError(f"{op}: {name} must hold one value per channel ({x.size(1)})")


def _gain_per_slice(op: Any, given: dict[str, Any]) -> dict[str, Any]:
    """Weight norm's fused kernel trusts ``g`` to hold one gain per slice along ``dim`` and both
    tensors to be dense: a smaller ``g`` was written past its end, an expanded one (stride 0)
    past a buffer the kernel sized by its strides, a strided one gave heap bytes (red team).
    It gets dense copies."""
    v, gain, dim = given.get("v"), given.get("g"), given.get("dim", 0)
    if not isinstance(v, torch.Tensor) or not isinstance(gain, torch.Tensor) or not isinstance(dim, int):
        raise RuntimeError(f"{op} needs two tensors and a dimension")
    if v.dim() < 1 or dim not in (0, v.dim() - 1) or gain.numel() != v.size(dim):
        raise RuntimeError(f"{op}: g must hold one gain per slice along dim 0 or the last dim")
    return {"v": v.contiguous(), "g": gain.contiguous()}


def _group_norm_sizes(op: Any, given: dict[str, Any]) -> dict[str, Any]:
    """Group norm's kernel takes N, C and HxW as the graph gives them and checks only
    ``numel == N * C * HxW`` in 64-bit integers: an HxW of ``3 + 2**61`` wraps the product to
    the real count and the kernel walked 2**61 elements past its input, a segfault (red team,
    session 31). Each must be the input's own, compared as Python integers. The kernel also
    reads its weight and bias as dense vectors whatever their strides: an expanded one-element
    weight (stride 0) gave the values after that element (a neighbour's -777s; NaN from the heap
    at 2**16 channels), a strided one the elements between (red team, session 32). Each must be
    a vector of one value per channel, and gets a dense copy."""
    x, groups = given.get("input"), given.get("group")
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or type(groups) is not int or groups < 1:
        raise RuntimeError(f"{op} needs an input of at least two dimensions and a group count")
    sizes = (int(given.get("N", -1)), int(given.get("C", -1)), int(given.get("HxW", -1)))
    if sizes != (x.size(0), x.size(1), math.prod(x.shape[2:])) or x.size(1) % groups:
        raise RuntimeError(f"{op}: N, C and HxW must be the input's {tuple(x.shape)}, C a multiple of the groups")
    dense = {}
    for name in ("weight", "bias"):
        value = given.get(name)
        if value is not None and (not isinstance(value, torch.Tensor) or value.dim() != 1
                                  or value.numel() != x.size(1)):
            raise RuntimeError(f"{op}: {name} must hold one value per channel ({x.size(1)})")
        if value is not None:
            dense[name] = value.contiguous()
    return dense


def _circular_pad_keeps(op: Any, given: dict[str, Any]) -> None:
    """A circular pad's kernel allocates its output empty and fills it from what each padded
    dimension keeps (its length less the negative pads); a positive pad longer than that, which
    aten's check lets through with a negative pad on the other side ((-5, 5) on a length of 5),
    left memory nobody wrote: a freed tensor's values (red team, session 31). Each dimension
    must keep at least one element and wrap at most once. Other modes of ``pad`` and
    ``_pad_enum`` (circular is 2) pass as they are."""
    mode = given.get("mode", "constant")
    if (op is torch.ops.aten.pad.default and mode != "circular") or (op is torch.ops.aten._pad_enum.default and mode != 2):
        return
    x, pad = given.get("self"), given.get("pad")
    if not isinstance(x, torch.Tensor) or not isinstance(pad, list | tuple) or len(pad) % 2 or len(pad) > 2 * x.dim():
        raise RuntimeError(f"{op} needs a tensor and pairs of pads for its last dimensions")
    for i in range(0, len(pad), 2):
        left, right = int(pad[i]), int(pad[i + 1])
        kept = x.size(-1 - i // 2) + min(left, 0) + min(right, 0)
        if kept < 1 or max(left, 0) > kept or max(right, 0) > kept:
            raise RuntimeError(f"{op}: a circular pad must keep at least one element of a dimension and wrap it "
                               f"at most once (pads {left}, {right} on {x.size(-1 - i // 2)})")


def _attention_shapes(op: Any, given: dict[str, Any]) -> None:
    """The CPU kernel behind scaled dot-product attention takes the key's length from the value:
    a key of fewer rows read rows past its end (a slice's neighbours; a segfault past the heap;
    red team, session 31). Query, key and value must share a rank and a dtype, key and value
    their rows, query and key their width, their leading dimensions broadcast as the math form
    does, a mask broadcast to the scores; no grouped-query heads."""
    q, k, v, mask = given.get("query"), given.get("key"), given.get("value"), given.get("attn_mask")
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise RuntimeError(f"{op} needs query, key and value tensors")
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
    if given.get("enable_gqa", False) or q.dim() < 2 or not q.dim() == k.dim() == v.dim():
        raise RuntimeError(f"{op}: query, key and value must share a rank of at least 2 (no grouped heads)")
    if len({q.dtype, k.dtype, v.dtype}) != 1 or k.size(-2) != v.size(-2) or q.size(-1) != k.size(-1):
        raise RuntimeError(f"{op}: key and value must have the same rows, query and key the same width, one dtype")
    try:
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])  # type: ignore[no-untyped-call]
        if mask is not None:
            if not isinstance(mask, torch.Tensor):
                raise RuntimeError("the mask is not a tensor")
            scores = (*lead, q.size(-2), k.size(-2))
            if torch.broadcast_shapes(mask.shape, scores) != torch.Size(scores):  # type: ignore[no-untyped-call]
                raise RuntimeError("the mask does not broadcast to the scores")
    except RuntimeError as exc:
        raise RuntimeError(f"{op}: the shapes do not broadcast as attention's ({exc})") from None


MAX_MATRIX_POWER = 1 << 32


def _matrix_power_exponent(op: Any, given: dict[str, Any]) -> None:
    """``matrix_power`` negates a negative exponent and halves it until it is 0: ``-2**63``
    negates to itself, and one call on a 3x3 matrix looped for ever (red team, session 32).
    The exponent must be an int within ``MAX_MATRIX_POWER`` either side of 0."""
    n = given.get("n")
    if type(n) is not int or not -MAX_MATRIX_POWER <= n <= MAX_MATRIX_POWER:
        raise RuntimeError(f"{op}: the exponent must be an int between -{MAX_MATRIX_POWER} and {MAX_MATRIX_POWER}")


def _prelu_weight_rank(op: Any, given: dict[str, Any]) -> None:
    """``_prelu_kernel``'s backward batching rule lines a weight and an input of different ranks
    up by their trailing dimensions, run axis included: under ``vmap(grad)`` one run's
    weight scaled another run's input gradient (a run poisoned with 1e30 showed in the others;
    red team, session 32). ``prelu`` (what models capture to) reshapes its weight itself. The
    weight must have the input's number of dimensions, each of its sizes 1 or the input's."""
    x, weight = given.get("self"), given.get("weight")
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor) or x.dim() < 1:
        raise RuntimeError(f"{op} needs an input of at least one dimension and a weight tensor")
    if weight.dim() != x.dim() or any(w not in (1, s) for w, s in zip(weight.shape, x.shape, strict=True)):
        raise RuntimeError(f"{op}: the weight must have the input's dimensions {tuple(x.shape)}, each of size 1 or "
                           "the input's (use prelu)")


def _distance_ranks(op: Any, given: dict[str, Any]) -> None:
    """``_euclidean_dist``'s batching rule lines up two inputs of different ranks by their
    trailing dimensions, run axis included: under ``vmap`` a (2, 3, 4) and a (5, 4) gave run 1
    distances to run 0's points (a poisoned run showed in the others; red team, session 32).
    ``cdist`` (what models capture to) expands both to one rank itself. Both must be tensors of
    the same number of dimensions, at least 2, and the same width."""
    x1, x2 = given.get("x1"), given.get("x2")
    if (not isinstance(x1, torch.Tensor) or not isinstance(x2, torch.Tensor) or x1.dim() < 2
            or x1.dim() != x2.dim() or x1.size(-1) != x2.size(-1)):
        raise RuntimeError(f"{op}: x1 and x2 must have the same number of dimensions (at least 2) and width "
                           "(use cdist)")


def _upsample_scales(op: Any, given: dict[str, Any]) -> None:
    """The nearest and linear upsampling kernels map output index ``i`` to input index
    ``floor(i / scale)`` in float32, cast to int64 and clamped from above only: a scale of
    ``1e-300`` (``1 / scale`` infinite) or ``1e-19`` (past int64) cast to ``-2**63``, and a uint8
    input was read 2**63 bytes before its start, a segfault (red team, session 32; a float input
    landed on its own first element by luck: 2**63 times its 4 bytes wraps to 0). The ``.vec``
    forms models capture to compute the output size from the scale; these ``.default`` forms
    take both. Each scale must be None or the one the output size came from, ``out == floor(in *
    scale)`` with a margin: ``out / (in + 1) <= scale <= (out + 1) / in``, sizes at least 1."""
    x, size = given.get("self"), given.get("output_size")
    names = [a.name for a in op._schema.arguments if a.name.startswith("scales")]
    if (not isinstance(x, torch.Tensor) or x.dim() != 2 + len(names) or not isinstance(size, list | tuple)
            or len(size) != len(names) or any(type(s) is not int for s in size)):
        raise RuntimeError(f"{op} needs an input of {2 + len(names)} dimensions and {len(names)} output sizes")
    for name, out, length in zip(names, size, x.shape[2:], strict=True):
        scale = given.get(name)
        if scale is None:
            continue
        if (type(scale) not in (int, float) or not math.isfinite(scale) or out < 1 or length < 1
                or not out <= scale * (length + 1) or not scale * length <= out + 1):
            raise RuntimeError(f"{op}: {name} must be None or the scale the output size {out} came from "
                               f"(an input of {length})")


def _im2col_sizes(op: Any, given: dict[str, Any]) -> None:
    """``im2col`` multiplies the channels by the kernel's taps in int64 unchecked: a kernel of
    2**32 x 2**32 wrapped the product to 0 and its output had a negative size, (1, 0,
    -51539607516), a tensor no public op makes (red team, session 32); within 2**31, 4 channels
    and a kernel of 2**31 x 2**31 wrap it to 0 (an empty result where there is none). Kernel,
    dilation and stride must be two ints in 1..2**31 each, padding two in 0..2**31, the input
    (C, H, W) or (N, C, H, W), the number of blocks (counted in Python integers) at least one
    each way, and the result's elements (rows x C x taps x blocks) at most 2**62."""
    x = given.get("self")
    values = [given.get(name) for name in ("kernel_size", "dilation", "padding", "stride")]
    if not isinstance(x, torch.Tensor) or x.dim() not in (3, 4):
        raise RuntimeError(f"{op} needs an input of 3 or 4 dimensions")
    if any(not isinstance(v, list | tuple) or len(v) != 2 or any(type(i) is not int for i in v) for v in values):
        raise RuntimeError(f"{op}: kernel, dilation, padding and stride must be two ints each")
    (kernel, dilation, padding, stride), limit = [list(v or ()) for v in values], 1 << 31
    if not all(1 <= k <= limit and 1 <= d <= limit and 0 <= p <= limit and 1 <= s <= limit
               for k, d, p, s in zip(kernel, dilation, padding, stride, strict=True)):
        raise RuntimeError(f"{op}: kernel, dilation and stride must be in 1..2**31, padding in 0..2**31")
    count = math.prod(x.shape[:-2]) * kernel[0] * kernel[1]
    for size, k, d, p, s in zip(x.shape[-2:], kernel, dilation, padding, stride, strict=True):
        blocks = (size + 2 * p - d * (k - 1) - 1) // s + 1
        if blocks < 1:
            raise RuntimeError(f"{op}: the dilated kernel is longer than the padded input")
        count *= blocks
    if count > 1 << 62:
        raise RuntimeError(f"{op}: the result would hold {count} elements")


def _max_pool_windows(op: Any, given: dict[str, Any]) -> None:
    """A max-pool's window that holds no input element (dilated taps that step over the input
    from the padding: length 2, padding 1, kernel 2, dilation 3) gives -inf and the index of its
    first tap, one row past the plane; the backward adds the window's gradient there: into the
    next sample's gradient, or past the buffer, a segfault at a width of 8192 (red team,
    session 32); a 1-D kernel of ``2**62 + 1`` with a dilation of 4 wrapped ``(kernel - 1) *
    dilation`` to 0 and looped 2**62 times (session 31). Kernel, stride, padding and dilation must be one int or one per spatial
    dimension (stride none: the kernel), kernel, stride and dilation in 1..2**31, padding in
    0..kernel / 2, at least one window, and every window (aten's count, ceil mode included) must
    hold an input element: counted in Python integers over the windows that start in the
    padding (at most ``padding`` of them, the only ones that can miss the input)."""
    dims = 1 if "1d" in str(op) else 2 if "2d" in str(op) else 3
    x, ceil = given.get("self"), given.get("ceil_mode", False)
    if not isinstance(x, torch.Tensor) or x.dim() not in (dims + 1, dims + 2) or type(ceil) is not bool:
        raise RuntimeError(f"{op} needs an input of {dims + 1} or {dims + 2} dimensions")
    parts = []
    for name, default in (("kernel_size", None), ("stride", None), ("padding", 0), ("dilation", 1)):
        value = given.get(name)
        value = [default] if value is None or (isinstance(value, list | tuple) and not value) else value
        if (not isinstance(value, list | tuple) or len(value) not in (1, dims)
                or any(type(v) is not int and v is not None for v in value)):
            raise RuntimeError(f"{op}: kernel, stride, padding and dilation must be one int or {dims} ints each")
        parts.append(list(value) * (dims // len(value)))
    kernels, strides, paddings, dilations = parts
    strides = kernels if strides[0] is None else strides
    limit = 1 << 31
    for length, k, s, p, d in zip(x.shape[-dims:], kernels, strides, paddings, dilations, strict=True):
        if k is None or not (1 <= k <= limit and 1 <= s <= limit and 1 <= d <= limit and 0 <= 2 * p <= k):
            raise RuntimeError(f"{op}: kernel, stride and dilation must be in 1..2**31, padding at most half the kernel")
        span = d * (k - 1) + 1
        windows = (length + 2 * p - span + (s - 1 if ceil else 0)) // s + 1
        if ceil and (windows - 1) * s >= length + p:
            windows -= 1
        if windows < 1 or (windows - 1) * s - p >= length:
            raise RuntimeError(f"{op}: the dilated window is longer than the padded input")
        for start in range(-p, min(0, windows * s - p), s):  # the windows that start in the padding
            first = start + -(start // d) * d  # the first tap at 0 or after
            if first >= length or first > start + d * (k - 1):
                raise RuntimeError(f"{op}: a window of dilated taps holds no element of the input")


def _one_hot_classes(op: Any, given: dict[str, Any]) -> None:
    """``one_hot``'s default of -1 classes takes the count from the input's largest value: a size
    that is data, read back by ``sym_size`` (red team, session 32). The count must be an int of
    at least 1 (what ``F.one_hot(x, n)`` captures to)."""
    classes = given.get("num_classes", -1)
    if type(classes) is not int or classes < 1:
        raise RuntimeError(f"{op}: num_classes must be given, at least 1 (-1 reads it from the data)")


INDEX_DTYPES = (torch.int32, torch.int64)


def _integer_indices(op: Any, given: dict[str, Any]) -> None:
    """``index.Tensor`` with a bool (or byte) mask selects the masked elements: a result whose
    length is the count of true values, a size that is data, read back by ``sym_size`` (red team,
    session 32). Each index must be None or a tensor of int32 or int64 positions (what ``x[:, i]``
    captures to); a mask selects with ``where`` or ``masked_fill`` instead."""
    indices = given.get("indices")
    if not isinstance(indices, list | tuple) or not all(
            i is None or (isinstance(i, torch.Tensor) and i.dtype in INDEX_DTYPES) for i in indices):
        raise RuntimeError(f"{op}: each index must be None or an int32 or int64 tensor (no masks: a data-dependent size)")


MASK_DTYPES = (torch.bool, torch.uint8)


def _mask_puts_one_value(op: Any, given: dict[str, Any]) -> None:
    """``index_put`` with a bool (or byte) mask, ``x[mask] = v``, puts ``v``'s values on the true
    elements: unless ``v`` is one value, whether it raises depends on how many are true, which is
    data, so a model could end its job on the data it chose (a judged ``failed`` made an error).
    With a mask the value must be one (``x[x < 0] = 0.0``); ``torch.where`` puts a tensor's."""
    indices = given.get("indices")
    if isinstance(indices, list | tuple) and any(isinstance(i, torch.Tensor) and i.dtype in MASK_DTYPES
                                                 for i in indices):
        values = given.get("values")
        if not isinstance(values, torch.Tensor) or values.numel() != 1:
            raise RuntimeError(f"{op}: with a mask it puts one value (x[mask] = 0.0); put a tensor's values "
                               "with torch.where(mask, values, x): how many a mask selects is data")


PAD_MODES = 4  # _pad_enum's modes: reflect, replicate, circular, constant (at::padding_mode)


def _pad_enum_mode(op: Any, given: dict[str, Any]) -> None:
    """``_pad_enum`` casts its int64 mode to a 32-bit enum: a mode of ``2 + 2**32`` was circular to
    the kernel but not 2 to ``_circular_pad_keeps``, so a pad of (-5, 5) returned memory nobody
    wrote, heap pointers among it (red team, session 32). The mode must be one of the four, and
    a circular one keeps what it wraps (``_circular_pad_keeps``)."""
    mode = given.get("mode")
    if type(mode) is not int or mode not in range(PAD_MODES):
        raise RuntimeError(f"{op}: the mode must be 0 to {PAD_MODES - 1} (reflect, replicate, circular, constant)")
    _circular_pad_keeps(op, given)


# Ops whose kernels trust arguments their public wrappers check: each runs behind its check.
GUARDS: dict[str, Any] = {
    **{name: _floating_only for name in INTEGER_DIVISIONS},
    "aten.native_group_norm.default": _group_norm_sizes,
    **{f"aten.{name}.default": _upsample_scales for name in (
        "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "upsample_linear1d")},
    "aten.im2col.default": _im2col_sizes,
    "aten._pad_circular.default": _circular_pad_keeps,
    "aten.pad.default": _circular_pad_keeps,
    "aten._pad_enum.default": _pad_enum_mode,
    "aten.scaled_dot_product_attention.default": _attention_shapes,
    "aten._scaled_dot_product_attention_math.default": _attention_shapes,
    "aten.max_pool1d.default": _max_pool_windows,
    **{f"aten.{name}.default": _max_pool_windows for name in (
        "max_pool1d_with_indices", "max_pool2d", "max_pool2d_with_indices", "max_pool3d", "max_pool3d_with_indices")},
    "aten._native_batch_norm_legit_functional.default": _per_channel,
    "aten._native_batch_norm_legit_no_training.default": _per_channel,
    "aten._native_batch_norm_legit.no_stats": _per_channel,
    "aten._weight_norm.default": _gain_per_slice,
    "aten._weight_norm_interface.default": _gain_per_slice,
    "aten.linalg_matrix_power.default": _matrix_power_exponent,
    "aten.matrix_power.default": _matrix_power_exponent,
    "aten._prelu_kernel.default": _prelu_weight_rank,
    "aten._euclidean_dist.default": _distance_ranks,
    "aten.one_hot.default": _one_hot_classes,
    "aten.index.Tensor": _integer_indices,
    "aten.index_put.default": _mask_puts_one_value,
}


def _guarded(op: Any, guard: Any, run: Any = None) -> Any:
    """``op`` behind ``guard``, which sees the call's arguments by name (``op``'s schema), raises
    to refuse it, and may return arguments to pass in their place (by name); ``run``: what runs
    then, ``op`` or its faster form (``bench.batched_ops.FASTER``), its ``__wrapped__``."""
    names = [argument.name for argument in op._schema.arguments]
    runs = op if run is None else run

    def call(*args: Any, **kwargs: Any) -> Any:
        instead = guard(op, {**dict(zip(names, args, strict=False)), **kwargs}) or {}
        if instead:
            args = tuple(instead.get(name, value) for name, value in zip(names, args, strict=False))
            kwargs = {name: instead.get(name, value) for name, value in kwargs.items()}
        return runs(*args, **kwargs)
    call.__wrapped__ = runs  # type: ignore[attr-defined]
    return call


MAX_STRING_ARG = 64  # the strings ATen ops take: einsum equations, modes ("tanh", "reflect", "floor")


SCALAR_KINDS = frozenset({"IntType", "SymIntType", "FloatType", "NumberType", "BoolType", "SymBoolType",
                          "SymFloatType"})


# What a size's node may fill: a number, never a flag. No size is a bool, but aten read an int as
# one: the batch size turned ``native_dropout``'s ``train`` or a ``keepdim`` on and off (red team,
# session 32). A bool argument takes a literal True or False.
SIZE_FILLS = SCALAR_KINDS - {"BoolType", "SymBoolType"}


def _scalar_node(value: Any) -> bool:
    """A node whose value is a Python number: a size op's result (``sym_size``, ``numel``, ...)
    or size arithmetic on them (``build_graph`` marks them)."""
    return isinstance(value, fx.Node) and bool(value.meta.get("scalar"))


def _fits(value: Any, jit_type: Any) -> bool:
    """Whether a decoded argument can be a value of the schema's type: a node stands for a
    tensor (or a number, wrapped as aten wraps a Python number) where a tensor goes, and only a
    size's node for a number: a tensor where a size, dim or scalar goes would be read as its
    value, a data-dependent number (``_local_scalar_dense``'s, which DENIED_OPS refuses)."""
    kind = jit_type.kind()
    if kind == "OptionalType":
        return value is None or _fits(value, jit_type.getElementType())
    if isinstance(value, fx.Node):
        if value.meta.get("several"):  # an op's several results: only getitem takes them
            return False
        return kind == "TensorType" or (kind in SIZE_FILLS and _scalar_node(value))
    if kind == "TensorType":  # a Python number where a tensor goes is wrapped (mul.Tensor(x, 0.5))
        return isinstance(value, int | float | bool)
    if kind == "ListType":
        inner = jit_type.getElementType()
        return isinstance(value, list | tuple) and all(_fits(v, inner) for v in value)
    if kind in ("IntType", "SymIntType"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in ("FloatType", "SymFloatType"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "NumberType":  # a Scalar
        return isinstance(value, int | float | bool)
    if kind in ("BoolType", "SymBoolType"):
        return isinstance(value, bool)
    if kind == "StringType":
        return isinstance(value, str) and len(value) <= MAX_STRING_ARG and value.isprintable()
    if kind == "ScalarTypeType":
        return isinstance(value, torch.dtype)
    if kind == "DeviceObjType":
        return isinstance(value, torch.device)
    if kind == "LayoutType":
        return isinstance(value, torch.layout)
    if kind == "MemoryFormatType":
        return isinstance(value, torch.memory_format)
    return False  # generators, streams, storages, anything else: never from a capture


MAX_INT_ARG = 1 << 31
# export writes "to the end" of a slice as int64's largest value; the slice kernels clamp it
INT_SENTINELS: dict[tuple[str, str], frozenset[int]] = {
    (op, name): frozenset({(1 << 63) - 1})
    for op in ("aten.slice.Tensor", "aten.slice_scatter.default") for name in ("start", "end")}


def _integers(value: Any, jit_type: Any) -> list[int]:
    """The literal integers of an argument whose schema type is an integer (a size, a dim, an
    index, a mode), alone, in a list or optional; a node's value is bounded where it is made
    (``_bounded``), a Scalar's is a number, not a size."""
    kind = jit_type.kind()
    if kind in ("OptionalType", "ListType"):
        inner = jit_type.getElementType()
        return [i for v in (value if isinstance(value, list | tuple) else [value]) for i in _integers(v, inner)]
    if kind in ("IntType", "SymIntType") and isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return []


def _node_integers(target: Any, args: list[Any], kwargs: dict[str, Any]) -> tuple[str, ...]:
    """The names of ``target``'s integer arguments (a size, dim, index or mode, alone, in a list or
    optional) that a node fills: a size's value is known only when the graph runs."""
    def holds(value: Any, jit_type: Any) -> bool:
        kind = jit_type.kind()
        if kind in ("OptionalType", "ListType"):
            inner = jit_type.getElementType()
            return any(holds(v, inner) for v in (value if isinstance(value, list | tuple) else [value]))
        return kind in ("IntType", "SymIntType") and isinstance(value, fx.Node)

    positional = [a for a in target._schema.arguments if not a.kwarg_only]
    given = {**{a.name: v for a, v in zip(positional, args, strict=False)}, **kwargs}
    return tuple(a.name for a in target._schema.arguments if a.name in given and holds(given[a.name], a.real_type))


def _sizes_within(name: str, arguments: tuple[str, ...]) -> Any:
    """A guard: the integers of ``arguments`` that nodes filled are ints within ``MAX_INT_ARG`` of 0
    (``INT_SENTINELS`` aside) when the graph runs, as ``check_call`` holds a literal's. A size op's
    result or arithmetic on it reached a kernel at 2**48 (``_bounded``) or 2**62 (``numel`` of an
    expanded tensor), and a float (``truediv``) where an int goes (red team, session 32)."""
    def guard(op: Any, given: dict[str, Any]) -> None:
        for argument in arguments:
            value = given.get(argument)
            for v in value if isinstance(value, list | tuple) else [value]:
                if v is None:
                    continue
                if (not isinstance(v, int) or isinstance(v, bool)
                        or (abs(v) > MAX_INT_ARG and v not in INT_SENTINELS.get((name, argument), ()))):
                    raise RuntimeError(f"{op}: argument {argument!r} holds a size beyond 2**31 either side of 0 "
                                       f"or not an int ({str(v)[:24]})")
    return guard


def _literal_bits(value: Any) -> int:
    """How many bits of the graph's own data ``value`` holds, in any argument: an integer its
    length in bits and a sign (a size, dim or index: a few bits), another number 32, a string 8 a
    character. Sizes, dims and indices count too: a table of 2,000 values written as
    ``select(arange(4096), 0, k)`` indices passed as "4 words" when only data-typed arguments
    counted (red team); counted one word a number, honest models held 0 to 80 of them, and an
    idea's shapes and dims beyond its baseline's filled a room meant for fixed maps."""
    if isinstance(value, list | tuple):
        return sum(_literal_bits(v) for v in value)
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return abs(value).bit_length() + 1
    if isinstance(value, float):
        return abs(int(value)).bit_length() + 1 if value.is_integer() and abs(value) < 2**24 else 32
    if isinstance(value, str):
        return 8 * len(value)
    return 0


def check_call(name: str, target: Any, args: list[Any], kwargs: dict[str, Any]) -> int:
    """Deny by default: a node's arguments must bind to its op's schema (positional arguments
    at most as many as it has, keyword names among its own, each once, every argument without
    a default given) with values of the argument's type, every integer of a size, dim, index or
    mode within ``MAX_INT_ARG`` of 0 (the one sentinel export writes aside: ``INT_SENTINELS``;
    kernels multiply them in 64 bits or cast them to 32, and a red team wrapped five of them:
    tests/security/test_kernel_shapes.py); a size-arithmetic op takes one or
    two numbers or nodes and no keywords. ``not_capturable`` otherwise. Returns how many bits
    of literal data the node holds (``_literal_bits``)."""
    def refused(why: str) -> BenchError:
        return not_capturable(f"the graph calls {name[:80]!r} with arguments ideabench refuses: {why}")

    if not isinstance(target, torch._ops.OpOverload):
        arity = 1 if name == "operator.neg" else 2
        if kwargs or len(args) != arity:
            raise refused("size arithmetic takes two values (one for neg) and no keywords")
        if name == "operator.getitem":
            if not (isinstance(args[0], fx.Node) and args[0].meta.get("several")
                    and isinstance(args[1], int) and not isinstance(args[1], bool)):
                raise refused("getitem takes an op's several results and an integer index")
        elif not all(_scalar_node(a) or (isinstance(a, int | float) and not isinstance(a, bool)) for a in args):
            raise refused("size arithmetic takes sizes and numbers")
        return _literal_bits(args)
    arguments = target._schema.arguments
    positional = [a for a in arguments if not a.kwarg_only]
    if len(args) > len(positional):
        raise refused(f"{len(args)} positional arguments, the op takes at most {len(positional)}")
    by_name = {a.name: a for a in arguments}
    for key in kwargs:
        if key not in by_name:
            raise refused(f"no argument is named {key[:40]!r}")
    given = {a.name: v for a, v in zip(positional, args, strict=False)}
    for key, value in kwargs.items():
        if key in given:
            raise refused(f"argument {key!r} is given twice")
        given[key] = value
    for argument in arguments:
        if argument.name not in given:
            if not argument.has_default_value():
                raise refused(f"argument {argument.name!r} is missing")
        elif not _fits(given[argument.name], argument.real_type):
            raise refused(f"argument {argument.name!r} is not a {argument.real_type}")
        elif argument.name in INT_ENUMS and given[argument.name] not in range(INT_ENUMS[argument.name]):
            raise refused(f"argument {argument.name!r} is none of its modes")
        elif any(abs(i) > MAX_INT_ARG and i not in INT_SENTINELS.get((name, argument.name), ())
                 for i in _integers(given[argument.name], argument.real_type)):
            raise refused(f"argument {argument.name!r} holds an integer beyond 2**31 either side of 0")
    return sum(_literal_bits(given[a.name]) for a in arguments if a.name in given)


def _entries(value: Any) -> int:
    """The entries of the lists and dicts in an argument of graph JSON, nested ones included."""
    if isinstance(value, list):
        return len(value) + sum(_entries(v) for v in value)
    if isinstance(value, dict):
        return len(value) + sum(_entries(v) for v in value.values())
    return 0


def _decode(value: Any, env: dict[str, fx.Node], device: torch.device) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, list):
        if len(value) > MAX_LIST:
            raise not_capturable(f"the graph holds an argument list of {len(value)} entries; the limit is {MAX_LIST}",
                                 "Stack or concatenate tensors a few at a time, or build one tensor of them.")
        return [_decode(v, env, device) for v in value]
    if isinstance(value, dict) and len(value) == 1:
        (key, inner), = value.items()
        if not isinstance(inner, str) and key in ("$node", "$dtype", "$layout", "$memory_format"):
            # a list or dict there made ``inner in env`` raise TypeError: an internal error, not a refusal
            raise not_capturable(f"the graph holds an argument ideabench does not accept: {str(value)[:80]}")
        if key == "$node" and inner in env:
            return env[inner]
        if key == "$tuple" and isinstance(inner, list):
            return tuple(_decode(inner, env, device))
        if key == "$float" and inner in ("inf", "-inf", "nan"):
            return float(inner)
        if key == "$dtype" and inner in DTYPES:
            return DTYPES[inner]
        if key == "$dtype":
            raise not_capturable(f"the graph computes in dtype {str(inner)[:20]}; ideabench takes {', '.join(DTYPES)}",
                                 "Compute in float32 (or float64); round and clamp in float to model lower precision.")
        if key == "$device" and inner in ("cpu", "cuda"):
            return device  # the trainer's device, whatever the capture saw
        if key == "$layout" and inner in LAYOUTS:
            return LAYOUTS[inner]
        if key == "$memory_format" and inner in MEMORY_FORMATS:
            return MEMORY_FORMATS[inner]
    raise not_capturable(f"the graph holds an argument ideabench does not accept: {str(value)[:80]}")


@dataclass(frozen=True)
class Signature:
    """What a checked graph takes and gives: tensor targets by kind, in call order."""

    inputs: tuple[tuple[str, str], ...]  # (kind, target); "user" has target ""
    mutations: tuple[str, ...]  # buffer targets the graph returns new values for, in order
    literals: int = 0  # 32-bit words of literal data the graph holds (check_call's bits), counted with the buffers


def build_graph(doc: Any, device: torch.device) -> tuple[Program, Signature]:
    """Check graph JSON ``doc`` against the allowlist and each op's schema, and build it as a
    ``Program`` (run node by node: no code is generated from it)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise not_capturable("the captured graph is not in ideabench's format")
    inputs, outputs, nodes = doc.get("inputs"), doc.get("outputs"), doc.get("nodes")
    if not (isinstance(inputs, list) and isinstance(outputs, list) and isinstance(nodes, list)):
        raise not_capturable("the captured graph is malformed")
    if len(nodes) > MAX_NODES:
        raise not_capturable(f"the captured graph has {len(nodes)} nodes; the limit is {MAX_NODES}")
    entries = sum(_entries(n.get("args")) + _entries(n.get("kwargs")) for n in nodes if isinstance(n, dict))
    if entries > MAX_ARGUMENTS:
        raise not_capturable(f"the captured graph's arguments hold {entries} entries; the limit is {MAX_ARGUMENTS}")
    kinds = [i.get("kind") if isinstance(i, dict) else None for i in inputs]
    if any(k not in INPUT_KINDS for k in kinds) or kinds.count("user") != 1:
        raise not_capturable("the model must take exactly one tensor input, plus its own tensors")
    out_kinds = [o.get("kind") if isinstance(o, dict) else None for o in outputs]
    if any(k not in OUTPUT_KINDS for k in out_kinds) or out_kinds.count("user") != 1 or out_kinds[-1] != "user":
        raise not_capturable("the model must return exactly one tensor")
    targets = [str(i.get("target", "")) for i in inputs if i["kind"] != "user"]
    if len(set(targets)) != len(targets) or len({_slot(t) for t in targets}) != len(targets):
        # Two names for one module slot ("a.b" and "a__b") would make one tensor stand for two.
        raise not_capturable("the captured graph names one tensor twice")
    buffers = {str(i["target"]) for i in inputs if i["kind"] == "buffer"}
    mutations = tuple(str(o.get("target")) for o in outputs if o["kind"] == "buffer_mutation")
    if not set(mutations) <= buffers or len(set(mutations)) != len(mutations):
        raise not_capturable("the graph updates a tensor that is not one of its buffers")

    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    placeholders = [n for n in nodes if isinstance(n, dict) and n.get("op") == "placeholder"]
    if [n.get("name") for n in placeholders] != [i.get("name") for i in inputs]:
        raise not_capturable("the graph's inputs do not match its signature")
    saw_output = False
    literal_bits = 0
    for index, node in enumerate(nodes):
        if not isinstance(node, dict) or saw_output:
            raise not_capturable("the captured graph is malformed")
        name, op = node.get("name"), node.get("op")
        if not isinstance(name, str) or name in env:
            raise not_capturable("the captured graph is malformed (node names)")
        if op == "placeholder":
            env[name] = graph.placeholder(f"in_{index}")
        elif op == "call_function":
            target = resolve_op(node.get("target"))
            if target is torch.ops.aten.view.default:
                # A functional graph needs no aliasing: reshape gives the same values, and also
                # works on the non-contiguous (batched) tensors of the vectorized trainer.
                target = torch.ops.aten.reshape.default
            args = _decode(node.get("args"), env, device)
            kwargs = node.get("kwargs")
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise not_capturable("the captured graph is malformed (arguments)")
            decoded = {k: _decode(v, env, device) for k, v in kwargs.items() if isinstance(k, str)}
            if len(decoded) != len(kwargs):
                raise not_capturable("the captured graph is malformed (arguments)")
            literal_bits += check_call(str(node.get("target")), target, args, decoded)
            if isinstance(target, torch._ops.OpOverload):
                returns = [r.type.kind() for r in target._schema.returns]
                scalar = len(returns) == 1 and returns[0] in SCALAR_KINDS  # a size op's number
                several = len(returns) > 1 or returns == ["ListType"]
            else:  # size arithmetic on sizes is a size; getitem picks one of an op's tensors
                scalar, several = str(node.get("target")) != "operator.getitem", False
            # checked as the aten op; run in a faster form, its results to float rounding (bench.batched_ops),
            # behind the op's guard where it has one
            faster = batched_ops.FASTER.get(target, target)
            guard = GUARDS.get(str(node.get("target")))
            op, target = target, faster if guard is None else _guarded(target, guard, faster)
            sized = _node_integers(op, args, decoded) if isinstance(op, torch._ops.OpOverload) else ()
            if sized:  # every integer a node fills is bounded as a literal is, when the graph runs
                target = _guarded(op, _sizes_within(str(node.get("target")), sized), target)
            env[name] = graph.call_function(target, tuple(args), decoded)
            env[name].meta.update(scalar=scalar, several=several)
            module = node.get("module", "")
            if not isinstance(module, str) or not (module == "" or MODULE_PATH.fullmatch(module)):
                raise not_capturable("the captured graph is malformed (a node's module label)")
            env[name].meta["module"] = module
        elif op == "output":
            result = _decode(node.get("args"), env, device)
            if not isinstance(result, list) or len(result) != 1:
                raise not_capturable("the captured graph is malformed (output)")
            values = result[0]
            if not isinstance(values, list | tuple) or len(values) != len(outputs):
                raise not_capturable("the graph's outputs do not match its signature")
            if not all(isinstance(v, fx.Node) for v in values):
                raise not_capturable("the model must return tensors only")
            graph.output(tuple(values))
            saw_output = True
        else:
            raise not_capturable(f"the graph holds a node of kind {str(op)[:20]}, which ideabench refuses")
    if not saw_output:
        raise not_capturable("the captured graph has no output")
    module = Program(graph)
    signature = Signature(
        inputs=tuple((str(i["kind"]), str(i.get("target", "")) if i["kind"] != "user" else "") for i in inputs),
        mutations=mutations, literals=-(-literal_bits // 32),
    )
    return module, signature


def _loader(value: Any) -> Any:
    """A function of the value list that gives ``value`` with each node replaced by its value."""
    if isinstance(value, fx.Node):
        index = value.meta["index"]
        return lambda values: values[index]
    if isinstance(value, list | tuple) and any(isinstance(v, fx.Node | list | tuple) for v in value):
        loaders, kind = [_loader(v) for v in value], type(value)
        return lambda values: kind(load(values) for load in loaders)
    return lambda values: value


class Program:
    """A checked graph that trusted code runs node by node: an interpreter over ``graph``.

    No code is generated: ``fx.GraphModule`` writes a graph as Python source and runs it, and
    its code generator pasted a node's keyword names verbatim into that source (issue 25: a
    key such as ``"alpha=1)\nimport os..."`` ran in the trainer). Here a node is a call of its
    resolved op on its values; each value is dropped after its last use."""

    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        nodes = list(graph.nodes)
        for index, node in enumerate(nodes):
            node.meta["index"] = index
        last_use: dict[fx.Node, int] = {}
        for index, node in enumerate(nodes):
            for used in node.all_input_nodes:
                last_use[used] = index
        frees: dict[int, list[int]] = {}
        for used, index in last_use.items():
            frees.setdefault(index, []).append(used.meta["index"])
        self._n = len(nodes)
        self._inputs = [n.meta["index"] for n in nodes if n.op == "placeholder"]
        self._steps = [
            (node.meta["index"], node.target, [_loader(a) for a in node.args],
             {k: _loader(v) for k, v in node.kwargs.items()}, frees.get(node.meta["index"], []))
            for node in nodes if node.op == "call_function"
        ]
        output = next(n for n in nodes if n.op == "output")
        self._output = [_loader(v) for v in output.args[0]]

    def run(self, *inputs: Any, keep: frozenset[int] = frozenset()) -> tuple[tuple[Any, ...], dict[int, Any]]:
        """The graph's outputs for ``inputs``, and the values of the nodes whose index is in ``keep``."""
        values: list[Any] = [None] * self._n
        for index, value in zip(self._inputs, inputs, strict=True):
            values[index] = value
        kept: dict[int, Any] = {i: values[i] for i in keep if i in self._inputs}
        for index, op, args, kwargs, frees in self._steps:
            values[index] = op(*[load(values) for load in args], **{k: load(values) for k, load in kwargs.items()})
            if index in keep:
                kept[index] = values[index]
            for freed in frees:
                values[freed] = None
        return tuple(load(values) for load in self._output), kept

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        return self.run(*inputs)[0]

    def __len__(self) -> int:
        """The nodes a run calls (ops, getitems, size arithmetic): ``bench.cost`` prices each."""
        return len(self._steps)


def _prefixes(path: str) -> list[str]:
    """"a.b.c" -> ["a", "a.b", "a.b.c"]; "" -> []."""
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _slot(target: str) -> str:
    return target.replace(".", "__")


class CapturedModel(nn.Module):
    """A captured model rebuilt by trusted code: its forward runs the train or eval graph on
    the module's own tensors. Every parameter trains (a capture cannot hide a table behind
    ``requires_grad=False``); buffers and tensor constants are buffers, counted apart."""

    # Set through __dict__ in __init__ (plain attributes, not submodules or tensors).
    _graphs: dict[str, tuple[Program, tuple[str, ...], tuple[str, ...]]]
    _user_index: int
    _order: list[str]

    def __init__(self, graphs: dict[str, tuple[Program, Signature]],
                 tensors: dict[str, torch.Tensor], device: torch.device) -> None:
        super().__init__()
        train_sig = graphs["train"][1]
        if "eval" in graphs and graphs["eval"][1].mutations:
            raise eval_mutation()
        for mode, (_, sig) in graphs.items():
            if sig.inputs != train_sig.inputs:
                raise not_capturable(f"the {mode}-mode graph takes other tensors than the train-mode one")
        for kind, target in train_sig.inputs:
            if kind == "user":
                continue
            value = tensors.get(target)
            if value is None:
                raise not_capturable(f"the capture sent no values for {target[:80]!r}")
            value = value.to(device)
            if kind == "parameter":
                if not value.dtype.is_floating_point:
                    raise not_capturable(f"parameter {target[:80]!r} is not floating point")
                self._parameters[_slot(target)] = nn.Parameter(value, requires_grad=True)
            else:
                self._buffers[_slot(target)] = value
                if kind == "constant":
                    self._non_persistent_buffers_set.add(_slot(target))
        self.mutates_buffers = any(sig.mutations for _, sig in graphs.values())
        self.literals = max(sig.literals for _, sig in graphs.values())  # either graph may hold a table
        # Plain attributes, not submodules: the graphs hold no tensors of their own.
        self.__dict__["_graphs"] = {mode: (module, tuple(_slot(t) for k, t in sig.inputs if k != "user"),
                                           tuple(_slot(t) for t in sig.mutations))
                                    for mode, (module, sig) in graphs.items()}
        self.__dict__["_user_index"] = [k for k, _ in train_sig.inputs].index("user")
        self.__dict__["_order"] = [_slot(t) for k, t in train_sig.inputs if k != "user"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        module, names, mutated = self._graphs["train" if self.training else "eval"]
        values = [self._parameters[n] if n in self._parameters else self._buffers[n] for n in names]
        values.insert(self._user_index, x)
        outputs = module(*values)
        # New buffer values (BatchNorm's running statistics) replace the old tensors, which
        # autograd may still hold for this step's backward: never written in place.
        for name, new in zip(mutated, outputs[: len(mutated)], strict=True):
            old = self._buffers[name]
            if old is not None and (new.shape != old.shape or new.dtype != old.dtype):
                # A buffer that grows (cat(buffer, x)) would hold every batch it saw, uncounted.
                raise not_capturable(f"the model's buffer {name[:80]!r} changes shape or dtype when updated")
            self._buffers[name] = new.detach()
        out: torch.Tensor = outputs[-1]
        return out

    def submodule_io(self, x: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The activation entering and the one leaving submodule ``name`` (its attribute path,
        or the last part of it: "mix" finds "blocks.0.mix", the first in graph order) when the
        eval-mode graph runs on ``x``. Its ops are the nodes the capture labelled with that
        path or one below it. Every value that crosses its boundary counts, whatever its type
        (sizes aside: Python numbers), and it must take exactly one and give exactly one, each a
        floating tensor with ``x``'s batch first and a dimension more; it must use at least one
        trainable parameter (a labelled no-op measures nothing). ``ValueError`` otherwise. The
        third tensor is the model's output of the same run."""
        module, names, _ = self._graphs["eval"]
        graph = module.graph
        calls = [n for n in graph.nodes if n.op == "call_function"]
        path = next((prefix for n in calls for prefix in _prefixes(n.meta.get("module", ""))
                     if name in (prefix, prefix.rsplit(".", 1)[-1])), None)
        if path is None:
            raise ValueError(f"the model has no submodule named {name!r}")
        inside = {n for n in calls if n.meta.get("module", "") == path
                  or str(n.meta.get("module", "")).startswith(path + ".")}
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        user = placeholders[self._user_index]
        own = dict(zip([p for p in placeholders if p is not user], names, strict=True))
        if not any(own.get(a) in self._parameters for n in inside for a in n.all_input_nodes):
            raise ValueError(f"submodule {path!r} uses none of the model's trainable parameters")
        entering = {a for n in inside for a in n.all_input_nodes if a not in inside and a not in own}
        leaving = {n for n in inside if any(u not in inside for u in n.users)}
        values = [self._parameters[n] if n in self._parameters else self._buffers[n] for n in names]
        values.insert(self._user_index, x)
        outputs, seen = module.run(*values, keep=frozenset(n.meta["index"] for n in entering | leaving))
        output = outputs[-1]

        def crossing(nodes: set[fx.Node]) -> list[Any]:
            return [seen[n.meta["index"]] for n in graph.nodes
                    if n in nodes and not isinstance(seen[n.meta["index"]], int | float)]

        ins, outs = crossing(entering), crossing(leaving)
        if len(ins) != 1 or len(outs) != 1:
            raise ValueError(f"submodule {path!r} takes {len(ins)} values and gives {len(outs)}; this probe "
                             "needs one of each (a submodule called once, one activation in and out)")
        for what, value in (("takes", ins[0]), ("gives", outs[0])):
            if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() >= 2
                    and value.shape[0] == x.shape[0]):
                raise ValueError(f"submodule {path!r} {what} no floating tensor with the batch first "
                                 "and at least one more dimension")
        return ins[0], outs[0], output

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the model holds, in the graph's input order (as the capture sent them)."""
        tensors = [self._parameters[n] if n in self._parameters else self._buffers[n] for n in self._order]
        return [t for t in tensors if t is not None]

    def counts(self) -> tuple[int, int]:
        """(parameters in 32-bit words, what buffers, constants and data literals hold in 32-bit
        words). A parameter's words are its bytes / 4, rounded up (a float64 element two, a
        complex128 four: the diabetes rows packed into 226 complex128 elements passed a cap of
        385 counted by element). Buffers and constants are counted by the information they hold
        (``info_words``), each literal number as one word."""
        n_buffers = sum(info_words(b) for b in self._buffers.values() if b is not None)
        return self.param_words(), n_buffers + self.literals

    def param_words(self) -> int:
        """The parameters in 32-bit words (``counts()[0]``, without compressing the buffers:
        what every build and run needs)."""
        return sum(_words(p) for p in self._parameters.values() if p is not None)


def _words(tensor: torch.Tensor) -> int:
    return -(-tensor.numel() * tensor.element_size() // 4)


def info_words(tensor: torch.Tensor) -> int:
    """What a buffer or constant holds, in 32-bit words: one for a constant (every entry equal:
    zeros, ones, a running statistic's start), else its bytes compressed (zlib, level 9: no
    decodable code is shorter than the information it carries), at most its raw words. A fixed
    map repeated per channel is cheap; a packed table or network is not (red team: vision's
    pretrained baseline at 3 bits a weight in an int32 buffer, 190 raw words, is 190 here)."""
    flat = tensor.detach().flatten()
    if flat.numel() < 2 or bool((flat == flat[0]).all()):
        return 1 if flat.numel() else 0
    packed = zlib.compress(flat.cpu().contiguous().numpy().tobytes(), 9)
    return min(_words(tensor), -(-len(packed) // 4))


def rebuild(docs: dict[str, Any], tensors: dict[str, np.ndarray], device: torch.device) -> CapturedModel:
    """The ``CapturedModel`` of graph JSON ``docs`` (``{"train": .., "eval": ..}``) and arrays."""
    if set(docs) != {"train", "eval"}:
        raise not_capturable("a capture needs a train-mode and an eval-mode graph")
    graphs = {mode: build_graph(doc, device) for mode, doc in docs.items()}
    as_tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()}
    return CapturedModel(graphs, as_tensors, device)
