"""Public data cannot be memorised into a win (issue 25.4).

vision@1 evaluated scikit-learn's public digits as they are, and tabular@1 the public diabetes
outcome: a file that embeds those rows, in what the caps allow, answered test rows from the
table. Both attacks are rebuilt here on the old data (they win) and on the new versions (they
find nothing): vision@4 draws every image from strokes and its split seed (vision@2-3 redrew
the public digits), tabular@2 draws its outcome from a secret teacher. Pure tensors: no job, no
child."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
import torch

import tracks.tabular.track as tabular
import tracks.vision.track as vision
from tests.capture_helpers import through_capture

SEEDS = [1000, 1017, 1042]


def public_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 UCI digits as vision@1 evaluated them: (N, 1, 8, 8) in [0, 1], labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.from_numpy(np.asarray(data.images, dtype=np.float32) / 16.0)[:, None]
    return images, torch.from_numpy(np.asarray(data.target, dtype=np.int64))


@pytest.fixture(scope="module")
def memoriser() -> Any:
    """The red team's digits memoriser, its table computed from the public data."""
    module = importlib.import_module("tests.security.hostile.digit_memoriser")
    images, labels = public_digits()
    weights = np.random.default_rng(0).integers(0, 256, 64).astype(np.float32)
    hashes = np.round(images.numpy().reshape(len(images), 64) * 16.0) @ weights
    module.WEIGHTS[:] = weights.tolist()
    module.TABLE[:] = (hashes * 16.0 + labels.numpy()).tolist()
    return module


def table_hits(module: Any, x: torch.Tensor) -> torch.Tensor:
    """Which rows the memoriser answers from its table (a single hash match)."""
    model = module.build_model(vision.CARD["spec"])
    h = torch.round(x.reshape(len(x), 64) * 16.0) @ model.weights
    offset = model.table[None, :] - 16.0 * h[:, None]
    return ((offset >= 0) & (offset < 16)).sum(dim=1) == 1


def test_the_digits_memoriser_fits_the_caps_and_finds_no_drawn_image(memoriser: Any) -> None:
    n_params, n_words = through_capture(memoriser.build_model(vision.CARD["spec"]), [1, 8, 8]).counts()
    baseline = 1898  # vision's baseline parameters (the card): its buffer cap, and parity at 1.1x
    assert n_params <= 1.1 * baseline and n_words <= baseline  # nothing in the caps stops it
    images, labels = public_digits()
    hits = table_hits(memoriser, images)
    found = memoriser.build_model(vision.CARD["spec"])(images).argmax(dim=1)
    assert hits.float().mean() > 0.9 and torch.equal(found[hits], labels[hits])  # vision@1: a lookup
    public = rows(torch.round(images * 16))
    for seed in SEEDS:
        new = vision.make_splits(seed)
        # regression guards for a generator that knows nothing of the public set:
        assert table_hits(memoriser, new.x_test).float().mean() < 0.1  # chance matches of a noisy hash
        assert not public & rows(torch.round(new.x_test * 16))  # no evaluated image is a public one


def rows(x: torch.Tensor) -> set[bytes]:
    """Each image's exact bytes: a shared image is found exactly, not to a float tolerance."""
    return {row.numpy().tobytes() for row in x.flatten(1)}


def test_the_drawn_digits_are_learnable_and_fresh_per_split_seed() -> None:
    """A nearest class mean on the training images reads most test digits (0.64 measured; 0.1 is
    chance); no image is in two splits of one seed or in two seeds' test splits."""
    s = vision.make_splits(SEEDS[0])
    means = torch.stack([s.x_train[s.y_train == c].mean(0) for c in range(10)]).flatten(1)
    guess = torch.cdist(s.x_test.flatten(1), means).argmin(dim=1)
    assert (guess == s.y_test).float().mean() > 0.5
    assert s.x_test.dtype == torch.float32 and 0.0 <= float(s.x_test.min()) and float(s.x_test.max()) <= 1.0
    test, train, val = rows(s.x_test), rows(s.x_train), rows(s.x_val)
    assert len(test) == vision.CARD["sizes"]["test"] and not test & train and not test & val and not train & val
    assert not test & rows(vision.make_splits(SEEDS[1]).x_test)


