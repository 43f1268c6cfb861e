"""Submitting ideas, reading and cancelling jobs; the route commits."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app import pagination
from app.db import utcnow
from app.errors import ApiCode, ApiError
from app.jobs import repository
from app.jobs.estimate import Estimator, grid_size
from app.jobs.models import FINISHED, Job, JobStatus
from app.jobs.schemas import Estimate, IdeaSubmission, JobError, JobLinks, JobProgress, JobView
from app.keys.deps import Caller
from app.keys.roles import Role
from app.settings import Settings
from app.tracks import service as tracks_service
from app.webhooks import service as webhooks
from bench.card import TrackSettings
from bench.catalog import is_builtin
from bench.contract import (
    check_baseline_allowed,
    check_hparams,
    check_measurable,
    check_source,
    declared_hparams,
)
from bench.errors import DEFAULT_HINTS, ErrorCode
from bench.family import family_of
from bench.plan import RunPlan, plan_for_card

JOBS_SORT = "-created_at"


@dataclass(frozen=True)
class Submitted:
    """A job made (or found again) by a submission."""

    job: Job
    replay: bool
    estimate: Estimate
    queue_position: int | None


def request_digest(body: IdeaSubmission) -> str:
    """sha256 of the submission's canonical JSON (tells replays from key reuse)."""
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Checked:
    """What the static checks learned: the track (id to store, card) and the effective sweep grid."""

    track: str
    card: dict[str, Any]
    hparams: Any
    family: str
    matched_configs: int | None = None  # a matched baseline's HPARAMS grid size (its check's configs)


def validate_submission(body: IdeaSubmission, settings: Settings, track: str, card: dict[str, Any]) -> Checked:
    """Static checks before queuing, for the resolved ``track`` (``tracks.service.resolve_for_job``);
    raises ``BenchError`` (``ApiError`` for the callback URL)."""
    if body.callback_url is not None:
        try:
            webhooks.check_url(body.callback_url, allow_private=settings.webhook_allow_private)
        except webhooks.CallbackRefused as exc:
            raise ApiError(422, ApiCode.INVALID_CALLBACK_URL, str(exc)) from None
    max_configs = TrackSettings.of(card).max_configs
    info = check_source(body.code, role="idea")
    if body.baseline_code is not None:
        check_baseline_allowed(not is_builtin(track))
    matched = matched_configs(body.baseline_code)  # and the baseline's static checks
    literals = info.literals
    hparams = declared_hparams(info, body.hparams, matched=body.baseline_code is not None)
    if hparams is not None:
        check_hparams(hparams, max_configs=max_configs)
    mechanism = body.mechanism if body.mechanism is not None else literals.get("MECHANISM")
    if mechanism is not None:
        check_measurable(mechanism, "measure" in info.defines)
    # Last: the family normalizes the parsed tree in place (one parse for both).
    return Checked(track=track, card=card, hparams=hparams, family=family_of(body.code, info.tree),
                   matched_configs=matched)


def matched_configs(baseline_code: str | None) -> int | None:
    """A matched baseline's HPARAMS grid size (the configs its check sweeps); None without one.
    Also the baseline's static checks (``check_source``), raising ``BenchError``."""
    if baseline_code is None:
        return None
    return grid_size(check_source(baseline_code, role="baseline").literals.get("HPARAMS"))


def run_plan(card: dict[str, Any], hparams: Any, n_seeds: int | None, matched: int | None) -> RunPlan:
    """What a job of this submission trains (``bench.plan``): ``planned`` always, and ``at_most``
    with every part the protocol adds only when its results call for it (an edge step of the lr
    grid, the baseline at the idea's learning rate, a confirmation). ``matched``: a matched
    baseline's HPARAMS grid size (``matched_configs``)."""
    return plan_for_card(card, grid_size(hparams), n_seeds, matched_configs=matched)


def replay(session: Session, job: Job, digest: str, estimator: Estimator) -> Submitted:
    """The answer to a retry of the request that made ``job`` (409 when its body differs)."""
    if job.request_sha256 != digest:
        raise ApiError(
            409,
            ApiCode.IDEMPOTENCY_CONFLICT,
            f"This Idempotency-Key already made job {job.id} from a different request body.",
        )
    card = tracks_service.card_of_job_track(session, job.track)
    planned = run_plan(card, job.hparams, job.n_seeds, matched_configs(job.baseline_code))
    return submitted(session, job, True, planned, card, estimator)


