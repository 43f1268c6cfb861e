"""Worker-side state transitions of a job, each a conditional UPDATE; never commits.

A claim is fenced by ``(worker_id, attempts)``: every later write by the worker
matches the job only while it still holds that exact claim, so two deliveries of
one message never both run it, and a worker whose lease was taken over (it was
presumed dead) can no longer finish the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, func, select, update
from sqlalchemy.orm import Session

from app.jobs.models import Job, JobStatus
from app.reports import repository as reports_repository
from app.reports.models import Report


@dataclass(frozen=True)
class Claim:
    """This worker's hold on a job: the fencing token of all its writes."""

    job_id: str
    worker_id: str
    attempt: int


@dataclass(frozen=True)
class Beat:
    """The outcome of a heartbeat."""

    owned: bool
    cancel_requested: bool


def _rowcount(result: Any) -> int:
    return int(result.rowcount)


def _owned(claim: Claim) -> ColumnElement[bool]:
    return and_(
        Job.id == claim.job_id,
        Job.status == JobStatus.RUNNING.value,
        Job.worker_id == claim.worker_id,
        Job.attempts == claim.attempt,
    )


def claim_job(session: Session, job_id: str, worker_id: str, now: datetime, lease_s: float) -> Claim | None:
    """``queued -> running`` for this worker; None when someone else has it or it ended."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.QUEUED.value, Job.cancel_requested.is_(False))
        .values(
            status=JobStatus.RUNNING.value,
            worker_id=worker_id,
            attempts=Job.attempts + 1,
            lease_until=now + timedelta(seconds=lease_s),
            heartbeat_at=now,
            started_at=now,
            stage="starting",
            runs_done=0,
            runs_total=None,
            eta_s=None,
            runs_at_most=None,
            eta_max_s=None,
        )
    )
    if _rowcount(result) != 1:
        return None
    attempt = session.scalar(select(Job.attempts).where(Job.id == job_id))
    return Claim(job_id=job_id, worker_id=worker_id, attempt=int(attempt or 0))


def heartbeat(session: Session, claim: Claim, now: datetime, lease_s: float) -> Beat:
    """Extend the lease; report whether we still own the job and whether to cancel."""
    result = session.execute(
        update(Job).where(_owned(claim)).values(lease_until=now + timedelta(seconds=lease_s), heartbeat_at=now)
    )
    if _rowcount(result) != 1:
        return Beat(owned=False, cancel_requested=False)
    cancel = session.scalar(select(Job.cancel_requested).where(Job.id == claim.job_id))
    return Beat(owned=True, cancel_requested=bool(cancel))


def write_progress(
    session: Session, claim: Claim, *, stage: str, done: int, total: int | None, eta_s: float | None,
    message: str, at_most: int | None = None, eta_max_s: float | None = None,
) -> bool:
    """Record the protocol's progress; False when the claim was lost."""
    result = session.execute(
        update(Job)
        .where(_owned(claim))
        .values(stage=stage[:32], runs_done=done, runs_total=total, eta_s=eta_s, progress_message=message[:500],
                runs_at_most=at_most, eta_max_s=eta_max_s)
    )
    return _rowcount(result) == 1


def finish_succeeded(session: Session, claim: Claim, report: Report, now: datetime) -> bool:
    """Mark the job succeeded and stage its report, together; False when the claim was lost.

    The caller commits both (and the verdict count) in one transaction;
    ``reports.job_id`` is unique, so even a broken fence could not store a
    second report.
    """
    result = session.execute(
        update(Job)
        .where(_owned(claim))
        .values(status=JobStatus.SUCCEEDED.value, report_id=report.id, finished_at=now, stage="done",
                lease_until=None, eta_s=0.0, eta_max_s=0.0, runs_at_most=Job.runs_total,
                progress_message="report stored")
    )
    if _rowcount(result) != 1:
        return False
    session.add(report)
    session.flush()
    reports_repository.count_verdict(session, report)
    return True


