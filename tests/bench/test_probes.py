"""Service-owned probes (bench.probes): hand-checkable quantities on tiny models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.contract import check_probe
from bench.errors import BenchError
from bench.probes import check_applies, measure
from tests.capture_helpers import through_capture
from tests.mixers import NORM, Rotate, Scale


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
    {"kind": "norm_ratio"},
    {"kind": "norm_ratio", "module": "mix; import os"},
    {"kind": "norm_ratio", "module": ""},
    {"kind": "norm_ratio", "module": ["mix"]},
    "input_gradient",
])
def test_malformed_probes_are_refused(probe: object) -> None:
    with pytest.raises(BenchError):
        check_probe(probe)


# -- norm_ratio: a named submodule of a captured model ----------------------------------
class Mixer(nn.Module):
    """value -> mix -> out over (B, T, d), with a model-level readout."""

    def __init__(self, mix: nn.Module) -> None:
        super().__init__()
        self.value = nn.Linear(4, 4)
        self.mix = mix
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mix(self.value(x))).sum(1)


def test_norm_ratio_measures_the_named_submodule_of_the_captured_graph() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 2, 4)
    assert measure(check_probe(NORM), through_capture(Mixer(Rotate()), (2, 4)), x) == pytest.approx(1.0, abs=1e-6)
    assert measure(NORM, through_capture(Mixer(Scale()), (2, 4)), x) == pytest.approx(0.5, abs=1e-6)
    nested = Mixer(nn.Sequential(Scale(), Scale()))  # ops of mix.0 and mix.1 are mix's
    assert measure(NORM, through_capture(nested, (2, 4)), x) == pytest.approx(0.25, abs=1e-6)
    assert measure({"kind": "norm_ratio", "module": "mix.1"}, through_capture(nested, (2, 4)), x) == pytest.approx(0.5, abs=1e-6)


def test_the_seed_butterfly_is_an_isometry_and_the_baselines_attention_is_not() -> None:
    from pathlib import Path

    from bench.registry import load_track

    track = load_track("sequence")
    module: dict[str, object] = {}
    exec((Path(__file__).parents[2] / "examples/ideas/butterfly_sequence.py").read_text(), module)
    probe = check_probe(module["MECHANISM"]["probe"])  # type: ignore[index]
    x = torch.randn(16, *track.spec["input_shape"])
    idea = module["build_model"]({**track.spec, "hparams": {}})  # type: ignore[operator]
    assert measure(probe, through_capture(idea, track.spec["input_shape"]), x) == pytest.approx(1.0, abs=1e-5)
    baseline = track.build_baseline({**track.spec, "hparams": {}})
    mix = baseline.get_submodule(next(n for n, _ in baseline.named_modules() if n.endswith("mix")))
    seen: list[torch.Tensor] = []
    mix.register_forward_hook(lambda m, i, o: seen.extend([i[0], o]))
    with torch.no_grad():
        baseline.eval()(x)
    eager = float((seen[1].flatten(1).norm(dim=1) / seen[0].flatten(1).norm(dim=1)).mean())
    assert measure(probe, through_capture(baseline, track.spec["input_shape"]), x) == pytest.approx(eager, rel=1e-5)
    assert abs(eager - 1.0) > 0.05


class DeadMix(nn.Module):
    """A hostile model: an isometric "mix" on a branch that never reaches the output."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = Rotate()
        self.real = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mix(x)
        return self.real(x.flatten(1))


class NoOpMix(nn.Module):
    """A hostile model: "mix" is a reshape round trip (ratio 1 by construction, no parameter)."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Flatten(1)
        self.real = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.real(self.mix(x))


@pytest.mark.parametrize("model, why", [
    (DeadMix(), "this probe needs one of each"),
    (NoOpMix(), "uses none of the model's trainable parameters"),
    (Mixer(Rotate()), "no submodule named 'mixer'"),
])
def test_a_module_probe_refuses_parts_that_measure_nothing(model: nn.Module, why: str) -> None:
    probe = {"kind": "norm_ratio", "module": "mixer" if why.startswith("no submodule") else "mix"}
    with pytest.raises(ValueError, match=why):
        check_applies(probe, through_capture(model, (2, 4)), torch.randn(2, 2, 4))


def test_a_module_probe_needs_a_captured_model() -> None:
    with pytest.raises(ValueError, match="captured model"):
        measure(NORM, Mixer(Rotate()), torch.randn(2, 2, 4))