def lookup_mse(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
               public_y: np.ndarray) -> tuple[float, float]:
    """(partial memoriser's test MSE, the linear fit's): 190 public rows on three-number keys
    (their first principal directions) with their public outcome, 11 linear weights for the
    rest: 190 * 4 + 30 + 11 = 801 words, under tabular's 423 parameters + 385 buffer words."""
    features, _ = tabular._diabetes()
    z = (features - features.mean(0)) / features.std(0)
    directions = np.linalg.svd(z - z.mean(0), full_matrices=False)[2][:3].T
    stored = np.random.default_rng(3).choice(len(z), 190, replace=False)
    keys, values = z[stored] @ directions, public_y[stored]
    assert keys.size + values.size + directions.size + 11 <= 423 + 385
    design = np.c_[x_train, np.ones(len(x_train))]
    beta = np.linalg.lstsq(design, y_train, rcond=None)[0]
    linear = np.c_[x_test, np.ones(len(x_test))] @ beta
    d = (((x_test @ directions)[:, None, :] - keys[None]) ** 2).sum(-1)
    near = np.sqrt(d.min(axis=1)) < 0.3
    guess = np.where(near, values[d.argmin(axis=1)], linear)
    return float(np.mean((guess - y_test) ** 2)), float(np.mean((linear - y_test) ** 2))


def diabetes_v1(split_seed: int) -> tuple[np.ndarray, ...]:
    """tabular@1's test split: the public rows and outcome, standardised on the train rows."""
    features, target = tabular._diabetes()
    gen = torch.Generator().manual_seed(tabular.CARD["data_seed_base"] * 1_000_003 + split_seed)
    order = torch.randperm(len(target), generator=gen).numpy()
    x, y = features[order], target[order][:, 0]
    a, b = tabular.CARD["sizes"]["train"], tabular.CARD["sizes"]["train"] + tabular.CARD["sizes"]["val"]
    x = (x - x[:a].mean(0)) / x[:a].std(0)
    y = (y - y[:a].mean()) / y[:a].std()
    return x[:a], y[:a], x[b:], y[b:]


def test_the_diabetes_memoriser_wins_on_the_public_outcome_and_loses_on_the_teachers() -> None:
    features, target = tabular._diabetes()
    public_y = ((target - target.mean()) / target.std())[:, 0]
    old = [lookup_mse(*diabetes_v1(seed), public_y) for seed in SEEDS]
    assert all(mem < 0.85 * lin for mem, lin in old), old  # tabular@1: a win of over 15 % from a table
    for task_seed in (None, 4242):
        for seed in SEEDS:
            s = tabular.make_splits(seed, task_seed)
            mem, lin = lookup_mse(s.x_train.numpy().astype(np.float64), s.y_train.numpy()[:, 0].astype(np.float64),
                                  s.x_test.numpy().astype(np.float64), s.y_test.numpy()[:, 0].astype(np.float64),
                                  public_y)
            assert mem >= lin, (task_seed, seed, mem, lin)  # the public outcome only misleads


def test_the_teacher_is_secret_per_epoch_and_the_rows_keep_their_covariates() -> None:
    a, b = tabular.make_splits(SEEDS[0], 1), tabular.make_splits(SEEDS[0], 2)
    assert torch.equal(a.x_test, b.x_test) and not torch.allclose(a.y_test, b.y_test)
    assert torch.equal(tabular.make_splits(SEEDS[0], 1).y_test, a.y_test)  # bit for bit
    assert np.corrcoef(tabular.teacher(1), tabular.teacher(2))[0, 1] < 0.9
