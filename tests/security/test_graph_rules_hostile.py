"""Red team of the graph's three deny-by-default rules (session 32): integers of sizes within
2**31 (``MAX_INT_ARG``), a size argument filled only by a size (``SCALAR_KINDS`` and the node
marks of ``build_graph``), and the dtypes a graph names and stores (``DTYPES``).

Each document here is what a hostile capture child could write. Findings (each fails without
its fix in ``bench/graph.py``): a tensor's values reached a size through ``where(condition)``
(``nonzero``'s tuple), ``narrow.Tensor``'s start, ``one_hot``'s -1 classes and a bool mask given
to ``index.Tensor``; a node's integer reached a kernel at 2**40 or as a float where the literal
rule stops at 2**31; an unhashable ``$dtype`` / ``$node`` made ``build_graph`` raise ``TypeError``
(an internal error) instead of refusing. The rest are what was checked and holds.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bench.errors import BenchError, ErrorCode
from bench.graph import DTYPES, build_graph
from tests.capture_helpers import graph_of as _calls

CPU = torch.device("cpu")


def _run(doc: dict[str, Any], x: torch.Tensor) -> Any:
    program, _ = build_graph(doc, CPU)
    return program(x)[0]


def _refused_at_build(doc: dict[str, Any]) -> str:
    with pytest.raises(BenchError) as info:
        build_graph(doc, CPU)
    assert info.value.code == ErrorCode.NOT_CAPTURABLE
    return info.value.message


X = torch.tensor([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]])
TIMES_N: tuple[str, str, list[Any], dict[str, Any]] = ("y", "aten.mul.Scalar", ["@x", "@n"], {})  # the size n used as a number: x * n


# -- findings: a tensor's values as a size ---------------------------------------------------
def test_where_of_a_condition_is_refused_its_count_of_true_values_was_a_size() -> None:
    """``where(c)`` is ``nonzero(c, as_tuple=True)``: ``sym_size`` of its first tensor was the
    number of positive inputs, a Python number (4 for X, 2 for -X) filling any size argument."""
    doc = _calls(("c", "aten.gt.Scalar", ["@x", 0], {}), ("w", "aten.where.default", ["@c"], {}),
                 ("i", "operator.getitem", ["@w", 0], {}), ("n", "aten.sym_size.int", ["@i", 0], {}), TIMES_N)
    assert "aten.where.default" in _refused_at_build(doc)


def test_narrow_with_a_tensor_start_is_refused() -> None:
    """``narrow.Tensor`` reads its start from a 0-dim tensor: a sum of the input chose the column."""
    doc = _calls(("s", "aten.sum.default", ["@x"], {}),
                 ("t", "aten._to_copy.default", ["@s"], {"dtype": {"$dtype": "int64"}}),
                 ("y", "aten.narrow.Tensor", ["@x", 1, "@t", 1], {}))
    assert "aten.narrow.Tensor" in _refused_at_build(doc)


def test_one_hot_must_be_given_its_classes() -> None:
    """``one_hot(x, -1)`` takes its width from the largest value: ``sym_size`` read it back."""
    def doc(classes: int) -> dict[str, Any]:
        return _calls(("l", "aten._to_copy.default", ["@x"], {"dtype": {"$dtype": "int64"}}),
                      ("a", "aten.abs.default", ["@l"], {}), ("o", "aten.one_hot.default", ["@a", classes], {}),
                      ("n", "aten.sym_size.int", ["@o", -1], {}), TIMES_N)
    for classes in (-1, 0):
        with pytest.raises(RuntimeError, match="num_classes"):
            _run(doc(classes), X)
    assert _run(doc(7), X)[0, 0].item() == 7.0  # F.one_hot(x, 7): a fixed width


def test_index_with_a_mask_is_refused_and_integer_indices_pass() -> None:
    """``x[x > 0]`` (``index.Tensor`` with a bool mask) had as many rows as true values."""
    masked = _calls(("c", "aten.gt.Scalar", ["@x", 0], {}), ("i", "aten.index.Tensor", ["@x", ["@c"]], {}),
                    ("n", "aten.sym_size.int", ["@i", 0], {}), TIMES_N)
    with pytest.raises(RuntimeError, match="int32 or int64"):
        _run(masked, X)
    for dtype in ("int64", "int32"):
        positions = _calls(("z", "aten.zeros.default", [[2]], {"dtype": {"$dtype": dtype}}),
                           ("y", "aten.index.Tensor", ["@x", [None, "@z"]], {}))
        assert torch.equal(_run(positions, X), X[:, [0, 0]])


def test_a_masks_assignment_puts_one_value_and_integer_positions_pass() -> None:
    """``x[mask] = v`` (``index_put`` with a bool mask) raised when ``v``'s length was not the count of
    true values: a model chose, by its data, whether its job ended in an error (session 38). One
    value always fits; a tensor of values is refused whatever the data; integer positions pass."""
    mask_put = _calls(("c", "aten.lt.Scalar", ["@x", 0], {}), ("z", "aten.zeros.default", [[]], {}),
                      ("y", "aten.index_put.default", ["@x", ["@c"], "@z"], {}))
    assert torch.equal(_run(mask_put, X), X.clamp(min=0))  # x[x < 0] = 0.0
    two = _calls(("c", "aten.lt.Scalar", ["@x", 0], {}), ("z", "aten.zeros.default", [[2]], {}),
                 ("y", "aten.index_put.default", ["@x", ["@c"], "@z"], {}))
    with pytest.raises(RuntimeError, match="puts one value"):
        _run(two, X)  # two negatives in X: it fits here, and would raise on other data
    positions = _calls(("i", "aten.zeros.default", [[2]], {"dtype": {"$dtype": "int64"}}),
                       ("v", "aten.ones.default", [[2, 3]], {}),
                       ("y", "aten.index_put.default", ["@x", ["@i"], "@v"], {}))
    assert torch.equal(_run(positions, X), torch.tensor([[1.0, 1.0, 1.0], [4.0, 5.0, -6.0]]))


# -- findings: a node's integer past 2**31, a float where an int goes -------------------------
def _batch_times(factor: int, target: str, args: list[Any]) -> dict[str, Any]:
    """``n = batch * factor // batch`` (a size node of any value up to 2**48), then ``target``."""
    return _calls(("b", "aten.sym_size.int", ["@x", 0], {}), ("m", "operator.mul", ["@b", factor], {}),
                  ("n", "operator.floordiv", ["@m", "@b"], {}), ("y", target, args, {}))