def finish_unsuccessful(
    session: Session, claim: Claim, status: JobStatus, error: dict[str, str], now: datetime
) -> bool:
    """Mark the job errored or cancelled with ``error`` (code, message, hint)."""
    result = session.execute(
        update(Job)
        .where(_owned(claim))
        .values(
            status=status.value,
            finished_at=now,
            lease_until=None,
            error_code=error["code"],
            error_message=error["message"],
            error_hint=error["hint"],
        )
    )
    return _rowcount(result) == 1


def expired_leases(session: Session, now: datetime) -> list[Job]:
    """Running jobs whose worker stopped heartbeating."""
    stmt = select(Job).where(Job.status == JobStatus.RUNNING.value, Job.lease_until < now)
    return list(session.scalars(stmt))


def release_expired(
    session: Session, job: Job, now: datetime, status: JobStatus, error: dict[str, str] | None = None
) -> bool:
    """Take an expired lease away: back to ``queued``, or end the job with ``error``."""
    values: dict[str, Any] = {"status": status.value, "worker_id": None, "lease_until": None}
    if status is JobStatus.QUEUED:
        values.update(enqueued_at=now, stage=None)
    else:
        assert error is not None, "an ended job needs its error"
        values.update(finished_at=now, error_code=error["code"], error_message=error["message"],
                      error_hint=error["hint"])
    result = session.execute(
        update(Job)
        .where(
            Job.id == job.id,
            Job.status == JobStatus.RUNNING.value,
            Job.attempts == job.attempts,
            Job.lease_until < now,
        )
        .values(**values)
    )
    return _rowcount(result) == 1


def stale_queued(session: Session, enqueued_before: datetime, limit: int = 500) -> list[Job]:
    """Queued jobs whose message was sent long ago and nobody claimed (the message was lost).
    Jobs never sent are the dispatcher's (``take_unsent``)."""
    stmt = (
        select(Job)
        .where(Job.status == JobStatus.QUEUED.value, Job.enqueued_at < enqueued_before)
        .order_by(Job.created_at)
        .limit(limit)
    )
    return list(session.scalars(stmt))


def sent_queued(session: Session, queue: str) -> int:
    """Queued jobs of ``queue`` whose message was sent: each should be one message on the broker."""
    return int(session.scalar(select(func.count()).select_from(Job).where(
        Job.status == JobStatus.QUEUED.value, Job.queue == queue, Job.enqueued_at.is_not(None))) or 0)


def take_unsent(session: Session, now: datetime, limit: int = 500) -> list[tuple[str, str]]:
    """Stamp queued jobs never sent (``enqueued_at`` None: the API commits a job, it does not
    publish it) as sent now; returns their ``(id, queue)``, oldest first, for the caller to
    send once it has committed. A compare-and-set: of several dispatchers, one takes a job.

    The scan reads the partial index ``ix_jobs_unsent`` and takes no lock when there is
    nothing to send (on SQLite an UPDATE takes the write lock even when it matches no row).
    """
    ids = list(session.scalars(
        select(Job.id).where(Job.status == JobStatus.QUEUED.value, Job.enqueued_at.is_(None))
        .order_by(Job.created_at).limit(limit)
    ))
    if not ids:
        return []
    taken = session.execute(
        update(Job)
        .where(Job.id.in_(ids), Job.status == JobStatus.QUEUED.value, Job.enqueued_at.is_(None))
        .values(enqueued_at=now)
        .returning(Job.id, Job.queue, Job.created_at)
    ).all()
    return [(job_id, queue) for job_id, queue, _ in sorted(taken, key=lambda row: (row[2], row[0]))]


def mark_reenqueued(session: Session, job: Job, now: datetime) -> bool:
    """Stamp a re-send, unless another reconciler just did (compare-and-set on enqueued_at)."""
    previous = Job.enqueued_at == job.enqueued_at  # (IS NULL for None)
    result = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.status == JobStatus.QUEUED.value, previous)
        .values(enqueued_at=now)
    )
    return _rowcount(result) == 1
