"""The webhook sender: a thread of every worker process that delivers due job-end webhooks
(app/webhooks/service.py holds the policy, the message and the state)."""

from __future__ import annotations

import logging
import threading

import httpx

from app.db import utcnow
from app.webhooks import service
from workers.context import WorkerContext

log = logging.getLogger("ideabench.webhooks")


def deliver_due(ctx: WorkerContext, client: httpx.Client) -> int:
    """One pass: claim the due attempts, send each, record each; returns how many were tried."""
    settings = ctx.settings
    with ctx.sessions() as session:
        due = service.claim_due(session, utcnow())
        session.commit()
    for item in due:
        try:
            sent = service.send(client, item, allow_private=settings.webhook_allow_private, now=utcnow(),
                                deadline_s=settings.webhook_timeout_s)
        except Exception as exc:  # noqa: BLE001 - one bad webhook must not stop the others of the pass
            log.exception("webhook of job %s: the attempt failed", item.job_id)
            sent = service.Sent(None, f"{type(exc).__name__}: {exc}"[:500], 0, final=False)
        with ctx.sessions() as session:
            state = service.record(session, item, sent, utcnow(), settings.webhook_retry_s)
            session.commit()
        log.info("webhook of job %s, attempt %d: %s (%s)", item.job_id, item.attempt, state,
                 sent.status_code if sent.error is None else sent.error)
    return len(due)


class WebhookSender(threading.Thread):
    """Delivers webhooks every ``webhook_every_s`` until stopped; its own thread, so that a slow
    receiver never delays the worker's heartbeats or its reconciler."""

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(name="ideabench-webhooks", daemon=True)
        self.ctx = ctx
        self._stop_event = threading.Event()

    def run(self) -> None:
        timeout = httpx.Timeout(self.ctx.settings.webhook_timeout_s)
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
            while not self._stop_event.is_set():
                try:
                    busy = deliver_due(self.ctx, client)
                except Exception:  # the DB may be briefly away; keep the thread alive
                    log.warning("webhook pass failed", exc_info=True)
                    busy = 0
                if not busy and self._stop_event.wait(self.ctx.settings.webhook_every_s):
                    return

    def stop(self) -> None:
        """End the thread after its current pass."""
        self._stop_event.set()
