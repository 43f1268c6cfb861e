"""Hostile: one weight-tied block applied twenty times (issue 25.12): the baseline's parameters,
twenty times its compute; nothing measured compute, so it was "the same size"."""

from torch import nn


class Tied(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.inp = nn.Linear(n_in, 12)
        self.block = nn.Linear(12, 12)
        self.out = nn.Linear(12, n_out)

    def forward(self, x):
        h = self.inp(x).relu()
        for _ in range(20):
            h = h + 0.05 * self.block(h).tanh()
        return self.out(h)


def build_model(spec):
    return Tied(spec["input_shape"][0], spec["output_shape"][0])
