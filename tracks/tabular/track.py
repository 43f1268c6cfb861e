"""The tabular track: the covariates of scikit-learn's bundled diabetes data (442 patients, 10
features) and an outcome drawn by a secret teacher (version 2).

The data ship inside scikit-learn (nothing is downloaded). The outcome is no longer the public
progression measure: a file could embed those rows and answer test rows from them (a partial
lookup of 190 rows on three-number keys fits tabular@1's caps and scored MSE 0.34 against
the linear fit's 0.51: issue 25.4, tests/security/test_public_data.py). Version 2 draws, per seed epoch (``task_seed``,
secret), a teacher that is close to linear with a smooth nonlinear part, and per split seed
the outcome's noise; knowing the public rows tells a file nothing about any label. Each split
seed permutes the rows and cuts train / validation / test; features and outcome are then
standardised with the mean and standard deviation of that seed's training rows. Version 3
measures each test patient 16 times and trains with the cosine schedule (docs/tracks.md, "Power").
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


def teacher(task_seed: int | None) -> np.ndarray:
    """The outcome's mean for each of the 442 patients, drawn from ``task_seed`` (the card's
    public ``data_seed_base`` when None: tests and docs only): a random linear map of the
    standardised covariates carrying ``linear_share`` of the variance, and a smooth random
    ridge (a sine of another projection) the rest; unit variance over the patients."""
    features, _ = _diabetes()
    z = (features - features.mean(0)) / features.std(0)
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] if task_seed is None else task_seed)
    beta = torch.randn(z.shape[1], generator=gen, dtype=torch.float64).numpy()
    u = torch.randn(z.shape[1], generator=gen, dtype=torch.float64).numpy()

    def unit(v: np.ndarray) -> np.ndarray:
        return (v - v.mean()) / v.std()

    share = float(CARD["teacher"]["linear_share"])
    ridge = unit(np.sin(float(CARD["teacher"]["frequency"]) * unit(z @ u)))
    return unit(share**0.5 * unit(z @ beta) + (1.0 - share) ** 0.5 * ridge)


def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:
    """Permute rows with a generator seeded by ``split_seed``; the outcome is the teacher's
    (``task_seed``) plus noise of the card's ``noise_sd`` from the same generator; standardise
    on the train rows."""
    features, _ = _diabetes()
    mean = teacher(task_seed)
    sizes, noise_sd = CARD["sizes"], float(CARD["teacher"]["noise_sd"])
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] * 1_000_003 + split_seed)
    order = torch.randperm(len(mean), generator=gen).numpy()
    noise = torch.randn(len(mean), generator=gen, dtype=torch.float64).numpy()
    x = features[order]
    y = (mean[order] + noise_sd * noise)[:, None]
    a, b = sizes["train"], sizes["train"] + sizes["val"]
    c = b + sizes["test_patients"]
    draws = int(CARD["teacher"]["test_draws"])
    # Each test patient measured ``draws`` times, each with its own noise (version 3): the same
    # expected MSE as one measurement, with the noise's share of its sampling error cut. The
    # patients cycle: the first 100 rows are the 100 patients (a 256-row probe batch holds
    # each two or three times).
    x_test = np.tile(x[b:c], (draws, 1))
    y_test = (np.tile(mean[order][b:c], draws) + noise_sd * torch.randn(
        (c - b) * draws, generator=gen, dtype=torch.float64).numpy())[:, None]
    x_mean, x_sd, y_mean, y_sd = x[:a].mean(0), x[:a].std(0), y[:a].mean(0), y[:a].std(0)

    def tensor(v: np.ndarray, m: np.ndarray, s: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((v - m) / s).to(torch.float32)

    return Splits(tensor(x[:a], x_mean, x_sd), tensor(y[:a], y_mean, y_sd), tensor(x[a:b], x_mean, x_sd),
                  tensor(y[a:b], y_mean, y_sd), tensor(x_test, x_mean, x_sd), tensor(y_test, y_mean, y_sd))


def build_baseline(spec: dict[str, Any]) -> nn.Module:
    """The canonical baseline: a one-hidden-layer ReLU MLP, width 32."""
    return nn.Sequential(nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1))


TRACK = Track(card=CARD, make_splits=make_splits, build_baseline=build_baseline)
