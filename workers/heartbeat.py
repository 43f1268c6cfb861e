"""The lease heartbeat of a running job, and its progress writer.

The heartbeat thread extends the lease every ``heartbeat_s`` and watches for a
cancel request (or a lost lease); either sets the ``cancel`` event that
``judge`` watches, which kills the sandboxed child.
"""

from __future__ import annotations

import logging
import threading
import time

from app.db import utcnow
from app.jobs import leases
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
            result = leases.heartbeat(session, self.claim, utcnow(), self.ctx.settings.lease_s)
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
    """The ``on_progress`` callback: writes stage and counts, at most every interval."""

    def __init__(self, ctx: WorkerContext, claim: Claim) -> None:
        self.ctx = ctx
        self.claim = claim
        self._last = 0.0
        self._last_stage: str | None = None
        self._lock = threading.Lock()

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        with self._lock:
            due = progress.stage != self._last_stage or progress.done >= progress.total
            if not due and now - self._last < self.ctx.settings.progress_min_interval_s:
                return
            self._last, self._last_stage = now, progress.stage
        try:
            with self.ctx.sessions() as session:
                leases.write_progress(
                    session, self.claim, stage=progress.stage, done=progress.done, total=progress.total,
                    eta_s=progress.eta_s, message=progress.message,
                )
                session.commit()
        except Exception:  # progress is best effort; the job goes on
            log.warning("could not write progress of %s", self.claim.job_id, exc_info=True)
