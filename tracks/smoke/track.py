"""The smoke track: a tiny synthetic regression whose whole protocol runs in seconds."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bench.track import Splits, Track, load_card

CARD = load_card(__file__)


def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:
    """Draw train/val/test from one generator seeded by ``split_seed``; the task (the two
    projections) from ``task_seed``: the engine passes a secret one, ``None`` means the
    card's public ``data_seed_base`` (tests and docs only)."""
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] * 1_000_003 + split_seed)
    sizes = CARD["sizes"]
    n = sizes["train"] + sizes["val"] + sizes["test"]
    d = CARD["spec"]["n_features"]
    # The task itself (the projections) is fixed per seed epoch, not per split seed.
    task_gen = torch.Generator().manual_seed(CARD["data_seed_base"] if task_seed is None else task_seed)
    w = torch.randn(2, d, generator=task_gen) / d**0.5
    x = torch.randn(n, d, generator=gen)
    z = x @ w.T
    y = (torch.sin(2.0 * z[:, :1]) + 0.5 * z[:, 1:2] ** 2) + 0.1 * torch.randn(n, 1, generator=gen)
    a, b = sizes["train"], sizes["train"] + sizes["val"]
    return Splits(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:])


def build_baseline(spec: dict[str, Any]) -> nn.Module:
    """The canonical baseline: a one-hidden-layer MLP."""
    return nn.Sequential(nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1))


TRACK = Track(card=CARD, make_splits=make_splits, build_baseline=build_baseline)
