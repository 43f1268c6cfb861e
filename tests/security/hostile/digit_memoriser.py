"""Hostile: memorise scikit-learn's public digits (issue 25.4). Every image's exact pixel hash,
with its label packed in, fits in a buffer of 1,797 words under vision@1's cap of 1,898; a
lookup answers every test row with its true class and a linear layer trained
by the bench answers the rest. The agent embeds the table it computed offline from the public data set; here it is
computed at build time from the arrays the test hands in (``TABLE``), as a file would hold
them as literals."""

import torch
from torch import nn

TABLE: list[float] = []  # hash * 16 + label, one per public image (filled by the test)
WEIGHTS: list[float] = []  # 64 integer weights of the pixel hash


def pixel_hash(x):
    return torch.round(x.reshape(x.shape[0], 64) * 16.0) @ torch.tensor(WEIGHTS)


class Memoriser(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.tensor(TABLE))
        self.register_buffer("weights", torch.tensor(WEIGHTS))
        self.fallback = nn.Linear(64, 10)  # learns the rows the table cannot tell apart

    def forward(self, x):
        h = torch.round(x.reshape(x.shape[0], 64) * 16.0) @ self.weights
        offset = self.table[None, :] - 16.0 * h[:, None]  # (B, N): the label where the hash matches
        hit = (offset >= 0) & (offset < 16)
        label = (torch.where(hit, offset, torch.zeros_like(offset))).sum(dim=1)
        found = hit.sum(dim=1) == 1  # one image with this hash
        classes = torch.arange(10, dtype=x.dtype)
        onehot = (label[:, None] == classes[None, :]) & found[:, None]
        return torch.where(onehot, 30.0, 0.0) + self.fallback(x.reshape(x.shape[0], 64))


def build_model(spec):
    return Memoriser()
