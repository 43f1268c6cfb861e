"""The tabular track: scikit-learn's bundled diabetes regression (442 patients, 10 features).

The data ship inside scikit-learn (nothing is downloaded). Each split seed permutes
the rows and cuts train / validation / test; features and target are then standardised
with the mean and standard deviation of that seed's training rows.
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
def _diabetes() -> tuple[np.ndarray, np.ndarray]:
    """Raw features (442, 10) and target (442, 1) as float64, in file order."""
    from sklearn.datasets import load_diabetes

    data = load_diabetes(scaled=False)
    return np.asarray(data.data, dtype=np.float64), np.asarray(data.target, dtype=np.float64)[
        :, None
    ]


def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:
    """Permute rows with a generator seeded by ``split_seed``; standardise on the train rows.
    ``task_seed`` is unused: the task has no constants to draw."""
    features, target = _diabetes()
    sizes = CARD["sizes"]
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] * 1_000_003 + split_seed)
    order = torch.randperm(len(target), generator=gen).numpy()
    x, y = features[order], target[order]
    a, b = sizes["train"], sizes["train"] + sizes["val"]
    c = b + sizes["test"]
    x = (x - x[:a].mean(0)) / x[:a].std(0)
    y = (y - y[:a].mean(0)) / y[:a].std(0)
    xt = torch.from_numpy(x).to(torch.float32)
    yt = torch.from_numpy(y).to(torch.float32)
    return Splits(xt[:a], yt[:a], xt[a:b], yt[a:b], xt[b:c], yt[b:c])


def build_baseline(spec: dict[str, Any]) -> nn.Module:
    """The canonical baseline: a one-hidden-layer ReLU MLP, width 32."""
    return nn.Sequential(nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1))


TRACK = Track(card=CARD, make_splits=make_splits, build_baseline=build_baseline)