@pytest.mark.parametrize(("target", "args"), [
    ("aten.roll.default", ["@x", ["@n"]]),  # rolled by 2**40 + 1 = by 1: the literal is refused
    ("aten.select.int", ["@x", 1, "@n"]),
    ("aten.narrow.default", ["@x", 1, 0, "@n"]),
    ("aten.view.default", ["@x", ["@n", -1]]),
])
def test_a_size_node_past_2_31_is_refused_when_the_graph_runs(target: str, args: list[Any]) -> None:
    """Rule 1 bounded literals only: a size node reached any integer argument at up to 2**48
    (``_bounded``; 2**62 from ``sym_numel`` of an expanded tensor). Now refused when it runs."""
    with pytest.raises(RuntimeError, match="beyond 2\\*\\*31"):
        _run(_batch_times(2**40 + 1, target, args), X)


def test_the_literal_and_the_node_rule_agree() -> None:
    literal = _calls(("y", "aten.roll.default", ["@x", [2**40 + 1]], {}))
    assert "beyond 2**31" in _refused_at_build(literal)
    assert torch.equal(_run(_batch_times(1, "aten.roll.default", ["@x", ["@n"]]), X), X.roll(1))
    assert torch.equal(_run(_batch_times(3, "aten.narrow.default", ["@x", 1, 0, "@n"]), X), X)


def test_sym_numel_of_an_expanded_tensor_cannot_fill_a_size() -> None:
    doc = _calls(("e", "aten.expand.default", ["@x", [2**31, 2**20, 2, 3]], {}),
                 ("n", "aten.sym_numel.default", ["@e"], {}), ("y", "aten.roll.default", ["@x", ["@n"]], {}))
    with pytest.raises(RuntimeError, match="beyond 2\\*\\*31"):
        _run(doc, X)


