"""The service's operating state, read from the database: what ``GET /metrics`` exports and
the operator's dashboard page shows (one set of queries for both; the database is the truth,
so every API process answers the same)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.health.models import WorkerBeat
from app.jobs.models import Job, JobEvent, JobStatus

ENDED_WINDOW = dt.timedelta(hours=1)


@dataclass(frozen=True)
class StageSpan:
    """One stage of one job: from its ``stage`` event to the next one (or the job's end)."""

    job_id: str
    stage: str
    started_at: dt.datetime
    seconds: float


@dataclass(frozen=True)
class ServiceState:
    """Counts and ages at one moment."""

    now: dt.datetime
    jobs: list[tuple[str, str, int]]  # (status, track, count)
    queue_depth: dict[str, int]
    failures: dict[str, int]  # errored jobs by error code
    webhooks: dict[str, int]
    beats: list[WorkerBeat]
    durations_s: list[float]  # start to end of the jobs that ended within ENDED_WINDOW
    stages: list[StageSpan] = field(default_factory=list)  # the stages of those jobs

    def heartbeat_age_s(self, beat: WorkerBeat) -> float:
        return (self.now - beat.seen_at).total_seconds()


def stage_spans(events: list[tuple[str, dt.datetime, str]], ends: dict[str, dt.datetime | None]
                ) -> list[StageSpan]:
    """Spans from ``(job_id, at, stage)`` stage events in order; a stage lasts until the job's
    next stage event, its last one until the job's end (none while it runs)."""
    by_job: dict[str, list[tuple[dt.datetime, str]]] = defaultdict(list)
    for job_id, at, stage in events:
        by_job[job_id].append((at, stage))
    spans = []
    for job_id, marks in by_job.items():
        marks.sort(key=lambda m: m[0])
        bounds = [m[0] for m in marks[1:]] + [ends.get(job_id)]
        for (at, stage), until in zip(marks, bounds, strict=True):
            if until is not None:
                spans.append(StageSpan(job_id, stage, at, max(0.0, (until - at).total_seconds())))
    return spans


def job_stages(session: Session, job_ids: list[str], ends: dict[str, dt.datetime | None],
               attempt: int | None = None) -> list[StageSpan]:
    """The stage spans of ``job_ids`` (``ends``: each job's end, None while it runs), of one
    ``attempt`` when given (a retried job's earlier attempts were cut short)."""
    if not job_ids:
        return []
    stmt = select(JobEvent.job_id, JobEvent.created_at, JobEvent.data).where(
        JobEvent.job_id.in_(job_ids), JobEvent.kind == "stage")
    if attempt is not None:
        stmt = stmt.where(JobEvent.attempt == attempt)
    rows = session.execute(stmt.order_by(JobEvent.job_id, JobEvent.seq)).all()
    events = [(job_id, at, str(data.get("stage", "?"))) for job_id, at, data in rows if isinstance(data, dict)]
    return stage_spans(events, ends)


def read_state(session: Session, now: dt.datetime) -> ServiceState:
    """The state now: jobs, queues, failures, webhooks, workers, and the last hour's durations."""
    jobs = [(s, t, n) for s, t, n in session.execute(
        select(Job.status, Job.track, func.count()).group_by(Job.status, Job.track))]
    depth = {q: n for q, n in session.execute(select(Job.queue, func.count()).where(
        Job.status == JobStatus.QUEUED.value).group_by(Job.queue))}
    failures = {(c or "unknown"): n for c, n in session.execute(select(Job.error_code, func.count()).where(
        Job.status == JobStatus.ERRORED.value).group_by(Job.error_code))}
    webhooks = {(s or "none"): n for s, n in session.execute(select(Job.callback_state, func.count()).where(
        Job.callback_state.is_not(None)).group_by(Job.callback_state))}
    beats = list(session.scalars(select(WorkerBeat).order_by(WorkerBeat.id)))
    ended = session.execute(select(Job.id, Job.started_at, Job.finished_at).where(
        Job.finished_at >= now - ENDED_WINDOW, Job.started_at.is_not(None))).all()
    durations = [(f - s).total_seconds() for _, s, f in ended if s is not None and f is not None]
    stages = job_stages(session, [j for j, _, _ in ended], {j: f for j, _, f in ended})
    return ServiceState(now, jobs, depth, failures, webhooks, beats, durations, stages)


def running_jobs(session: Session, limit: int = 200) -> list[Job]:
    """Running jobs, oldest start first."""
    return list(session.scalars(select(Job).where(Job.status == JobStatus.RUNNING.value)
                                .order_by(Job.started_at, Job.id).limit(limit)))


def failures_by_day(session: Session, since: dt.datetime) -> dict[dt.date, dict[str, int]]:
    """Failed jobs by day (UTC) of their end and error code, since ``since``."""
    out: dict[dt.date, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for finished, code in session.execute(select(Job.finished_at, Job.error_code).where(
            Job.status == JobStatus.ERRORED.value, Job.finished_at >= since)):
        if finished is not None:
            out[finished.date()][code or "unknown"] += 1
    return {day: dict(codes) for day, codes in sorted(out.items())}
