"""Routes: submit an idea, read and list jobs, cancel a job."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.sse import EventSourceResponse, ServerSentEvent
from sqlalchemy.orm import Session

from app.db import SessionDep
from app.errors import ApiCode, ApiError, error_responses
from app.jobs import events, intake, repository, service
from app.jobs.models import STATUS_FILTER_HELP, Job, JobStatus, status_filter
from app.jobs.schemas import IdeaSubmission, JobAccepted, JobPage, JobView
from app.keys.deps import SubmitterDep

router = APIRouter(tags=["jobs"], responses=error_responses(401, 403, 429))

IdempotencyKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", max_length=200, description="The same key returns the same job."),
]


@router.post(
    "/v1/ideas",
    status_code=202,
    response_model=JobAccepted,
    responses=error_responses(409, 413, 422, 429),
)
async def submit_idea(
    body: IdeaSubmission,
    caller: SubmitterDep,
    request: Request,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobAccepted:
    """Submit an idea to judge; answers 202 with the queued job, its links and an estimate.

    The job is committed before the answer, not published: a worker's dispatcher sends it
    within ``dispatch_every_s`` (the database is the truth, the broker a wake-up call).
    Concurrent submissions are committed together (``app.jobs.intake``)."""
    state = request.app.state  # (read here, not as dependencies: FastAPI solves each per request)
    pending = await intake.prepare(
        caller, body, idempotency_key=idempotency_key, settings=state.settings, fair_use=state.fair_use,
        sessions=state.sessionmaker, request_id=getattr(request.state, "request_id", None),
        body_bytes=len(await request.body()),  # (read already, to parse it: cached)
    )
    submitted = await state.intake.submit(pending)
    job = submitted.job
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    view = service.job_view(job, queue_position=submitted.queue_position)
    return JobAccepted(
        **dict(view),
        estimate=submitted.estimate,
        idempotent_replay=submitted.replay,
    )


@router.get("/v1/jobs/{job_id}", response_model=JobView, responses=error_responses(404))
async def get_job(
    job_id: str, request: Request, session: SessionDep, caller: SubmitterDep,
    wait: Annotated[float | None, Query(ge=0, le=events.MAX_WAIT_S, description=(
        "Answer as soon as the job has ended, or after this many seconds (at most 60), "
        "whichever comes first: a long poll instead of polling every few seconds."))] = None,
) -> JobView:
    """A job's status, stage, progress, queue position, times, error and report link."""
    job = await run_in_threadpool(service.get_visible_job, session, job_id, caller)
    if wait:
        # No connection is held while waiting (wait_for_end reads with short sessions of its
        # own): 40 long polls of one key took every connection of the pool and stalled everyone.
        await run_in_threadpool(session.rollback)
        await events.wait_for_end(request.app.state.sessionmaker, job_id, wait,
                                  request.app.state.settings.long_poll_max_s)
        await run_in_threadpool(session.refresh, job)
    return await run_in_threadpool(_view_now, session, job)


def _view_now(session: Session, job: Job) -> JobView:
    position = repository.queue_position(session, job) if job.status == JobStatus.QUEUED.value else None
    return service.job_view(job, queue_position=position, session=session)


def _visible_job(job_id: str, session: SessionDep, caller: SubmitterDep) -> Job:
    """The job the caller may see (404 otherwise): a dependency, so that the answer is an
    error before a stream has started."""
    job = service.get_visible_job(session, job_id, caller)
    session.expunge(job)
    session.close()  # the stream reads with short sessions of its own: hold no connection for its life
    return job


@router.get(
    "/v1/jobs/{job_id}/events", response_class=EventSourceResponse, responses={
        **error_responses(404),
        200: {"description": "Server-Sent Events until the job ends: queued, stage, run, warning, end.",
              "content": {"text/event-stream": {"example": (
                  'id: 0\nevent: queued\ndata: {"job_id": "job_4be1", "status": "queued", "queue_position": 2}\n\n'
                  'id: 1\nevent: stage\ndata: {"job_id": "job_4be1", "seq": 1, "stage": "sweep", "runs_total": 40}\n\n'
                  'id: 2\nevent: run\ndata: {"job_id": "job_4be1", "seq": 2, "arm": "idea", "stage": "sweep", '
                  '"cfg": {"lr": 0.01}, "seed_index": 0, "seconds": 0.4, "runs_done": 1}\n\n'
                  'id: 41\nevent: end\ndata: {"job_id": "job_4be1", "status": "succeeded", '
                  '"system_verdict": "failed", "practical_verdict": "inconclusive", '
                  '"report": "/v1/jobs/job_4be1/report"}\n\n')}}},
    },
)
async def job_events(
    request: Request, job: Annotated[Job, Depends(_visible_job)],
    last_event_id: Annotated[int | None, Header(alias="Last-Event-ID", ge=0, le=2**63 - 1, description=(
        "Resume after this event id (what a reconnecting EventSource sends).")), ] = None,
    after: Annotated[int | None, Query(ge=0, le=2**63 - 1, description="The same as Last-Event-ID, for clients "
                                       "that cannot set headers.")] = None,
) -> AsyncIterator[ServerSentEvent]:
    """The job's live progress as Server-Sent Events, from the start or after ``Last-Event-ID``:
    ``queued`` (id 0), ``stage``, ``run`` (arm, stage, config, seed index, seconds; no metric),
    ``warning``, and ``end`` (status, verdicts and report link, or the error), then the stream
    closes. Events are stored: a reconnect loses and repeats nothing; the stream reads them
    with its own sessions. A stream open for 5 minutes without its end is closed by the server;
    reconnect with ``Last-Event-ID`` (EventSource and the Python client do)."""
    resume = last_event_id if last_event_id is not None else after
    async for event in events.stream(request.app.state.sessionmaker, job, resume,
                                     request.app.state.settings.stream_max_s):
        yield event


# ISO 8601 with a zone; a datetime query parameter would also take "0" (the epoch), off its schema.
SINCE_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})$"


def _moment(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(422, ApiCode.VALIDATION_ERROR, f"since: {text!r} is not a moment") from None


@router.get("/v1/jobs", response_model=JobPage, responses=error_responses(400, 422))
def list_jobs(
    session: SessionDep,
    caller: SubmitterDep,
    status: Annotated[JobStatus | Literal["failed"] | None, Query(description=STATUS_FILTER_HELP)] = None,
    track: Annotated[str | None, Query(max_length=64)] = None,
    since: Annotated[str | None, Query(pattern=SINCE_PATTERN, max_length=40, description=(
        "Only jobs created at or after this moment (ISO 8601 with a time zone, e.g. "
        "2026-12-04T00:00:00Z)."))] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=2000,
                                        description="next_cursor of the previous page")] = None,
) -> JobPage:
    """Jobs newest first, filtered by status, track and creation time; agents see their own,
    operators all. Each carries its error (code, message, hint) when it ended without a report."""
    jobs, next_cursor = service.list_visible(
        session, caller, status=status_filter(status), track=track, limit=limit, cursor=cursor,
        since=_moment(since),
    )
    return JobPage(items=[service.job_view(j) for j in jobs], next_cursor=next_cursor)


@router.post(
    "/v1/jobs/{job_id}/cancel", status_code=202, response_model=JobView, responses=error_responses(404, 409)
)
def cancel_job(job_id: str, session: SessionDep, caller: SubmitterDep) -> JobView:
    """Cancel a job: a queued one ends at once; a running one's sandbox is stopped by its worker."""
    job = service.cancel(session, job_id, caller)
    session.commit()
    return service.job_view(job)