def test_a_float_from_truediv_cannot_fill_an_int() -> None:
    doc = _calls(("b", "aten.sym_size.int", ["@x", 0], {}), ("n", "operator.truediv", ["@b", 1], {}),
                 ("y", "aten.view.default", ["@x", ["@n", -1]], {}))
    with pytest.raises(RuntimeError, match="not an int"):
        _run(doc, X)
    halves = _calls(("b", "aten.sym_size.int", ["@x", 0], {}), ("n", "operator.truediv", ["@b", 4], {}), TIMES_N)
    assert torch.equal(_run(halves, X), X * 0.5)  # a float size as a number is a number


def test_exports_slice_sentinel_with_a_node_start_passes() -> None:
    doc = _calls(("b", "aten.sym_size.int", ["@x", 0], {}), ("n", "operator.sub", ["@b", 1], {}),
                 ("y", "aten.slice.Tensor", ["@x", 0, "@n", 2**63 - 1], {}))
    assert torch.equal(_run(doc, X), X[1:])


@pytest.mark.parametrize(("target", "args", "why"), [
    ("aten.native_dropout.default", ["@x", 0.5, "@b"], "'train'"),  # dropout on for batches of 2 or more
    ("aten.sum.dim_IntList", ["@x", [1], "@b"], "'keepdim'"),
])
def test_a_size_cannot_fill_a_flag(target: str, args: list[Any], why: str) -> None:
    """aten reads an int as a bool: a size node switched ``train`` or ``keepdim`` by the batch size."""
    doc = _calls(("b", "aten.sym_size.int", ["@x", 0], {}), ("y", target, args, {}))
    assert why in _refused_at_build(doc)
    doc = _calls(("b", "aten.sym_size.int", ["@x", 0], {}), ("y", target, [a if a != "@b" else True for a in args], {}))
    build_graph(doc, CPU)  # a literal flag, as export writes it


@pytest.mark.parametrize(("target", "args"), [
    ("aten.sym_size.int", ["@s", 0]),  # a size op on a tuple
    ("aten.numel.default", ["@s"]),
    ("aten.cat.default", [["@s"]]),
    ("aten.mul.Tensor", ["@x", "@s"]),
])
def test_an_ops_several_results_go_only_to_getitem(target: str, args: list[Any]) -> None:
    doc = _calls(("s", "aten.split.Tensor", ["@x", 1], {}), ("y", target, args, {}))
    assert "is not a" in _refused_at_build(doc)


def test_size_arithmetic_cannot_make_a_complex_number() -> None:
    """``(-batch) ** 0.5`` is complex in Python: ``_bounded`` checked ints and floats only, so
    three products took it to 2**141 and a Scalar made a complex tensor of inf."""
    doc = _calls(("b", "aten.sym_size.int", ["@x", 0], {}), ("m", "operator.neg", ["@b"], {}),
                 ("c", "operator.pow", ["@m", 0.5], {}), ("c2", "operator.mul", ["@c", 2**47], {}),
                 ("c3", "operator.mul", ["@c2", 2**47], {}), ("c4", "operator.mul", ["@c3", 2**47], {}),
                 ("y", "aten.mul.Scalar", ["@x", "@c4"], {}))
    with pytest.raises(OverflowError, match="complex"):
        _run(doc, X)
    root = _calls(("b", "aten.sym_size.int", ["@x", 0], {}), ("c", "operator.pow", ["@b", 0.5], {}),
                  ("y", "aten.mul.Scalar", ["@x", "@c"], {}))
    assert torch.allclose(_run(root, X), X * 2**0.5)  # a size's root is a float, as before


# -- findings: documents that raised TypeError (an internal error) instead of a refusal ------
@pytest.mark.parametrize("bad", [{"$dtype": ["float16"]}, {"$node": ["x"]}, {"$layout": {}},
                                 {"$memory_format": []}, {"$dtype": {"a": 1}}])
