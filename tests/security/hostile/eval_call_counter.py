"""Hostile (found by a red-team pass): a copy of the smoke baseline whose eval graph counts its own calls in a buffer.
Predict on the test split is call #1 (256 rows < 1024: one chunk); the bench's probe rebuilds
the model from the *kept* tensors (counter already 1) and gets a constant output: input
gradient 0, whatever the network learned. Refused: an eval-mode graph may not update buffers."""
import torch
from torch import nn

MECHANISM = {
    "quantity": "mean |d output / d input| on the probe batch",
    "prediction": "the idea is insensitive to its inputs",
    "expect": {"kind": "less_than", "value": 0.01},
    "probe": {"kind": "input_gradient"},
}


class M(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(spec["input_shape"][0], 32), nn.ReLU(),
                                 nn.Linear(32, spec["output_shape"][0]))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        y = self.net(x)
        if not self.training:
            c = self.calls.clone()
            self.calls.add_(1)
            y = torch.where(c >= 1, torch.zeros_like(y), y)
        return y


def build_model(spec):
    return M(spec)
