"""The track interface: what a track module must provide to the engine.

A track module (``tracks/<name>/track.py``) defines ``TRACK = Track(...)``. It may
import only this module from bench, torch and numpy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn


class TrackUnavailable(RuntimeError):
    """Raised by ``make_splits`` when this deployment cannot make the track's data (a data set
    that is not installed or not whole): the job ends ``track_unavailable``, not ``internal``."""


@dataclass(frozen=True)
class Splits:
    """Train / validation / test tensors of one data seed.

    ``x_*`` have shape ``(N, *spec["input_shape"])``, float32. ``y_*`` have shape
    ``(N, *spec["output_shape"])`` float32 for regression, or ``(N,)`` int64 class
    indices for classification (``metric.loss == "cross_entropy"``).
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    def checksum(self) -> str:
        """sha256 over the bytes of all six tensors, in a fixed order."""
        digest = hashlib.sha256()
        for tensor in (self.x_train, self.y_train, self.x_val, self.y_val, self.x_test, self.y_test):
            digest.update(np.ascontiguousarray(tensor.detach().cpu().numpy()).tobytes())
        return digest.hexdigest()


@dataclass(frozen=True)
class Track:
    """A built-in (or registered) track.

    ``make_splits(split_seed, task_seed)`` must be deterministic: the same seeds give
    the same tensors, bit for bit. ``task_seed`` fixes a synthetic task's constants
    (the engine derives it from the deployment secret, so no submitted file can
    recompute the task); ``None`` means the card's public ``data_seed_base``. ``build_baseline(spec)`` returns the canonical
    baseline; it follows the same contract as an idea's ``build_model``.
    """

    card: dict[str, Any]
    make_splits: Callable[[int, int | None], Splits]
    build_baseline: Callable[[dict[str, Any]], nn.Module]
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.card["name"])

    @property
    def version(self) -> int:
        return int(self.card["version"])

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.card["spec"])


def load_card(module_file: str) -> dict[str, Any]:
    """Read ``card.json`` beside a track module (call with ``__file__``)."""
    card: dict[str, Any] = json.loads((Path(module_file).parent / "card.json").read_text())
    return card