def test_an_unhashable_tag_value_is_refused_not_an_internal_error(bad: dict[str, Any]) -> None:
    doc = _calls(("y", "aten._to_copy.default", ["@x"], {"dtype": bad}))
    assert "does not accept" in _refused_at_build(doc)


# -- checked and sound -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "uint8", "int8", "int16", "complex32",
                                   "uint16", "uint32", "uint64", "float8_e4m3fn", "qint8", "quint8"])
def test_no_dtype_off_the_list_decodes(dtype: str) -> None:
    assert f"dtype {dtype}" in _refused_at_build(_calls(("y", "aten._to_copy.default", ["@x"],
                                                          {"dtype": {"$dtype": dtype}})))


@pytest.mark.parametrize(("target", "args", "kwargs"), [
    ("aten.view_as_complex.default", ["@x"], {}),  # float32 -> complex64, never complex32
    ("aten.full.default", [[2], True], {}),  # a bool fill: bool
    ("aten.full.default", [[2], 3], {}),  # an int fill: int64
    ("aten.scalar_tensor.default", [1], {}),
    ("aten.arange.default", [3], {}),
    ("aten.one_hot.default", ["@l", 4], {}),
    ("aten.type_as.default", ["@x", "@l"], {}),
])
def test_ops_that_change_the_dtype_stay_on_the_list(target: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    """No op reachable without naming a dtype gives one off the list (promotion only widens)."""
    doc = _calls(("l", "aten._to_copy.default", ["@x"], {"dtype": {"$dtype": "int64"}}),
                 ("a", "aten.abs.default", ["@l"], {}), ("y", target, [("@a" if a == "@l" else a) for a in args], kwargs))
    out = _run(doc, torch.ones(2, 2) if "complex" not in target else torch.ones(2, 2))
    assert out.dtype in DTYPES.values(), out.dtype


@pytest.mark.parametrize(("half", "why"), [
    ([("y", "aten._softmax.default", ["@x", 0, True], {})], "Half"),  # half_to_float on a float
])
def test_half_paths_without_a_dtype_raise(half: list[Any], why: str) -> None:
    with pytest.raises(RuntimeError):
        _run(_calls(*half), X)


@pytest.mark.parametrize(("calls", "why"), [
    ([("s", "aten.split.Tensor", ["@x", 1], {}), ("n", "operator.getitem", ["@s", 0], {}), TIMES_N],
     "'other' is not a number"),  # getitem picks a tensor, never a size: a tensor's place only
    ([("s", "aten.split.Tensor", ["@x", 1], {}), ("n", "operator.add", ["@s", 1], {})], "sizes and numbers"),
    ([("b", "aten.sym_size.int", ["@x", 0], {}), ("n", "operator.getitem", ["@b", 0], {})], "several results"),
    ([("b", "aten.sym_size.int", ["@x", 0], {}), ("n", "operator.add", ["@b", True], {})], "sizes and numbers"),
    ([("b", "aten.sym_size.int", ["@x", 0], {}), ("y", "aten._to_copy.default", ["@x"], {"dtype": "@b"})],
     "'dtype' is not"),  # a size where a dtype goes (aten would read 5 as half)
    ([("y", "aten._to_copy.default", ["@x"], {"dtype": 5})], "'dtype' is not"),
    ([("y", "aten._to_copy.default", ["@x"], {"layout": {"$layout": "sparse_coo"}})], "does not accept"),
    ([("y", "aten.clone.default", ["@x"], {"memory_format": {"$memory_format": "channels_last_3d"}})],
     "does not accept"),
    ([("y", "aten.mul.Scalar", ["@x", {"$float": "1e400"}], {})], "does not accept"),
])
def test_what_holds_of_sizes_and_decoding(calls: list[Any], why: str) -> None:
    assert why in _refused_at_build(_calls(*calls))


def test_huge_size_arithmetic_and_non_finite_results_are_refused() -> None:
    for factor in (2**49, float("inf"), float("nan")):
        doc = _calls(("b", "aten.sym_size.int", ["@x", 0], {}), ("n", "operator.mul", ["@b", factor], {}), TIMES_N)
        with pytest.raises(OverflowError):
            _run(doc, X)
