"""The compute count prices the tensors an op takes and makes, not only its elements (session 35).

Until then a tensor cost one counted operation besides its elements, and only dispatched ops
cost ``OP_COST``: the interpreter's ``getitem`` nodes (one per result of an op with several)
cost nothing. Measured on this machine (one thread, torch 2.13 CPU), forward and backward in
eager: ``torch.stack`` of 2,000 references to one parameter 4.4 ms (19,000: 46 ms), ``unbind``
of 2,000 rows stacked again 4.6 ms (19,000: 64 ms; 110 ms a forward through the trainer's
interpreter), 2.2-3.4 us a tensor; counted 218,013 for the 19,000 (a forward of the smoke
baseline costs about 50,000), under the million every forward may spend (``FIXED_FREE``):
admitted next to the tabular baseline (a training step of 0.6 ms) at ten to a hundred times
its time. Now each tensor an op takes beyond its first two, and makes beyond its first,
costs ``TENSOR_COST`` (2 us), and every node the interpreter calls ``NODE_COST`` (4 us: a
result's ``getitem`` node too); the count's budget spends one for each such tensor and node
(``unbind`` of 19,000 took 3.3 s to count a forward).
"""

from __future__ import annotations

import json

import torch
from torch import nn

from bench import cost
from bench.graph import rebuild
from tests.capture_helpers import capture_docs, through_capture
from tests.security.test_compute_bound_hostile2 import _parity


class _Stacked(nn.Module):
    """The tabular baseline's head beside a stack of references to one parameter (times 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.out, self.w = nn.Linear(10, 1), nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) + torch.stack([self.w, self.w, self.w, self.w]).sum() * 0


def _stacked(n: int) -> nn.Module:
    """``_Stacked`` captured with 4 references, its stack's list made ``n`` long (what a capture
    child writes for a longer list): nothing else changes."""
    docs, tensors = capture_docs(_Stacked(), [10])
    ref = '{"$node": "p_w"}'
    text = json.dumps(docs).replace(", ".join([ref] * 4), ", ".join([ref] * n))
    assert text.count(", ".join([ref] * n)) == 2
    return rebuild(json.loads(text), tensors, torch.device("cpu"))


class _Unbound(nn.Module):
    """The head beside ``n`` rows unbound and stacked again (times 0): an op of ``n`` results."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.out = n, nn.Linear(10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = (self.out.bias * torch.ones(self.n, 1)).unbind(0)
        return self.out(x) + torch.stack(rows).sum() * 0


def test_a_list_of_many_references_is_priced_per_tensor() -> None:
    """``stack`` of 2,000 references to one parameter: 4.4 ms forward and backward, counted a
    few thousand. Refused next to the tabular baseline; 4 references still pass."""
    assert _parity(_stacked(4)) is None
    refused = _parity(_stacked(2000))
    assert refused is not None and refused.code.value == "compute_parity"


def test_an_op_of_many_results_is_priced_per_result() -> None:
    """``unbind`` of 2,000 rows: 2,000 results, each a ``getitem`` node of the trainer's
    interpreter, 4.6 ms forward and backward with the stack. Refused next to the tabular
    baseline."""
    refused = _parity(through_capture(_Unbound(2000), [10]))
    assert refused is not None and refused.code.value == "compute_parity"


def test_each_result_is_spent_from_the_counts_budget() -> None:
    """An op of many results spends one of the count's budget for each: the count's own time
    grows with the results (3.3 s a forward at 19,000), so its bound must too."""
    model = through_capture(_Unbound(300), [10])
    budget = cost.CountBudget(10**9)
    cost.forward_cost(model, torch.randn(16, 10), 16, budget=budget)
    assert budget.total - budget.left >= 300
