"""Service-owned probes (bench.probes): hand-checkable quantities on tiny models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.contract import check_probe
from bench.errors import BenchError
from bench.probes import measure


class SumPool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.phi = nn.Linear(4, 8)
        self.rho = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rho(torch.relu(self.phi(x)).sum(1))


def test_token_permutation_is_zero_for_a_set_model_and_not_for_a_flat_one() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 6, 4)
    probe = check_probe({"kind": "token_permutation", "dim": 1, "swap": [0, 1]})
    assert measure(probe, SumPool(), x) < 1e-6
    flat = nn.Sequential(nn.Flatten(), nn.Linear(24, 1))
    assert measure(probe, flat, x) > 1e-3


def test_input_gradient_of_a_linear_model_is_its_mean_absolute_weight() -> None:
    model = nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0, 3.0]]))
    assert measure({"kind": "input_gradient"}, model, torch.randn(5, 3)) == pytest.approx(2.0)


def test_equivariance_of_a_circular_convolution_and_invariance_of_a_symmetric_model() -> None:
    conv = nn.Conv1d(1, 1, 3, padding=1, padding_mode="circular", bias=False)
    model = nn.Sequential(nn.Unflatten(1, (1, 10)), conv, nn.Flatten())
    x = torch.randn(4, 10)
    roll = check_probe({"kind": "equivariance", "transform": {"roll": {"shift": 3, "dim": -1}}})
    assert measure(roll, model, x) < 1e-6
    level = check_probe({"kind": "equivariance", "transform": {"add": 1.0}, "output": "same"})
    assert measure(level, nn.Identity(), x) == 0.0
    flip = check_probe({"kind": "equivariance", "transform": {"flip": {"dim": -1}}, "output": "none"})

    class Symmetric(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x + torch.flip(x, dims=[-1])).sum(-1, keepdim=True)

    assert measure(flip, Symmetric(), x) < 1e-6
    assert measure(flip, nn.Linear(10, 1), x) > 1e-3


@pytest.mark.parametrize("probe", [
    {"kind": "read_the_labels"},
    {"kind": "token_permutation", "dim": 0},
    {"kind": "token_permutation", "swap": [1, 1]},
    {"kind": "equivariance", "transform": {"exec": "import os"}},
    {"kind": "equivariance", "transform": {"roll": {"shift": 1, "dim": 0}}},
    {"kind": "equivariance", "transform": {"add": 1.0}, "output": "whatever"},
    "input_gradient",
])
def test_malformed_probes_are_refused(probe: object) -> None:
    with pytest.raises(BenchError):
        check_probe(probe)
