"""The cifar10 track: a few-thousand-image subset of CIFAR-10, read from local pickle batches.

Nothing is downloaded: the directory named by the environment variable
``IDEABENCH_CIFAR10_DIR`` must hold the standard python batches (``data_batch_1`` ..
``data_batch_5`` and ``test_batch``, the contents of ``cifar-10-batches-py``). Each
split seed draws train and validation images from the 50,000 training images and test
images from the 10,000 test images.
"""

from __future__ import annotations

import os
import pickle
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bench.track import Splits, Track, TrackUnavailable, load_card

CARD = load_card(__file__)

ENV_VAR = "IDEABENCH_CIFAR10_DIR"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
# Per-channel mean and std of the CIFAR-10 training images (in [0, 1] units).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def data_dir() -> Path:
    """The batch directory from ``IDEABENCH_CIFAR10_DIR``; a clear error when it is unusable."""
    value = os.environ.get(ENV_VAR)
    if not value:
        raise TrackUnavailable(
            f"The cifar10 track needs the environment variable {ENV_VAR} set to a directory "
            "holding the CIFAR-10 python batches (data_batch_1..5, test_batch)."
        )
    path = Path(value)
    missing = [name for name in (*TRAIN_FILES, TEST_FILE) if not (path / name).is_file()]
    if missing:
        raise TrackUnavailable(
            f"{ENV_VAR}={value!r} lacks the CIFAR-10 python batch file(s) {', '.join(missing)}; "
            "it must hold data_batch_1..5 and test_batch (the contents of cifar-10-batches-py)."
        )
    return path


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with path.open("rb") as handle:
        batch = pickle.load(handle, encoding="bytes")
    data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    labels = np.asarray(batch[b"labels"], dtype=np.int64)
    if len(data) != len(labels):
        raise TrackUnavailable(f"{path}: {len(data)} images but {len(labels)} labels.")
    return data, labels


@lru_cache(maxsize=2)
def _load(directory: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """uint8 images (N, 3, 32, 32) and int64 labels of the training and test pools."""
    path = Path(directory)
    parts = [_read_batch(path / name) for name in TRAIN_FILES]
    train_x = np.concatenate([p[0] for p in parts])
    train_y = np.concatenate([p[1] for p in parts])
    test_x, test_y = _read_batch(path / TEST_FILE)
    return train_x, train_y, test_x, test_y


def _to_input(images: np.ndarray) -> torch.Tensor:
    """uint8 (N, 3, 32, 32) -> float32, scaled to [0, 1] and standardised per channel."""
    x = torch.from_numpy(images).to(torch.float32) / 255.0
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (x - mean) / std


def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:
    """Draw the train/val subset from the training pool and the test subset from the test pool.
    ``task_seed`` is unused: the task has no constants to draw."""
    train_x, train_y, test_x, test_y = _load(str(data_dir()))
    sizes = CARD["sizes"]
    n_pool = sizes["train"] + sizes["val"]
    if len(train_y) < n_pool or len(test_y) < sizes["test"]:
        raise TrackUnavailable(
            f"{ENV_VAR} holds {len(train_y)} training and {len(test_y)} test images; the track "
            f"needs at least {n_pool} and {sizes['test']}."
        )
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] * 1_000_003 + split_seed)
    pool = torch.randperm(len(train_y), generator=gen)[:n_pool].numpy()
    test = torch.randperm(len(test_y), generator=gen)[: sizes["test"]].numpy()
    x, y = _to_input(train_x[pool]), torch.from_numpy(train_y[pool])
    a = sizes["train"]
    return Splits(
        x[:a], y[:a], x[a:], y[a:], _to_input(test_x[test]), torch.from_numpy(test_y[test])
    )


def build_baseline(spec: dict[str, Any]) -> nn.Module:
    """The canonical baseline: three stride-2 3x3 convs (8, 16, 32 channels), linear classifier."""
    return nn.Sequential(
        nn.Conv2d(spec["n_channels"], 8, 3, stride=2, padding=1),  # 32 -> 16
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),  # 16 -> 8
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),  # 8 -> 4
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, spec["n_classes"]),
    )


TRACK = Track(card=CARD, make_splits=make_splits, build_baseline=build_baseline)
