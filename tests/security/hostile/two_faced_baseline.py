"""Hostile: a matched baseline that reads its own role (red team): run as the idea (in its check
against the canonical baseline, where it must be as good) it is sound; run as the baseline (in
the job that judges the idea against it) it ignores half of its inputs."""

import torch
from torch import nn

WEAK = __file__.endswith("baseline.py")


class Masked(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, 32), nn.ReLU(), nn.Linear(32, 1))
        keep = (torch.arange(n_in) < n_in // 2) if WEAK else torch.ones(n_in, dtype=torch.bool)
        self.register_buffer("mask", keep.float())

    def forward(self, x):
        return self.net(x * self.mask)


def build_model(spec):
    return Masked(spec["n_features"])
