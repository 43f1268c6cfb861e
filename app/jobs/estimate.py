"""Rough estimates for a submission: runs to train, seconds, and the queue ahead.

Judging trains both arms on the sweep grid and then on the final seeds, so the
number of runs is known up front; seconds per run come from the track's recent
successful jobs, else a default. Both the per-run time and the queue depth are
cached briefly: an estimate need not cost a query per submission.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from sqlalchemy.orm import Session

from app.jobs import repository
from app.jobs.models import Job


def grid_size(hparams: Any) -> int:
    """Combinations of an ``HPARAMS`` grid (1 when absent or unreadable)."""
    if not isinstance(hparams, dict):
        return 1
    return math.prod(len(v) for v in hparams.values() if isinstance(v, list) and v) or 1


def seeds_of(card: dict[str, Any], n_seeds: int | None) -> int:
    """Final paired seeds per arm: an operator's override, else the track's."""
    return n_seeds or int(card.get("defaults", {}).get("n_seeds", 8))


class Estimator:
    """Cached inputs of estimates: seconds per run by track, queued jobs by queue."""

    def __init__(self, default_run_s: float, runtime_ttl_s: float = 60.0, depth_ttl_s: float = 2.0) -> None:
        self.default_run_s = default_run_s
        self.runtime_ttl_s = runtime_ttl_s
        self.depth_ttl_s = depth_ttl_s
        self._runtime: dict[str, tuple[float, float | None]] = {}
        self._depth: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def seconds_per_run(self, session: Session, track: str) -> float | None:
        """Mean seconds per run over the track's recent jobs; None with no history."""
        now = time.monotonic()
        with self._lock:
            hit = self._runtime.get(track)
        if hit is not None and now - hit[0] < self.runtime_ttl_s:
            return hit[1]
        rates = [s / r for s, r in repository.recent_durations(session, track) if r]
        value = sum(rates) / len(rates) if rates else None
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
