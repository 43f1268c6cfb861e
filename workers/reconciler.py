"""The dispatcher and the reconciler: the database is the truth, the broker only a wake-up call.

The API commits a job and sends nothing (a publish through Celery was about a quarter
of a submission's CPU; docs/reliability.md). A thread in every worker process sends it:
- every ``dispatch_every_s``, the queued jobs never sent are stamped and sent
  (``dispatch_once``), oldest first;
and, less often (``reconcile_every_s``):
- running jobs whose lease expired (their worker died) go back to ``queued`` and
  are sent again, or fail with ``internal`` after ``max_attempts`` (or end
  ``cancelled`` when a cancel was asked);
- queued jobs sent long ago and never claimed are sent again when their messages are lost:
  as many as the broker's queue lacks (``_lost``), never because a backlog waits;
- custom tracks still validating whose message never left, or left so long ago
  that it must be lost, are sent again;
- reports stored without their track's stream change (by an older worker, during a rolling
  deploy) get one (``app.reports.models.sequence_strays``).
Every change is a compare-and-set, so several reconcilers may run at once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.db import db_now
from app.health import repository as health_repository
from app.jobs import leases
from app.jobs.models import Job, JobStatus
from app.reports.models import sequence_strays
from app.tracks import service as tracks_service
from bench.catalog import list_cards, unavailable_reason
from bench.errors import DEFAULT_HINTS, ErrorCode
from workers.context import WorkerContext
from workers.tracks import VALIDATION_TIMEOUT_S

log = logging.getLogger("ideabench.reconciler")
BEATS_KEPT = timedelta(days=1)  # a worker silent this long is gone; its beat row is deleted (issue 28.8)


@dataclass
class Reconciled:
    """What one pass did (job ids)."""

    requeued: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    errored: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    tracks_resent: list[str] = field(default_factory=list)
    beats_pruned: int = 0
    reports_sequenced: int = 0


def _error(code: ErrorCode, message: str) -> dict[str, str]:
    return {"code": code.value, "message": message, "hint": DEFAULT_HINTS[code]}


def dispatch_once(ctx: WorkerContext, now: datetime | None = None) -> list[str]:
    """Send the queued jobs never sent; commits their stamps first, then sends (a job whose
    send fails, or whose dispatcher dies between the two, is sent again by the reconciler
    after ``requeue_after_s``, as a lost message is). Returns the ids sent."""
    with ctx.sessions() as session:
        taken = leases.take_unsent(session, now or db_now(session))
        session.commit()
    for job_id, queue in taken:
        ctx.queue.enqueue(job_id, queue)
    return [job_id for job_id, _ in taken]


def _lost(ctx: WorkerContext, session: Session, stale: list[Job]) -> list[Job]:
    """Of ``stale`` (queued jobs sent long ago, oldest first), as many as the broker lacks
    messages for: on each queue, the jobs sent and still queued less the messages waiting
    there. A long backlog is no loss: its jobs wait, unsent again (issue 28.3: 10,000 queued
    jobs made ~300,000 duplicate messages). A broker that does not say its depth gets every
    stale job again (a duplicate is harmless: claims are conditional)."""
    lost: list[Job] = []
    for queue in sorted({job.queue for job in stale}):
        jobs = [job for job in stale if job.queue == queue]
        depth = ctx.queue.depth(queue)
        missing = len(jobs) if depth is None else max(0, leases.sent_queued(session, queue) - depth)
        lost += jobs[:missing]
    return lost


def reconcile_once(ctx: WorkerContext, now: datetime | None = None) -> Reconciled:
    """One pass; commits, then sends the jobs it put back in the queue."""
    settings = ctx.settings
    done = Reconciled()
    to_send: list[tuple[str, str]] = []
    with ctx.sessions() as session:
        now = now or db_now(session)  # the database's clock: the one the leases were written by
        for job in leases.expired_leases(session, now):
            if job.cancel_requested:
                error = _error(ErrorCode.CANCELLED, "The job was cancelled; its worker stopped responding.")
                if leases.release_expired(session, job, now, JobStatus.CANCELLED, error):
                    done.cancelled.append(job.id)
            elif job.attempts >= settings.max_attempts:
                error = _error(
                    ErrorCode.INTERNAL,
                    f"The worker running this job stopped responding {job.attempts} times; giving up.",
                )
                if leases.release_expired(session, job, now, JobStatus.ERRORED, error):
                    done.errored.append(job.id)
            elif leases.release_expired(session, job, now, JobStatus.QUEUED):
                done.requeued.append(job.id)
                to_send.append((job.id, job.queue))
        cutoff = now - timedelta(seconds=settings.requeue_after_s)
        for job in _lost(ctx, session, leases.stale_queued(session, cutoff)):
            if leases.mark_reenqueued(session, job, now):
                done.resent.append(job.id)
                to_send.append((job.id, job.queue))
        lost_after = timedelta(seconds=VALIDATION_TIMEOUT_S + settings.requeue_after_s)
        done.tracks_resent = tracks_service.stale_validations(session, cutoff, now - lost_after)
        for track_id in done.tracks_resent:
            tracks_service.mark_sent(session, track_id, now)
        # a row per worker process ever started: those silent for a day are gone for good
        done.beats_pruned = health_repository.prune_beats(session, now - BEATS_KEPT)
        # reports an older worker stored without a stream change (a rolling deploy): their
        # tracks' q-values are recomputed on every read until they have one (issue 28.9)
        done.reports_sequenced = sequence_strays(session)
        session.commit()
    for job_id, queue in to_send:
        ctx.queue.enqueue(job_id, queue)
    for track_id in done.tracks_resent:
        ctx.queue.enqueue_track(track_id, settings.default_job_device)
    if to_send or done.errored or done.cancelled or done.tracks_resent:
        log.info("reconciled: %s", done)
    return done


class WorkerLoop(threading.Thread):
    """Background thread of a worker: sends new jobs, says it is alive, reconciles."""

    def __init__(self, ctx: WorkerContext, sandbox: str, beat_every_s: float = 5.0) -> None:
        """``sandbox``: what this worker's sandbox check found (``SandboxCheck.describe``), sent
        with every beat for ``/readyz/judging``."""
        super().__init__(name="ideabench-reconciler", daemon=True)
        self.ctx = ctx
        self.sandbox = sandbox
        # the built-in tracks this worker's environment cannot run (their data is missing), once
        self.unavailable = {card["name"]: why for card in list_cards()
                            if (why := unavailable_reason(card, os.environ)) is not None}
        self.beat_every_s = beat_every_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        settings = self.ctx.settings
        next_beat = next_reconcile = time.monotonic()
        while True:
            self._guarded(dispatch_once, self.ctx)
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.beat_every_s
                self._guarded(self.beat)
            if time.monotonic() >= next_reconcile:
                next_reconcile = time.monotonic() + settings.reconcile_every_s
                self._guarded(reconcile_once, self.ctx)
            if self._stop_event.wait(settings.dispatch_every_s):
                return

    @staticmethod
    def _guarded(step: Callable[..., object], *args: object) -> None:
        """One step of the loop; a failure is logged and the next step still runs (the DB
        may be briefly away: a dispatch that fails must not stop the beats)."""
        try:
            step(*args)
        except Exception:
            log.warning("worker loop step %s failed", getattr(step, "__name__", step), exc_info=True)

    def beat(self) -> None:
        """Record that this worker is alive (GET /readyz/judging looks for it)."""
        settings = self.ctx.settings
        with self.ctx.sessions() as session:
            health_repository.record_beat(session, self.ctx.worker_id, settings.worker_queue, settings.device,
                                          db_now(session), sandbox=self.sandbox, unavailable=self.unavailable)
            session.commit()

    def stop(self) -> None:
        """End the loop."""
        self._stop_event.set()
