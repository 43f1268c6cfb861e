"""Example idea for the smoke track: a wider hidden layer with a smooth activation.

Contract: define build_model(spec) -> torch.nn.Module mapping (B, *spec["input_shape"])
to (B, *spec["output_shape"]). Optional: HPARAMS (extra sweep grid, values reach
build_model as spec["hparams"][name]), MECHANISM (a bench probe, or measure(model, x) -> float).
"""

from torch import nn

HPARAMS = {"width": [32]}

MECHANISM = {
    "quantity": "mean |d output / d input| on the probe batch (input sensitivity)",
    "prediction": "a smooth (SiLU) network is less sensitive to its inputs than the ReLU baseline",
    "expect": {"kind": "lower_than_baseline"},
    # measured by the bench itself on both arms' trained models (bench.probes)
    "probe": {"kind": "input_gradient"},
}


def build_model(spec):
    width = spec["hparams"]["width"]
    return nn.Sequential(
        nn.Linear(spec["input_shape"][0], width),
        nn.SiLU(),
        nn.Linear(width, spec["output_shape"][0]),
    )
