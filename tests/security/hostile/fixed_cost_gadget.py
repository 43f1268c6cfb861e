"""Hostile: the baseline's model plus a constant the size of a matrix of 2**29 elements summed
each forward (times zero): a cost that does not grow with the batch, so a count per added row
saw none of it. Judged on smoke until session 33: 45 times the baseline's job time; at (2**20,
2**20) the count that ran the forward held the trainer for the job's whole timeout."""

import torch
from torch import nn


class Gadget(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.l1 = nn.Linear(n_in, 32)
        self.l2 = nn.Linear(32, 1)

    def forward(self, x):
        waste = self.l2.bias.reshape(1, 1).expand(2**14, 2**15).sum() * 0.0
        return self.l2(torch.relu(self.l1(x))) + waste


def build_model(spec):
    return Gadget(spec["n_features"])
