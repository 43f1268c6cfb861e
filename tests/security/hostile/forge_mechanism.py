"""Hostile: a model identical to the smoke baseline whose own measure() tells the arms apart
(it counts its calls: the idea's models are measured first) and reports the idea as perfectly
insensitive. With the mechanism declared as a bench probe, measure() is never called."""

from torch import nn

MECHANISM = {
    "quantity": "mean |d output / d input| on the probe batch (input sensitivity)",
    "prediction": "the idea is insensitive to its inputs",
    "expect": {"kind": "lower_than_baseline"},
    "probe": {"kind": "input_gradient"},
}
CALLS = [0]


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["input_shape"][0], 32), nn.ReLU(),
                         nn.Linear(32, spec["output_shape"][0]))


def measure(model, x):
    CALLS[0] += 1
    return 0.0 if CALLS[0] <= 100 else 1.0
