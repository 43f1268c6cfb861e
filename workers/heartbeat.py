"""The lease heartbeat of a running job, and its progress writer.

The heartbeat thread extends the lease every ``heartbeat_s`` and watches for a
cancel request (or a lost lease); either sets the ``cancel`` event that
``judge`` watches, which kills the sandboxed child.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from app.db import db_now
from app.jobs import leases, repository
from app.jobs.leases import Claim
from bench.protocol import Progress
from workers.context import WorkerContext

log = logging.getLogger("ideabench.worker")


class Heartbeat(threading.Thread):
    """Keeps a claim alive; sets ``cancel`` on a cancel request or a lost lease."""

    def __init__(self, ctx: WorkerContext, claim: Claim, cancel: threading.Event) -> None:
        super().__init__(name=f"heartbeat-{claim.job_id}", daemon=True)
        self.ctx = ctx
        self.claim = claim
        self.cancel = cancel
        self.cancel_requested = False
        self.lost = False
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.ctx.settings.heartbeat_s):
            try:
                self.beat()
            except Exception:  # a DB hiccup: try again next beat; the lease has slack
                log.warning("heartbeat of %s failed", self.claim.job_id, exc_info=True)

    def beat(self) -> None:
        """One lease extension and cancel check."""
        with self.ctx.sessions() as session:
            result = leases.heartbeat(session, self.claim, db_now(session), self.ctx.settings.lease_s)
            session.commit()
        if not result.owned:
            self.lost = True
            log.warning("lost the lease of %s; stopping it", self.claim.job_id)
            self.cancel.set()
        elif result.cancel_requested and not self.cancel_requested:
            self.cancel_requested = True
            log.info("cancel requested for %s", self.claim.job_id)
            self.cancel.set()

    def stop(self) -> None:
        """Stop beating (the job is over)."""
        self._stop_event.set()
        self.join(timeout=5)


class ProgressWriter:
    """The ``on_progress`` callback: writes stage and counts, at most every interval, and the
    job's event stream, batched with the progress it came with: ``stage`` on each new stage and
    whenever its counts change (the first is known once the run plan is, after the children
    start), ``run`` for each finished run with the counts after it, so every progress bar has
    its denominator. Writes are serialised: event numbers are gap-free."""

    def __init__(self, ctx: WorkerContext, claim: Claim) -> None:
        self.ctx = ctx
        self.claim = claim
        self._last = 0.0
        self._last_stage: tuple[str, int, int | None] | None = None  # what the last stage event said
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._progress: Progress | None = None
        self._lock = threading.Lock()

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        with self._lock:
            stage = (progress.stage, progress.total, progress.at_most)
            new_stage = stage != self._last_stage and progress.total > 0  # not before the plan
            if new_stage:
                self._last_stage = stage
                self._pending.append(("stage", {"stage": progress.stage, "runs_done": progress.done,
                                                "runs_total": progress.total, "runs_at_most": progress.at_most}))
            if progress.run is not None:
                self._pending.append(("run", {**progress.run, "runs_done": progress.done, "runs_total": progress.total,
                                              "runs_at_most": progress.at_most}))
            self._progress = progress
            due = new_stage or progress.done >= progress.total
            if not due and now - self._last < self.ctx.settings.progress_min_interval_s:
                return
            self._last = now
            self._write()

    def flush(self, warnings: list[str] | None = None) -> None:
        """Write what is pending (and the report's ``warning`` events) before the job ends."""
        with self._lock:
            self._pending.extend(("warning", {"message": w}) for w in warnings or [])
            self._write()

    def _write(self) -> None:
        progress, events = self._progress, self._pending
        if progress is None:  # nothing has happened yet
            return
        try:
            with self.ctx.sessions() as session:
                owned = leases.write_progress(  # the fence: only the lease holder writes events
                    session, self.claim, stage=progress.stage, done=progress.done, total=progress.total,
                    eta_s=progress.eta_s, message=progress.message, at_most=progress.at_most,
                    eta_max_s=progress.eta_max_s,
                )
                if owned and events:
                    repository.append_events(session, self.claim.job_id, self.claim.attempt, events, db_now(session))
                session.commit()
            self._pending = []
        except Exception:  # progress is best effort; the job goes on (events stay pending)
            log.warning("could not write progress of %s", self.claim.job_id, exc_info=True)
