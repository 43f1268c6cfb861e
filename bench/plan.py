"""The run plan of a job, counted in one place (issue 26): pure arithmetic on a track's
defaults and the two arms' grids. The engine's progress totals, the API's estimate and a
custom track's validation all count with it, so what they say is what the engine runs.

A job trains, per arm:

- **sweep**: every learning rate of the grid x the arm's configs x the sweep seeds; the
  baseline sweeps at least ``budget_factor`` times as many learning rates (``dense_size``: the
  grid's own among them) when the idea has more configs, so its tuning budget is at least the
  idea's (PROTOCOL.md 1);
- **edges**: one more learning rate below and/or above the grid, once, when an arm's best
  lies at an edge (at most two per arm, densified like the grid);
- **screening**: the arms' best configs on ``n_seeds`` seeds, plus the baseline at the
  idea's learning rate when the two differ (``matched``);
- **confirmation**: only after a screened win, the same on ``n_seeds`` fresh seeds per look,
  at most ``CONFIRMATION_LOOKS`` looks.

On a card with ``repeats`` K > 1 the test stages (screening, matched, confirmation) train
each seed once, then K - 1 times more unless those first runs decide the look
(``bench.decide.repeats_futile``, ``efficacy``): the screening's repeats are counted at most
(``repeats_max``), the confirmation's within ``confirmation_max``.

No torch, no files: plain numbers in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bench.card import TrackSettings
from bench.decide import dense_size
from bench.stats import CONFIRMATION_LOOKS


def budget_factor(idea_configs: int, arm_configs: int, n_lrs: int = 0, idea_factor: int = 1) -> int:
    """How many times denser a grid an arm of ``arm_configs`` configs sweeps than the track's
    ``n_lrs`` learning rates: the least factor at which it trains as many (config, lr) pairs as
    the idea's ``idea_configs`` on the grid ``idea_factor`` times denser, both edge steps
    counted (``factor`` lrs each: ``densify``). By pairs, not configs: the denser grid has more
    than ``factor * n`` points (``dense_size``), and by config counts alone the track's baseline
    in a matched baseline's check got 13 pairs against 14; without the edges, a pinned matched
    baseline of 2 configs got 34 against an idea's 35. Without a grid to densify (``n_lrs`` < 2),
    the ratio of the counts."""
    idea, arm = max(1, idea_configs), max(1, arm_configs)
    if n_lrs < 2:
        return max(1, math.ceil(idea * idea_factor / arm))

    def pairs(configs: int, factor: int) -> int:
        return configs * (dense_size(n_lrs, factor) + 2 * factor)

    need, factor = pairs(idea, idea_factor), 1
    while pairs(arm, factor) < need:
        factor += 1
    return factor


@dataclass(frozen=True)
class RunPlan:
    """A job's training runs, both arms together: ``sweep`` and ``screening`` always,
    ``edges_max`` and ``matched_max`` at most (they depend on where the sweep lands), and
    ``confirmation_max`` at most, only after a screened win."""

    sweep: int
    edges_max: int
    screening: int
    matched_max: int
    confirmation_max: int
    repeats_max: int = 0

    @property
    def planned(self) -> int:
        """Runs every job makes: the sweep and the screening."""
        return self.sweep + self.screening

    @property
    def at_most(self) -> int:
        """Runs the job may make, a confirmation with two looks included."""
        return self.planned + self.edges_max + self.matched_max + self.repeats_max + self.confirmation_max


def plan(n_lrs: int, sweep_seeds: int, n_seeds: int, idea_configs: int = 1, baseline_configs: int = 1,
         *, baseline_swept: bool = True, idea_factor: int = 1, repeats: int = 1) -> RunPlan:
    """The run plan of a job whose lr grid has ``n_lrs`` values, with ``sweep_seeds`` sweep
    seeds, ``n_seeds`` screening seeds and the arms' grid sizes; ``baseline_swept`` False: a
    matched baseline whose config its check chose sweeps nothing (``protocol.Job.swept``);
    ``idea_factor``: a matched baseline's check, its "idea" sweeping as many lrs more as the
    idea it is checked for needs (``protocol.Job.budget_factor``); ``repeats``: runs per test
    seed."""
    factors = {"idea": (idea_factor, max(1, idea_configs))}
    if baseline_swept:
        factors["baseline"] = (budget_factor(idea_configs, baseline_configs, n_lrs, idea_factor),
                               max(1, baseline_configs))
    # a grid of one value is not densified (bench.decide.densify); an edge step always is
    sweep = sum(dense_size(n_lrs, factor) * configs * sweep_seeds for factor, configs in factors.values())
    edges = sum(2 * factor * configs * sweep_seeds for factor, configs in factors.values())
    return RunPlan(sweep=sweep, edges_max=edges, screening=2 * n_seeds, matched_max=n_seeds,
                   confirmation_max=3 * CONFIRMATION_LOOKS * n_seeds * repeats, repeats_max=3 * n_seeds * (repeats - 1))


def matched_plan(n_lrs: int, sweep_seeds: int, n_seeds: int, idea_configs: int, matched_configs: int,
                 repeats: int = 1) -> RunPlan:
    """A matched baseline's whole job: its check first (the matched baseline's ``matched_configs``
    as the idea, against the track's baseline, never confirmed: ``bench.judge.check_matched_baseline``),
    then the job, whose baseline sweeps nothing (``protocol.Job.swept``). The check sweeps on a
    grid dense enough for ``idea_configs``, and both of its edge steps always (its job's idea may
    extend either way): both tuning budgets equal (PROTOCOL.md 1)."""
    check = plan(n_lrs, sweep_seeds, n_seeds, matched_configs, 1,
                 idea_factor=budget_factor(idea_configs, matched_configs, n_lrs), repeats=repeats)
    job = plan(n_lrs, sweep_seeds, n_seeds, idea_configs, matched_configs, baseline_swept=False, repeats=repeats)
    return RunPlan(sweep=check.sweep + check.edges_max + job.sweep, edges_max=job.edges_max,
                   screening=check.screening + job.screening, matched_max=check.matched_max + job.matched_max,
                   confirmation_max=job.confirmation_max, repeats_max=check.repeats_max + job.repeats_max)


def plan_for_card(card: dict[str, Any], idea_configs: int = 1, n_seeds: int | None = None,
                  baseline_configs: int = 1, *, matched_configs: int | None = None) -> RunPlan:
    """``plan`` with a track card's defaults (``n_seeds``: an operator's override);
    ``matched_configs``: a matched baseline's job (``matched_plan``)."""
    defaults = TrackSettings.of(card).defaults
    sizes = (len(defaults.lr_grid), defaults.sweep_seeds, n_seeds or defaults.n_seeds)
    if matched_configs is not None:
        return matched_plan(*sizes, idea_configs, matched_configs, repeats=defaults.repeats)
    return plan(*sizes, idea_configs, baseline_configs, repeats=defaults.repeats)
