"""Hostile: the baseline's parameters applied 100 times as dense layers written as a broadcast
multiply and a sum (red team): FlopCounterMode counts matrix products only, so this ~300 times
the baseline's compute counted as the baseline's 576 FLOPs."""

import torch
from torch import nn


class Repeated(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.l1 = nn.Linear(n_in, 32)
        self.l2 = nn.Linear(32, 1)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        w = self.l2.weight.t() * self.l2.weight * 0.01 + torch.eye(32)
        for _ in range(100):
            h = (h.unsqueeze(-1) * w).sum(1)
        return self.l2(h)


def build_model(spec):
    return Repeated(spec["n_features"])
