"""Hostile: a forward that sums an expanded constant of 2**40 elements (hours of one core): the
count that ran the forward to measure it held the trainer for the job's whole timeout."""

import torch
from torch import nn


class Endless(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.l1 = nn.Linear(n_in, 32)
        self.l2 = nn.Linear(32, 1)

    def forward(self, x):
        waste = self.l2.bias.reshape(1, 1).expand(2**20, 2**20).sum() * 0.0
        return self.l2(torch.relu(self.l1(x))) + waste


def build_model(spec):
    return Endless(spec["n_features"])
