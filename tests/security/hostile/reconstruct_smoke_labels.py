"""Hostile: regenerate the smoke track's data from its public source and answer the
validation and test rows with their true labels.

This file copies the smoke track's ``make_splits`` and the engine's old public seed
expansion (SeedSequence(protocol seed).spawn(3), task constants from the card's
``data_seed_base``), so it needs no import of the ``tracks`` package. With public seeds it
scored MSE 0 against the baseline's ~0.28 (8/8 wins, ``helps``). With seeds derived from
the deployment secret no row it computes matches a row the bench evaluates, and it is a
plain MLP.
"""

import numpy as np
import torch
from torch import nn

DATA_SEED_BASE = 1
SIZES = {"train": 256, "val": 128, "test": 256}
PROTOCOL_SEEDS = [0, 1, 2, 3] + [1000 + i for i in range(16)]


def _public_split_seed(seed):
    child = np.random.SeedSequence(seed).spawn(3)[0]
    return int(child.generate_state(1)[0] & 0x7FFFFFFF)


def _smoke(split_seed, d=8):
    gen = torch.Generator().manual_seed(DATA_SEED_BASE * 1_000_003 + split_seed)
    n = SIZES["train"] + SIZES["val"] + SIZES["test"]
    task_gen = torch.Generator().manual_seed(DATA_SEED_BASE)
    w = torch.randn(2, d, generator=task_gen) / d**0.5
    x = torch.randn(n, d, generator=gen)
    z = x @ w.T
    y = (torch.sin(2.0 * z[:, :1]) + 0.5 * z[:, 1:2] ** 2) + 0.1 * torch.randn(n, 1, generator=gen)
    return x[SIZES["train"]:], y[SIZES["train"]:]


class Oracle(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 32), nn.ReLU(), nn.Linear(32, d_out))
        xs, ys = zip(*(_smoke(_public_split_seed(s), d_in) for s in PROTOCOL_SEEDS), strict=True)
        # Plain attributes, not buffers: the child's own parameter count never sees them.
        self.keys, self.values = torch.cat(xs), torch.cat(ys)

    def forward(self, x):
        out = self.net(x)
        if self.training:
            return out
        hit = torch.cdist(x, self.keys, compute_mode="donot_use_mm_for_euclid_dist") < 1e-6
        found = hit.any(dim=1, keepdim=True)
        looked_up = hit.float() @ self.values
        return torch.where(found, looked_up, out)


def build_model(spec):
    return Oracle(spec["input_shape"][0], spec["output_shape"][0])
