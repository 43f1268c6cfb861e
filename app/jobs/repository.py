"""Queries on ``jobs`` for the API side; never commits."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app import pagination
from app.jobs.models import Job, JobEvent, JobStatus


def get_job(session: Session, job_id: str) -> Job | None:
    """A job by id."""
    return session.get(Job, job_id)


def list_jobs(
    session: Session,
    *,
    limit: int,
    after: tuple[datetime, str] | None,
    status: str | None = None,
    track: str | None = None,
    submitter_id: str | None = None,
    since: datetime | None = None,
) -> list[Job]:
    """Jobs newest first, ``limit`` of them after the keyset position ``after`` (created at or
    after ``since`` when given)."""
    stmt = select(Job)
    if since is not None:
        stmt = stmt.where(Job.created_at >= since)
    if status is not None:
        stmt = stmt.where(Job.status == status)
    if track is not None:
        stmt = stmt.where(Job.track == track)
    if submitter_id is not None:
        stmt = stmt.where(Job.submitter_id == submitter_id)
    if after is not None:
        stmt = stmt.where(pagination.after(Job.created_at, Job.id, after[0], after[1], True, False))
    stmt = stmt.order_by(*pagination.order_by(Job.created_at, Job.id, True, False)).limit(limit)
    return list(session.scalars(stmt))


def queue_position(session: Session, job: Job) -> int:
    """How many queued jobs of the same queue were created before ``job``."""
    stmt = select(func.count()).where(
        Job.status == JobStatus.QUEUED.value, Job.queue == job.queue, Job.created_at < job.created_at
    )
    return int(session.scalar(stmt) or 0)


def recent_durations(session: Session, track: str, limit: int = 20) -> list[tuple[float, int | None]]:
    """``(seconds, runs_total)`` of the track's latest succeeded jobs."""
    stmt = (
        select(Job.started_at, Job.finished_at, Job.runs_total)
        .where(Job.track == track, Job.status == JobStatus.SUCCEEDED.value)
        .order_by(Job.created_at.desc())
        .limit(limit)
    )
    out: list[tuple[float, int | None]] = []
    for started, finished, runs in session.execute(stmt):
        if started is not None and finished is not None:
            out.append(((finished - started).total_seconds(), runs))
    return out


def cancel_queued(session: Session, job_id: str, now: datetime, error: dict[str, Any]) -> bool:
    """``queued -> cancelled`` if still queued; True when this call did it."""
    stmt = (
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.QUEUED.value)
        .values(status=JobStatus.CANCELLED.value, finished_at=now, cancel_requested=True, **error)
    )
    return session.execute(stmt).rowcount == 1  # type: ignore[attr-defined]


def request_cancel_running(session: Session, job_id: str) -> bool:
    """Flag a running job for cancellation; its worker's heartbeat stops it."""
    stmt = (
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.RUNNING.value)
        .values(cancel_requested=True)
    )
    return session.execute(stmt).rowcount == 1  # type: ignore[attr-defined]


def append_events(session: Session, job_id: str, attempt: int, events: list[tuple[str, dict[str, Any]]],
                  now: datetime) -> None:
    """Stage ``events`` (kind, data) after the job's last one. Only the lease holder calls this,
    one writer at a time (``workers.heartbeat.ProgressWriter``), so ``seq`` is gap-free."""
    last = session.scalar(select(func.max(JobEvent.seq)).where(JobEvent.job_id == job_id)) or 0
    for offset, (kind, data) in enumerate(events, 1):
        session.add(JobEvent(job_id=job_id, seq=last + offset, kind=kind, attempt=attempt, data=data,
                             created_at=now))


def events_after(session: Session, job_id: str, after: int, limit: int = 500) -> list[JobEvent]:
    """The job's stored events with ``seq > after``, in order."""
    stmt = (select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.seq > after)
            .order_by(JobEvent.seq).limit(limit))
    return list(session.scalars(stmt))


def last_event_seq(session: Session, job_id: str) -> int:
    """The seq of the job's last stored event (0 when none)."""
    return int(session.scalar(select(func.max(JobEvent.seq)).where(JobEvent.job_id == job_id)) or 0)
