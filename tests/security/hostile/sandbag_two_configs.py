"""Hostile (red team, issue 25.5): a matched baseline with a fixed, unlearnable output error
(a sandbag several times the smallest effect) and a pointless second config. In its check the
track's baseline, as the check's baseline, swept a grid twice as dense (budget_factor) and, on
job key r4_forge5_a, picked a learning rate that did well on validation and badly on test: the
sandbag looked non-inferior, and a copy of the canonical baseline then "helped"."""

import torch
from torch import nn

# Two configs (width 32 / 31): in the matched-baseline check the canonical baseline then sweeps a
# densified lr grid (budget_factor 2) and lands on a fragile lr. The model itself carries a fixed,
# unlearnable high-frequency output error (a sandbag of ~0.02 MSE, several times the smallest effect).
HPARAMS = {"w": [32, 31]}


class Sandbag(nn.Module):
    def __init__(self, d, w):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, w), nn.ReLU(), nn.Linear(w, 1))

    def forward(self, x):
        return self.net(x) + 0.3 * torch.sin(25.0 * x.sum(dim=1, keepdim=True))


def build_model(spec):
    return Sandbag(spec["n_features"], spec["hparams"]["w"])
