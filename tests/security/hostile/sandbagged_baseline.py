"""Hostile: a matched baseline of the canonical one's size that ignores half of its inputs
(issue 25.5: a copy of the canonical baseline judged against it got worked / helps, 8/8)."""

import torch
from torch import nn


class Blinkered(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, 32), nn.ReLU(), nn.Linear(32, 1))
        self.register_buffer("mask", (torch.arange(n_in) < n_in // 2).float())

    def forward(self, x):
        return self.net(x * self.mask)


def build_model(spec):
    return Blinkered(spec["n_features"])
