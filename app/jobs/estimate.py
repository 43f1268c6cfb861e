"""Rough estimates for a submission: runs to train, seconds, and the queue ahead.

Judging trains both arms on the sweep grid and then on the final seeds, so the number of runs
is known up front (``bench.plan``). A job's seconds are a fixed part (children started, both
arms captured and checked) plus seconds per training run, per track (issue 27.2):

- ``history``: from the track's recent succeeded jobs on this deployment (at least
  ``MIN_HISTORY``): where their run counts differ enough, both parts, fitted to their seconds
  (``history_timing``: a Theil-Sen line, which one job held up by a busy machine does not
  move); else the median of their seconds beyond the card's fixed part, per run;
- ``card``: else the track card's ``timing``, measured by ``benchmarks/track_timing.py`` on the
  reference machine (a custom track's from its validation: its baseline's smoke run);
- ``default``: else the deployment's ``estimate_run_s`` per run (a track with neither).

Both the timing and the queue depth are cached briefly: an estimate need not cost a query per
submission.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.orm import Session

from app.jobs import repository
from app.jobs.models import Job
from bench.card import card_timing


def grid_size(hparams: Any) -> int:
    """Combinations of an ``HPARAMS`` grid (1 when absent or unreadable)."""
    if not isinstance(hparams, dict):
        return 1
    return math.prod(len(v) for v in hparams.values() if isinstance(v, list) and v) or 1


MIN_HISTORY = 3  # succeeded jobs of a track before its own history replaces the card's figure
MIN_SPREAD = 1.5  # the largest run count over the smallest in the history before its fixed part is fitted
Basis = Literal["history", "card", "default"]


@dataclass(frozen=True)
class Timing:
    """What one job on a track costs: ``fixed_s`` before it trains, ``run_s`` per training run."""

    fixed_s: float
    run_s: float
    basis: Basis

    def seconds(self, runs: int) -> float:
        return self.fixed_s + runs * self.run_s


def timing_of(card: dict[str, Any], default_run_s: float) -> Timing:
    """A card's measured ``timing`` ({fixed_s, run_s}: ``bench.card.card_timing``), else the
    deployment's default per run."""
    measured = card_timing(card)
    return Timing(*measured, "card") if measured is not None else Timing(0.0, default_run_s, "default")


def history_timing(durations: list[tuple[float, int | None]], fixed_s: float) -> tuple[float, float] | None:
    """``(fixed_s, run_s)`` from ``(seconds, runs)`` of recent jobs; None with fewer than
    ``MIN_HISTORY`` usable jobs.

    Where the jobs' run counts span at least a factor ``MIN_SPREAD``, both parts are fitted: the
    slope is the median of the slopes between every two jobs of different run counts and the
    intercept the median of what each job leaves (Theil-Sen, written out here: a few lines
    over at most 20 jobs, and the API does not import scipy for them). A fit that says a job
    costs nothing before its runs, or less than nothing per run, is not believed. Otherwise
    the card's ``fixed_s`` stands and the per-run part is the median of each job's seconds
    beyond it, per run."""
    usable = [(seconds, runs) for seconds, runs in durations if runs]
    if len(usable) < MIN_HISTORY:
        return None
    counts = [runs for _, runs in usable]
    if max(counts) >= MIN_SPREAD * min(counts):
        slope = statistics.median([(s2 - s1) / (r2 - r1) for i, (s1, r1) in enumerate(usable)
                                   for s2, r2 in usable[i + 1:] if r2 != r1])
        intercept = statistics.median([seconds - slope * runs for seconds, runs in usable])
        if slope >= 0 and intercept > 0:
            return intercept, slope
    return fixed_s, statistics.median([max(0.0, seconds - fixed_s) / runs for seconds, runs in usable])


def deployment_timing(session: Session, track: str, card: dict[str, Any]) -> tuple[float, float] | None:
    """``(fixed_s, run_s)`` fitted to the track's recent succeeded jobs on this deployment
    (``history_timing``, the card's ``fixed_s`` where the fit keeps it); None before there are
    ``MIN_HISTORY``. A worker hands it to the engine, whose time left before a job's first run
    ends is then this deployment's, not the reference machine's (issue 27.2)."""
    measured = card_timing(card)
    return history_timing(repository.recent_durations(session, track), measured[0] if measured else 0.0)


class Estimator:
    """Cached inputs of estimates: seconds per run by track, queued jobs by queue."""

    def __init__(self, default_run_s: float, runtime_ttl_s: float = 60.0, depth_ttl_s: float = 2.0) -> None:
        self.default_run_s = default_run_s
        self.runtime_ttl_s = runtime_ttl_s
        self.depth_ttl_s = depth_ttl_s
        self._runtime: dict[str, tuple[float, Timing]] = {}
        self._depth: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def timing(self, session: Session, track: str, card: dict[str, Any]) -> Timing:
        """The track's ``Timing``: fitted to its recent jobs (``history_timing``), else its card's."""
        now = time.monotonic()
        with self._lock:
            hit = self._runtime.get(track)
        if hit is not None and now - hit[0] < self.runtime_ttl_s:
            return hit[1]
        fitted = deployment_timing(session, track, card)
        value = timing_of(card, self.default_run_s) if fitted is None else Timing(*fitted, "history")
        with self._lock:
            self._runtime[track] = (now, value)
        return value

    def position_of_new(self, session: Session, job: Job) -> int:
        """Queued jobs ahead of a job just submitted (exact at most ``depth_ttl_s`` ago)."""
        now = time.monotonic()
        with self._lock:
            hit = self._depth.get(job.queue)
            if hit is not None and now - hit[0] < self.depth_ttl_s:
                self._depth[job.queue] = (hit[0], hit[1] + 1)
                return hit[1]
        ahead = repository.queue_position(session, job)
        with self._lock:
            self._depth[job.queue] = (now, ahead + 1)
        return ahead
