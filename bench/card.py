"""A track's card as a validated model (issue 26.5): every default is written here, once.

A card travels as JSON data (the catalog's ``card.json``, a custom track's stored card, the
report's provenance, the baseline cache's key), so it stays a plain dict on the wire and in
storage. Whoever *reads a setting* from it reads it through ``TrackSettings.of(card)``: the
protocol, the report, the run plan, the API's estimates. Before, the same default was written
at each reader (``card.get("param_parity_ratio", 1.10)`` twice, ``sweep_seeds`` 1 in one place
and 2 in another); a card that lacks a required key now fails at once with its name.

Pure pydantic: no torch (the API reads cards too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.errors import BenchError, ErrorCode


class Loss(StrEnum):
    """What the trusted trainer minimises."""

    MSE = "mse"
    CROSS_ENTROPY = "cross_entropy"


class _Frozen(BaseModel):
    # extra="allow": a card carries text and track-specific data (title, sizes, redraw, ...)
    model_config = ConfigDict(extra="allow", frozen=True)


class Metric(_Frozen):
    name: str
    loss: Loss
    direction: Literal["lower", "higher"]
    description: str = ""

    @property
    def lower_is_better(self) -> bool:
        return self.direction == "lower"


class Defaults(_Frozen):
    """The trainer's settings and the protocol's seed counts."""

    epochs: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    lr_grid: list[float] = Field(min_length=1)
    weight_decay: float = Field(default=0.0, ge=0.0)
    schedule: Literal["constant", "cosine"] = "constant"  # the learning rate over a run (bench.trainer.lr_factor)
    sweep_seeds: int = Field(default=2, ge=1)
    n_seeds: int = Field(default=8, ge=2)
    # runs per arm and test seed, their values averaged: the seed's split, each its own order
    # and init (issue 29.1: training noise over the square root of it; bench.seeding.run_seeds;
    # vision@5 trains 16: its CNN's runs scatter 13-16 % of its loss)
    repeats: int = Field(default=1, ge=1, le=16)
    # what a seed's repeat runs make its value (bench.decide.seed_value): their mean, or their mean
    # less the lowest and highest eighth of them ("trimmed": vision@6; issue 29.1)
    seed_value: Literal["mean", "trimmed"] = "mean"


PARAM_PARITY_RATIO = 1.10  # the idea may hold 10 % more parameters than the baseline
COMPUTE_RATIO = 4.0  # and cost up to 4x its forward FLOPs (correlated_tokens allows 20)
MAX_CONFIGS = 12  # configs of an HPARAMS grid
DIVERGENCE_CEILING = 1e6  # what a diverged run scores at least


class TrackSettings(_Frozen):
    """The settings of a track the engine and the service act on."""

    name: str
    metric: Metric
    defaults: Defaults
    spec: dict[str, Any]
    param_cap: int = Field(ge=1)
    smallest_effect_rel_pct: float = Field(gt=0)
    param_parity_ratio: float = Field(default=PARAM_PARITY_RATIO, ge=1.0)
    compute_ratio: float = Field(default=COMPUTE_RATIO, gt=0)
    buffer_cap: int | None = Field(default=None, ge=0)  # None: the baseline's own plus some room
    max_configs: int = Field(default=MAX_CONFIGS, ge=1)
    divergence_ceiling: float = Field(default=DIVERGENCE_CEILING, gt=0)
    public_data: bool = False
    justification: str | None = None

    @classmethod
    def of(cls, card: Mapping[str, Any]) -> TrackSettings:
        """``card`` validated; a card that is not one is the service's fault (``internal``)."""
        try:
            return cls.model_validate(dict(card))
        except ValidationError as exc:
            where = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:5])
            raise BenchError(ErrorCode.INTERNAL, f"The track card of {card.get('name')!r} is invalid at: {where}.") from None

    @property
    def lower_is_better(self) -> bool:
        return self.metric.lower_is_better

    @property
    def max_build_elements(self) -> int:
        """What one init seed of a model built by code the bench did not write (an idea, a
        matched baseline, a custom track's baseline) may hold in tensor elements, counted from
        the capture's file headers before any is read: four times ``param_cap`` plus
        ``buffer_cap``, far above what parity admits (parity decides later, on the trainers'
        counts), far below what fills a disk or a database row."""
        return 4 * self.param_cap + (self.buffer_cap or 0)


def card_timing(card: Mapping[str, Any]) -> tuple[float, float] | None:
    """A track card's measured ``timing`` as (seconds before training, seconds per run), when it
    has a usable one (``benchmarks/track_timing.py``; a custom track's from its validation)."""
    timing = card.get("timing")
    if not isinstance(timing, dict):
        return None
    values = [timing.get("fixed_s"), timing.get("run_s")]
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numbers) != 2 or not all(math.isfinite(v) and v >= 0 for v in numbers):
        return None
    return numbers[0], numbers[1]

