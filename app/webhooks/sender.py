"""The webhook sender: a thread of every API process that delivers due job-end webhooks
(app/webhooks/service.py holds the policy, the message and the state).

It lives on the API tier, the one tier that may reach the internet: workers run submitted code
and have no egress but the database and the broker (docs/deploy.md, issue 28.8). Several API
processes may each run one; an attempt is claimed by one of them (``service.claim_due``)."""

from __future__ import annotations

import logging
import threading

import httpx
from sqlalchemy.orm import Session, sessionmaker

from app.db import utcnow
from app.settings import Settings
from app.webhooks import service

log = logging.getLogger("ideabench.webhooks")


def deliver_due(settings: Settings, sessions: sessionmaker[Session], client: httpx.Client) -> int:
    """One pass: claim the due attempts, send each, record each; returns how many were tried."""
    with sessions() as session:
        due = service.claim_due(session, utcnow())
        session.commit()
    for item in due:
        try:
            sent = service.send(client, item, allow_private=settings.webhook_allow_private, now=utcnow(),
                                deadline_s=settings.webhook_timeout_s)
        except Exception as exc:  # noqa: BLE001 - one bad webhook must not stop the others of the pass
            log.exception("webhook of job %s: the attempt failed", item.job_id)
            sent = service.Sent(None, f"{type(exc).__name__}: {exc}"[:500], 0, final=False)
        with sessions() as session:
            state = service.record(session, item, sent, utcnow(), settings.webhook_retry_s)
            session.commit()
        log.info("webhook of job %s, attempt %d: %s (%s)", item.job_id, item.attempt, state,
                 sent.status_code if sent.error is None else sent.error)
    return len(due)


class WebhookSender(threading.Thread):
    """Delivers webhooks every ``webhook_every_s`` until stopped; its own thread, so that a slow
    receiver never delays an answer of the API."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session]) -> None:
        super().__init__(name="ideabench-webhooks", daemon=True)
        self.settings = settings
        self.sessions = sessions
        self._stop_event = threading.Event()

    def run(self) -> None:
        timeout = httpx.Timeout(self.settings.webhook_timeout_s)
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
            while not self._stop_event.is_set():
                try:
                    busy = deliver_due(self.settings, self.sessions, client)
                except Exception:  # the DB may be briefly away; keep the thread alive
                    log.warning("webhook pass failed", exc_info=True)
                    busy = 0
                if not busy and self._stop_event.wait(self.settings.webhook_every_s):
                    return

    def stop(self) -> None:
        """End the thread after its current pass."""
        self._stop_event.set()
