"""A job's event stream and waiting for a job's end, read from the database.

Events: ``queued`` (id 0, from the job row: its queue position when the stream opens),
then the stored ``stage`` / ``run`` / ``warning`` events (ids 1, 2, ... per job, written by
the worker that holds the lease: ``workers.heartbeat.ProgressWriter``), then ``end`` (from
the job row once it has ended: status, verdicts and report link, or the error; its id is
one past the last stored event). Everything comes from the database, so any API process
serves any stream, the embedded service and Postgres alike, and a client that reconnects
with ``Last-Event-ID`` gets exactly the events after it: nothing lost, nothing repeated.

Streams poll the database (every ``POLL_S``): the one thing every deployment shares, with
no broker of its own to keep in step. FastAPI's ``EventSourceResponse`` does the wire
format and the keep-alive comments.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.sse import ServerSentEvent
from sqlalchemy.orm import Session

from app.jobs import repository
from app.jobs.models import FINISHED, Job, JobStatus
from app.reports import repository as reports_repository

POLL_S = 0.5
MAX_WAIT_S = 60.0
BATCH = 500  # stored events read per poll


def _finished(job: Job) -> bool:
    return JobStatus(job.status) in FINISHED


def end_data(session: Session, job: Job) -> dict[str, Any]:
    """The ``end`` event's data: status, and the verdicts and report link, or the error."""
    data: dict[str, Any] = {"job_id": job.id, "status": job.status,
                            "finished_at": job.finished_at.isoformat() if job.finished_at else None}
    report = reports_repository.get_report_of_job(session, job.id) if job.status == "succeeded" else None
    if report is not None:
        data.update(system_verdict=report.system_verdict, practical_verdict=report.practical_verdict,
                    report_id=report.id, report=f"/v1/jobs/{job.id}/report")
    if job.error_code is not None:
        data["error"] = {"code": job.error_code, "message": job.error_message or "", "hint": job.error_hint or ""}
    return data


def _read(session_factory: Callable[[], Session], job_id: str, after: int) -> tuple[list[ServerSentEvent], bool]:
    """The job's events after ``after`` and whether the stream is over. The job row is read
    first: a job seen ended has already stored every event it will ever have."""
    with session_factory() as session:
        job = repository.get_job(session, job_id)
        assert job is not None
        ended = _finished(job)
        stored = repository.events_after(session, job_id, after, limit=BATCH)
        # Only the worker that holds a job's lease stores its events (workers.heartbeat), so
        # each was emitted while the job ran: replayed, it says so, not the status of now.
        events = [ServerSentEvent(id=str(e.seq), event=e.kind, data={
            "job_id": job_id, "seq": e.seq, "attempt": e.attempt, "at": e.created_at.isoformat(), **e.data,
            "status": JobStatus.RUNNING.value,
        }) for e in stored]
        if not ended or len(stored) == BATCH:  # still running, or more stored events to send first
            return events, False
        end_id = (stored[-1].seq if stored else repository.last_event_seq(session, job_id)) + 1
        if end_id > after:  # (a client that already has the end gets nothing more)
            events.append(ServerSentEvent(id=str(end_id), event="end", data=end_data(session, job)))
    return events, True


def _queued(session_factory: Callable[[], Session], job: Job) -> ServerSentEvent:
    with session_factory() as session:
        position = repository.queue_position(session, job) if job.status == JobStatus.QUEUED.value else None
    # the event says what it records: the job queued (its status now is in the later events)
    return ServerSentEvent(id="0", event="queued", data={
        "job_id": job.id, "status": JobStatus.QUEUED.value, "queue_position": position, "track": job.track,
        "created_at": job.created_at.isoformat(),
    })


async def stream(session_factory: Callable[[], Session], job: Job, last_event_id: int | None,
                 max_s: float = 300.0) -> AsyncIterator[ServerSentEvent]:
    """The job's events after ``last_event_id`` (None: from the start), until its ``end``, or
    for ``max_s`` seconds (a client resumes with ``Last-Event-ID``)."""
    deadline = time.monotonic() + max_s
    after = -1 if last_event_id is None else last_event_id
    if after < 0:
        yield await run_in_threadpool(_queued, session_factory, job)
        after = 0
    while True:
        events, over = await run_in_threadpool(_read, session_factory, job.id, after)
        for event in events:
            yield event
            after = int(event.id or after)
        if over or time.monotonic() >= deadline:
            return
        await asyncio.sleep(POLL_S)


def _ended(session_factory: Callable[[], Session], job_id: str) -> bool:
    with session_factory() as session:
        job = repository.get_job(session, job_id)
        return job is None or _finished(job)


async def wait_for_end(session_factory: Callable[[], Session], job_id: str, wait_s: float,
                       max_s: float = MAX_WAIT_S) -> None:
    """Return once the job has ended or ``wait_s`` (at most ``max_s``) have passed; polls
    without holding a worker thread between polls."""
    deadline = time.monotonic() + min(max(wait_s, 0.0), max_s, MAX_WAIT_S)
    while not await run_in_threadpool(_ended, session_factory, job_id):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        await asyncio.sleep(min(POLL_S / 2, left))
