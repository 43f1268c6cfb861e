"""Hostile: train normally but answer NaN on every evaluation. A diverged run used to score
at its own arm's worst finite value; now it scores at the ceiling, and an arm with more than
a quarter of its final runs diverged gets no verdict."""

import torch
from torch import nn


class Nan(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 32), nn.ReLU(), nn.Linear(32, d_out))

    def forward(self, x):
        out = self.net(x)
        return out if self.training else out * torch.nan


def build_model(spec):
    return Nan(spec["input_shape"][0], spec["output_shape"][0])
