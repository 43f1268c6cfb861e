"""Routes: submit an idea, read and list jobs, cancel a job."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response

from app.db import SessionDep
from app.deps import EstimatorDep, QueueDep, SettingsDep
from app.errors import error_responses
from app.jobs import repository, service
from app.jobs.models import JobStatus
from app.jobs.schemas import IdeaSubmission, JobAccepted, JobPage, JobView
from app.keys.deps import SubmitterDep

router = APIRouter(tags=["jobs"], responses=error_responses(401, 403))

IdempotencyKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", max_length=200, description="The same key returns the same job."),
]


@router.post(
    "/v1/ideas",
    status_code=202,
    response_model=JobAccepted,
    responses=error_responses(409, 413, 422),
)
def submit_idea(
    body: IdeaSubmission,
    session: SessionDep,
    caller: SubmitterDep,
    queue: QueueDep,
    settings: SettingsDep,
    estimator: EstimatorDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobAccepted:
    """Submit an idea to judge; answers 202 with the queued job, its links and an estimate."""
    submitted = service.submit(
        session, caller, body, idempotency_key=idempotency_key, settings=settings, estimator=estimator
    )
    job = submitted.job
    session.commit()
    if not submitted.replay:  # commit, then enqueue: never a message for a rolled-back job
        queue.enqueue(job.id, job.queue)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    view = service.job_view(job, queue_position=submitted.queue_position)
    return JobAccepted(
        **dict(view),
        estimate=submitted.estimate,
        idempotent_replay=submitted.replay,
    )


@router.get("/v1/jobs/{job_id}", response_model=JobView, responses=error_responses(404))
def get_job(job_id: str, session: SessionDep, caller: SubmitterDep) -> JobView:
    """A job's status, stage, progress, queue position, times, error and report link."""
    job = service.get_visible_job(session, job_id, caller)
    position = repository.queue_position(session, job) if job.status == JobStatus.QUEUED.value else None
    return service.job_view(job, queue_position=position)


@router.get("/v1/jobs", response_model=JobPage, responses=error_responses(400, 422))
def list_jobs(
    session: SessionDep,
    caller: SubmitterDep,
    status: JobStatus | None = None,
    track: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> JobPage:
    """Jobs newest first, filtered by status and track; agents see their own, operators all."""
    jobs, next_cursor = service.list_visible(
        session, caller, status=status, track=track, limit=limit, cursor=cursor
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
