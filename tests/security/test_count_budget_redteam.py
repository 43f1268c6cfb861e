"""Red team of the count's budget (``CountBudget``) and of ``TENSOR_COST`` (helper, session 35).

Each test asserts the SAFE behaviour; each failed before its fix (closed: ``NODE_COST`` for
every node the interpreter calls, ``MAX_RANK``, the tensors an op takes spent from the budget
before it runs, ``MAX_LIST`` and ``MAX_ARGUMENTS`` in ``bench.graph``). Measured on this host
(shared CPU, one torch thread, torch CPU); the reference is the tabular baseline of
``tests/security/test_compute_bound_hostile2.py`` (``_parity``): a training step (forward and
backward through ``CapturedModel``, 32 rows) of 0.20 ms, 59,647 counted a forward of 16 rows.

Holes:

- UNCOUNTED NODES: only dispatched ATen ops reach ``Work``. Size arithmetic (``operator.*`` of
  ``PYTHON_OPS``), ``operator.getitem`` beyond the one result ``TENSOR_COST`` assumes, and
  ``aten.sym_size.int`` (not dispatched on a plain tensor) run in ``Program.run`` at 1-4 us a
  node and count 0. 19,000 of them spliced after a Linear(10, 1) head: counted 27,191 a forward
  of 16 rows (the head's own cost), admitted; a training step of 23 ms (idle host; 75-83 ms
  under load) for the size chain and the sym_size chain, 42-50 ms for 19,000 getitems of one
  ``split`` result: 100-400 x the baseline.
- MANY DIMENSIONS: a tensor reshaped to D size-1 dimensions (the sizes are nodes, so no literal
  words), then K ``mul`` by a (1,)-shaped constant (a broadcast). Each op is counted OP_COST and
  its one element; the kernel's and autograd's work grows ~quadratically with D (only
  reductions stop at 64 dims). D = 1,000, K = 20: counted 223,937 a forward of 16 rows,
  admitted; a training step of 134 ms, 650 x the baseline (D = 250: 12.9 ms, 63 x).
  The count itself: one forward of those 27 ops took 26.7 s on fake tensors (~1 s a budget
  unit; D = 250: 2.1 s, 77 ms a unit): ``COUNT_BUDGET`` (65,536 units) does not bound the
  count's time, and neither does ``MAX_OPS``.
- LONG LISTS: ``CountBudget`` spends one per op and one per result beyond the first, nothing
  for the tensors an op TAKES. ``stack`` of n references to one tensor: one forward's count
  took 4.2 s at n = 20,000 and 90-104 s at n = 500,000 (the graph file's 8 MiB cap allows
  ~520,000), spending 3 units; counted ~1.0e9 (under ``MAX_FORWARD_COST``), so nothing stops it
  before every row count is counted: 5 forwards took 470 s (killed), ~10 a config and 12 configs
  an arm: hours of the trusted trainer before the parent refuses. (``rebuild`` of that 8 MiB
  graph alone took 17.7 s, per mode and config, before any count: unbudgeted too.)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bench import cost
from bench.errors import BenchError, ErrorCode
from bench.graph import CapturedModel, rebuild
from tests.capture_helpers import capture_docs, graph_of
from tests.security.test_compute_bound_hostile2 import _parity


def _encode(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("@"):
        return {"$node": value[1:]}
    return [_encode(v) for v in value] if isinstance(value, list) else value


def _spliced(calls: list[tuple[str, str, list[Any]]], last: str) -> CapturedModel:
    """A Linear(10, 1) head as captured (``input``, ``p_weight``, ``p_bias``, ``linear``), then
    ``calls`` (name, target, args), as a hostile capture child could write them; the output is
    ``linear + last`` (``last`` a number or a tensor node)."""
    docs, tensors = capture_docs(nn.Linear(10, 1), [10])
    for doc in docs.values():
        out = doc["nodes"].pop()
        doc["nodes"] += [{"name": n, "op": "call_function", "target": t, "args": _encode(a), "kwargs": {}}
                         for n, t, a in calls]
        doc["nodes"].append({"name": "yy", "op": "call_function", "target": "aten.add.Tensor",
                             "args": [{"$node": "linear"}, {"$node": last}], "kwargs": {}})
        out["args"] = [{"$tuple": [{"$node": "yy"}]}]
        doc["nodes"].append(out)
    return rebuild(docs, tensors, torch.device("cpu"))


def _size_chain(n: int) -> CapturedModel:
    """``n`` size-arithmetic nodes: the batch size times one, n times (no literal numbers)."""
    calls = [("s", "aten.sym_size.int", ["@input", 0]), ("one", "operator.floordiv", ["@s", "@s"])]
    prev = "s"
    for i in range(n):
        calls.append((f"a{i}", "operator.mul", [f"@{prev}", "@one"]))
        prev = f"a{i}"
    calls.append(("z", "operator.sub", [f"@{prev}", "@s"]))
    return _spliced(calls, "z")


def _sym_sizes(n: int) -> CapturedModel:
    """``n`` ``aten.sym_size.int`` nodes of the input."""
    calls = [(f"s{i}", "aten.sym_size.int", ["@input", 0]) for i in range(n)]
    calls.append(("z", "operator.sub", [f"@s{n - 1}", "@s0"]))
    return _spliced(calls, "z")


def _getitems(n: int) -> CapturedModel:
    """``n`` getitem nodes of one ``split`` result (an op of several results: allowed)."""
    calls = [("sp", "aten.split.Tensor", ["@input", 1, 1])]
    calls += [(f"g{i}", "operator.getitem", ["@sp", 0]) for i in range(n)]
    calls += [("s", "aten.sym_size.int", ["@input", 0]), ("z", "operator.sub", ["@s", "@s"])]
    return _spliced(calls, "z")


def _many_dims(d: int, k: int) -> CapturedModel:
    """The head's bias reshaped to ``d`` dimensions of size 1 (sizes from nodes: no literal
    words), multiplied ``k`` times by a (1,)-shaped constant (a broadcast), reshaped back."""
    calls = [("s", "aten.sym_size.int", ["@input", 0]), ("one", "operator.floordiv", ["@s", "@s"]),
             ("h0", "aten.reshape.default", ["@p_bias", ["@one"] * d]),
             ("c1", "aten.ones_like.default", ["@p_bias"])]
    calls += [(f"h{i + 1}", "aten.mul.Tensor", [f"@h{i}", "@c1"]) for i in range(k)]
    calls += [("r", "aten.reshape.default", [f"@h{k}", ["@one"]]), ("z", "aten.sum.default", ["@r"])]
    return _spliced(calls, "z")


def _stack_of(n: int) -> CapturedModel:
    """One ``stack`` of ``n`` references to one (rows, 1) tensor."""
    doc = graph_of(("c", "aten.sum.dim_IntList", ["@x", [1], True], {}),
                   ("st", "aten.stack.default", [["@c"] * n], {}),
                   ("y", "aten.add.Tensor", ["@x", "@c"], {}))
    return rebuild({"train": doc, "eval": doc}, {}, torch.device("cpu"))


def _refused(model: nn.Module) -> bool:
    error = _parity(model)
    return error is not None and error.code is ErrorCode.COMPUTE_PARITY


# -- holes: nodes the count never sees --------------------------------------------------------
def test_size_arithmetic_nodes_are_priced() -> None:
    """19,000 ``operator.mul`` nodes of sizes: counted 0 (27,191 a forward of 16 rows, the
    head's), admitted; 23-77 ms a training step against the baseline's 0.20 ms. Here 3,000:
    3.9 ms a step (19 x), counted 27,191."""
    assert _refused(_size_chain(3000))


def test_sym_size_nodes_are_priced() -> None:
    """19,000 ``aten.sym_size.int`` nodes (not dispatched, so not counted): 27,191 a forward of
    16 rows, admitted; 23-83 ms a training step. Here 3,000: 7.5 ms a step (37 x)."""
    assert _refused(_sym_sizes(3000))


def test_getitem_nodes_beyond_one_a_result_are_priced() -> None:
    """``TENSOR_COST`` prices one getitem node per result; 19,000 getitems of one result of a
    two-result ``split``: counted 72,578 a forward of 16 rows, admitted; 42-50 ms a training
    step (18 ms on an idle host). Here 3,000: 2.9 ms a step (14 x), counted 72,578."""
    assert _refused(_getitems(3000))


# -- hole: tensors of many dimensions --------------------------------------------------------
def test_a_tensor_of_many_dimensions_is_priced() -> None:
    """D = 1,000 dims, 20 broadcast ``mul``: counted 223,937 a forward of 16 rows, admitted, and
    134 ms a training step (650 x); D = 250: 12.9 ms (63 x). Here D = 300, K = 8: counted
    125,561 a forward of 16 rows, 11.9 ms a training step (58 x; the count's own slowness, the
    next test, keeps D small: ~1 s a forward here)."""
    assert _refused(_many_dims(300, 8))


def test_counting_a_tensor_of_many_dimensions_stops_at_its_rank() -> None:
    """The count's time a budget unit: D = 1,000, 27 ops, 26.7 s for one forward (~1 s a unit);
    D = 250, 2.1 s (77 ms a unit); D = 400, K = 2: 0.49-0.52 s a unit. Closed: a tensor of more
    than ``MAX_RANK`` dimensions is refused before the next op is counted."""
    budget = cost.CountBudget()
    try:
        cost.forward_cost(_many_dims(400, 2), torch.randn(16, 10), 16, budget=budget)
    except BenchError as exc:
        assert exc.code is ErrorCode.COMPUTE_PARITY and "dimensions" in exc.message
    else:
        raise AssertionError("a tensor of 400 dimensions was counted")


# -- hole: the tensors an op takes are not spent from the budget ----------------------------
def test_counting_a_long_list_is_spent_from_the_budget() -> None:
    """``stack`` of 20,000 references: 4.2 s to count one forward, 3 units spent; of 500,000
    (the 8 MiB graph cap): 90-104 s a forward, ~10 forwards a config. Here 4,000 (0.15-0.19 s a
    unit before): each reference is spent, before the op runs."""
    budget = cost.CountBudget(10**9)
    cost.forward_cost(_stack_of(4000), torch.randn(16, 10), 16, budget=budget)
    assert budget.total - budget.left >= 4000


def test_a_list_longer_than_the_graph_allows_is_refused_before_it_is_built() -> None:
    """The 500,000-reference stack took 17.7 s to rebuild, for each mode and config, before any
    count. Closed: an argument list of more than ``MAX_LIST`` entries is not capturable."""
    from bench.graph import MAX_LIST

    try:
        _stack_of(MAX_LIST + 1)
    except BenchError as exc:
        assert exc.code is ErrorCode.NOT_CAPTURABLE and "list" in exc.message
    else:
        raise AssertionError("a list past MAX_LIST was rebuilt")


# -- checked and sound (cheap) ---------------------------------------------------------------
def test_a_long_list_is_priced_per_tensor() -> None:
    """``TENSOR_COST`` does price the tensors a ``stack`` takes: 4,000 references count at least
    4,000 x TENSOR_COST (the real forward and backward is 2-3 us a reference)."""
    assert cost.forward_cost(_stack_of(4000), torch.randn(16, 10), 16) >= 4000 * cost.TENSOR_COST
