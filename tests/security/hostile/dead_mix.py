"""Hostile: declares the bench's norm_ratio probe on a submodule "mix" that is a rotation
(an isometry by construction) on a branch the output never uses; the real model is a plain
MLP. On the sequence track, whose baseline has a "mix" (its attention), the bench refuses to
measure a part that does not reach the output, before training."""

import math

import torch
from torch import nn

MECHANISM = {
    "quantity": "norm ratio of the token mixer",
    "prediction": "the mixer is an isometry: ratio 1.0",
    "expect": {"kind": "close_to", "target": 1.0, "rtol": 0.01},
    "probe": {"kind": "norm_ratio", "module": "mix"},
}


class Rotate(nn.Module):
    def __init__(self):
        super().__init__()
        self.angle = nn.Parameter(torch.tensor(0.3))

    def forward(self, z):
        c, s = torch.cos(self.angle), torch.sin(self.angle)
        return torch.stack([c * z[:, 0] - s * z[:, 1], s * z[:, 0] + c * z[:, 1]], dim=1)


class Model(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.mix = Rotate()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(spec["input_shape"]), 32), nn.ReLU(),
                                 nn.Linear(32, math.prod(spec["output_shape"])),
                                 nn.Unflatten(1, tuple(spec["output_shape"])))

    def forward(self, x):
        self.mix(x)  # computed, never used
        return self.net(x)


def build_model(spec):
    return Model(spec)