def submitted(
    session: Session, job: Job, replay: bool, planned: RunPlan, card: dict[str, Any], estimator: Estimator,
) -> Submitted:
    """The answer for ``job``: its estimate and queue position (a new job's from a cached depth);
    ``planned``: its run plan (``run_plan``), the runs of a started job as it counted them."""
    timing = estimator.timing(session, job.track, card)
    runs = job.runs_total or planned.planned
    at_most = max(planned.at_most, runs)
    run_s = timing.seconds(runs)
    queued = job.status == JobStatus.QUEUED.value
    ahead = None
    if queued:
        # A new job's position comes from a briefly cached queue depth; a replay's is exact.
        ahead = repository.queue_position(session, job) if replay else estimator.position_of_new(session, job)
    estimate = Estimate(runs_total=runs, run_s=round(run_s, 1), wait_s=round((ahead or 0) * run_s, 1),
                        basis=timing.basis, confirmation_runs=planned.confirmation_max, runs_at_most=at_most,
                        run_s_max=round(timing.seconds(at_most), 1),
                        fixed_s=round(timing.fixed_s, 1), seconds_per_run=round(timing.run_s, 3))
    return Submitted(job=job, replay=replay, estimate=estimate, queue_position=ahead)


def get_visible_job(session: Session, job_id: str, caller: Caller) -> Job:
    """The job, if the caller may see it (agents: their own); 404 ``job_not_found`` otherwise."""
    job = repository.get_job(session, job_id) if len(job_id) <= 64 else None
    if job is None or (not caller.is_operator and job.submitter_id != caller.key_id):
        raise ApiError(404, ApiCode.JOB_NOT_FOUND, f"No job with id {job_id!r}.")
    return job


def get_job_for_report(session: Session, job_id: str, caller: Caller) -> Job:
    """The job whose report is asked for: agents only their own, viewers and operators any."""
    if caller.role is Role.AGENT:
        return get_visible_job(session, job_id, caller)
    job = repository.get_job(session, job_id) if len(job_id) <= 64 else None
    if job is None:
        raise ApiError(404, ApiCode.JOB_NOT_FOUND, f"No job with id {job_id!r}.")
    return job


def list_visible(
    session: Session, caller: Caller, *, status: JobStatus | None, track: str | None, limit: int,
    cursor: str | None, since: datetime | None = None,
) -> tuple[list[Job], str | None]:
    """A page of jobs the caller may see, newest first, and the next cursor."""
    after = None
    if cursor is not None:
        value, row_id = pagination.decode_cursor(cursor, JOBS_SORT)
        after = (pagination.cursor_datetime(value), row_id)
    jobs = repository.list_jobs(
        session,
        limit=limit + 1,
        after=after,
        status=status.value if status else None,
        track=track,
        submitter_id=None if caller.is_operator else caller.key_id,
        since=since,
    )
    more = len(jobs) > limit
    jobs = jobs[:limit]
    next_cursor = pagination.encode_cursor(JOBS_SORT, jobs[-1].created_at, jobs[-1].id) if more else None
    return jobs, next_cursor


def cancel(session: Session, job_id: str, caller: Caller, now: datetime | None = None) -> Job:
    """Cancel a queued job at once, or ask the worker to stop a running one."""
    job = get_visible_job(session, job_id, caller)
    if JobStatus(job.status) in FINISHED:
        raise ApiError(409, ApiCode.JOB_FINISHED, f"Job {job_id} already ended as {job.status}.")
    error = {
        "error_code": ErrorCode.CANCELLED.value,
        "error_message": f"Cancelled by {caller.key_id}.",
        "error_hint": DEFAULT_HINTS[ErrorCode.CANCELLED],
    }
    if not repository.cancel_queued(session, job_id, now or utcnow(), error):
        repository.request_cancel_running(session, job_id)
    session.refresh(job)
    return job


def job_view(job: Job, queue_position: int | None = None, session: Session | None = None) -> JobView:
    """The API's view of a job row; with ``session``, its webhook deliveries too."""
    base = f"/v1/jobs/{job.id}"
    error = None
    if job.error_code is not None:
        error = JobError(code=job.error_code, message=job.error_message or "", hint=job.error_hint or "")
    return JobView(
        job_id=job.id,
        status=JobStatus(job.status),
        track=job.track,
        name=job.name,
        device=job.queue,
        submitter=job.submitter_id,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        queue_position=queue_position,
        progress=JobProgress(
            stage=job.stage, runs_done=job.runs_done, runs_total=job.runs_total, eta_s=job.eta_s,
            runs_at_most=job.runs_at_most, eta_max_s=job.eta_max_s,
            message=job.progress_message,
        ),
        attempts=job.attempts,
        cancel_requested=job.cancel_requested,
        error=error,
        report_id=job.report_id,
        links=JobLinks(self=base, report=f"{base}/report", cancel=f"{base}/cancel"),
        callback=webhooks.view(job, webhooks.attempts_of(session, job.id)
                               if session is not None and job.callback_url else None),
    )
