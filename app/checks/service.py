"""Checks before the queue: made by the API, taken by a worker's check thread, answered once.

The database is the queue (no broker message): a worker's ``CheckRunner`` claims the oldest
pending check with a compare-and-set, so a check waits for no job (a worker checks while it
judges) and is run by one worker. A check makes no job and counts against no job cap; a key
has at most ``MAX_OPEN`` checks open at once."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.checks.models import CheckStatus, IdeaCheck
from app.checks.schemas import CheckLinks, CheckView, IdeaCheckRequest
from app.db import db_now
from app.errors import ApiCode, ApiError
from app.ids import new_id
from app.jobs import service as jobs_service
from app.jobs.schemas import IdeaSubmission, JobError
from app.keys.deps import Caller
from app.settings import Settings
from app.tracks import service as tracks_service
from bench.catalog import is_builtin
from bench.errors import BenchError, ErrorCode

MAX_OPEN = 2  # pending or running checks per key


def create(session: Session, caller: Caller, body: IdeaCheckRequest, settings: Settings) -> IdeaCheck:
    """The static checks of a submission, then a pending check for a worker; raises
    ``BenchError`` (what a submission would get) or ``ApiError``. The caller commits."""
    if not is_builtin(body.track):
        raise BenchError(ErrorCode.UNKNOWN_TRACK, f"Checks run on built-in tracks; {body.track!r} is not one.",
                         "Submit the idea to a custom track as a job (POST /v1/ideas): its errors come back the "
                         "same way, as the job's error.")
    card = tracks_service.runnable_builtin(body.track, tracks_service.live_workers(session, settings))
    jobs_service.validate_submission(IdeaSubmission(**body.model_dump()), settings, body.track, card)
    open_checks = session.scalar(select(func.count()).select_from(IdeaCheck).where(
        IdeaCheck.submitter_id == caller.key_id,
        IdeaCheck.status.in_([CheckStatus.PENDING.value, CheckStatus.RUNNING.value])))
    if (open_checks or 0) >= MAX_OPEN:
        raise ApiError(429, ApiCode.TOO_MANY_CHECKS, f"This key has {open_checks} checks open; at most {MAX_OPEN}.",
                       headers={"Retry-After": "5"})
    row = IdeaCheck(id=new_id("chk"), submitter_id=caller.key_id, track=body.track,
                    status=CheckStatus.PENDING.value, submission=body.model_dump(exclude={"track"}),
                    created_at=db_now(session))
    session.add(row)
    return row


def get(session: Session, caller: Caller, check_id: str) -> IdeaCheck:
    """The caller's check (an operator's: any); 404 ``check_not_found`` otherwise."""
    row = session.get(IdeaCheck, check_id)
    if row is None or not (caller.is_operator or row.submitter_id == caller.key_id):
        raise ApiError(404, ApiCode.CHECK_NOT_FOUND, f"No check {check_id!r} of this key.")
    return row


def view(row: IdeaCheck) -> CheckView:
    error = JobError(**row.error) if row.error else None
    return CheckView(check_id=row.id, status=row.status, track=row.track,  # type: ignore[arg-type]
                     created_at=row.created_at, finished_at=row.finished_at, result=row.result, error=error,
                     links=CheckLinks(self=f"/v1/checks/{row.id}", submit="/v1/ideas"))


def claim_next(session: Session, worker: str) -> IdeaCheck | None:
    """The oldest pending check, now running for ``worker`` (None when there is none, or another
    worker claimed it first). Commits."""
    now = db_now(session)
    candidate = session.scalar(select(IdeaCheck.id).where(IdeaCheck.status == CheckStatus.PENDING.value)
                               .order_by(IdeaCheck.created_at).limit(1))
    if candidate is None:
        return None
    claimed = session.execute(update(IdeaCheck).where(
        IdeaCheck.id == candidate, IdeaCheck.status == CheckStatus.PENDING.value,
    ).values(status=CheckStatus.RUNNING.value, worker=worker[:200], started_at=now)).rowcount  # type: ignore[attr-defined]
    session.commit()
    return session.get(IdeaCheck, candidate) if claimed == 1 else None


def finish(session: Session, check_id: str, result: dict[str, Any] | None, error: dict[str, Any] | None) -> None:
    """Store a running check's answer (passed with ``result``, or failed with ``error``). Commits."""
    session.execute(update(IdeaCheck).where(
        IdeaCheck.id == check_id, IdeaCheck.status == CheckStatus.RUNNING.value,
    ).values(status=(CheckStatus.FAILED if error else CheckStatus.PASSED).value, result=result, error=error,
             finished_at=db_now(session)))
    session.commit()


def expire(session: Session, pending_s: float, running_s: float) -> int:
    """End checks nobody will answer: pending longer than ``pending_s`` (no worker may judge) or
    running longer than ``running_s`` (their worker died). Commits; returns how many."""
    now = db_now(session)
    ended = 0
    for status, age, message, hint in (
        (CheckStatus.PENDING, pending_s, "No worker took the check.",
         "GET /readyz/judging says whether a worker may judge; retry once one does."),
        (CheckStatus.RUNNING, running_s, "The worker running the check stopped before it answered.",
         "Retry the check."),
    ):
        stamp = IdeaCheck.created_at if status is CheckStatus.PENDING else IdeaCheck.started_at
        ended += session.execute(update(IdeaCheck).where(
            IdeaCheck.status == status.value, stamp < now - dt.timedelta(seconds=age),
        ).values(status=CheckStatus.FAILED.value, finished_at=now,
                 error={"code": ApiCode.NOT_READY.value, "message": message, "hint": hint})).rowcount  # type: ignore[attr-defined]
    session.commit()
    return ended
