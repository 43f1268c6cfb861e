"""A worker's check thread: it answers checks before the queue (app/checks) while the worker
judges, so a check waits for no job. Each check runs ``bench.judge.check`` (sandboxed
capture and the checks a job makes before it trains, under a throwaway seed secret)."""

from __future__ import annotations

import logging
import threading
import time

from app.checks import service
from app.errors import ApiCode
from bench.errors import BenchError
from bench.judge import JudgeRequest, check
from workers.context import WorkerContext

log = logging.getLogger("ideabench.checks")
EXPIRE_EVERY_S = 30.0  # how often a worker ends stale checks (each worker polls every check_poll_s)


def answer_one(ctx: WorkerContext) -> bool:
    """Claim the oldest pending check and answer it; False when there was none."""
    with ctx.sessions() as session:
        row = service.claim_next(session, ctx.worker_id)
        if row is None:
            return False
        check_id, track, submission = row.id, row.track, dict(row.submission)
    settings = ctx.settings
    request = JudgeRequest(
        track=track, idea_code=submission["code"], baseline_code=submission.get("baseline_code"),
        hparams=submission.get("hparams"), mechanism=submission.get("mechanism"),
        timeout_s=settings.check_timeout_s, capture_timeout_s=min(settings.capture_timeout_s, settings.check_timeout_s),
        memory_mb=settings.job_memory_mb, options=ctx.host_options().engine,
    )
    result, error = None, None
    try:
        result = check(request)
    except BenchError as exc:
        error = {"code": exc.code.value, "message": exc.message, "hint": exc.hint}
    except Exception:  # noqa: BLE001 - a bug of ours: the check says so, the thread goes on
        log.exception("check %s failed inside ideabench", check_id)
        error = {"code": ApiCode.INTERNAL.value, "message": "The check failed inside ideabench.",
                 "hint": "Retry the check; submit the idea as a job if it persists."}
    with ctx.sessions() as session:
        service.finish(session, check_id, result, error)
    log.info("check %s: %s", check_id, "passed" if error is None else error["code"])
    return True


class CheckRunner(threading.Thread):
    """Answers checks every ``check_poll_s`` until stopped; ends stale ones as it goes."""

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(name="ideabench-checks", daemon=True)
        self.ctx = ctx
        self._stop_event = threading.Event()

    def run(self) -> None:
        settings = self.ctx.settings
        expired_at = float("-inf")
        while not self._stop_event.is_set():
            try:
                if time.monotonic() - expired_at >= EXPIRE_EVERY_S:  # an UPDATE, not every poll
                    with self.ctx.sessions() as session:
                        service.expire(session, settings.check_pending_s, 2 * settings.check_timeout_s + 60)
                    expired_at = time.monotonic()
                busy = answer_one(self.ctx)
            except Exception:  # the database may be briefly away; keep the thread alive
                log.warning("check pass failed", exc_info=True)
                busy = False
            if not busy and self._stop_event.wait(settings.check_poll_s):
                return

    def stop(self) -> None:
        self._stop_event.set()
