"""The vision track: 8x8 handwritten digits (scikit-learn's bundled copy of the UCI set).

The 1,797 images ship inside scikit-learn (nothing is downloaded). Each split seed
permutes the rows and cuts them into train / validation / test.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn

from bench.track import Splits, Track, load_card

CARD = load_card(__file__)


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """All images as float32 (N, 1, 8, 8) in [0, 1] and labels int64 (N,), in file order."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = (np.asarray(data.images, dtype=np.float32) / 16.0)[:, None]
    return images, np.asarray(data.target, dtype=np.int64)


def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:
    """Permute the rows with a generator seeded by ``split_seed`` and cut the splits.
    ``task_seed`` is unused: the task has no constants to draw."""
    images, labels = _digits()
    sizes = CARD["sizes"]
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] * 1_000_003 + split_seed)
    order = torch.randperm(len(labels), generator=gen)
    x = torch.from_numpy(images)[order]
    y = torch.from_numpy(labels)[order]
    a, b = sizes["train"], sizes["train"] + sizes["val"]
    c = b + sizes["test"]
    return Splits(x[:a], y[:a], x[a:b], y[a:b], x[b:c], y[b:c])


def build_baseline(spec: dict[str, Any]) -> nn.Module:
    """The canonical baseline: two 3x3 conv + max-pool stages and a linear classifier."""
    channels = spec["input_shape"][0]
    return nn.Sequential(
        nn.Conv2d(channels, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 4x4 -> 2x2
        nn.Flatten(),
        nn.Linear(16 * 2 * 2, spec["n_classes"]),
    )


TRACK = Track(card=CARD, make_splits=make_splits, build_baseline=build_baseline)
