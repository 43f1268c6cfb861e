"""Run one job: claim it, judge it with heartbeat and progress, persist the outcome once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc

from app import request_id
from app.db import db_now
from app.jobs import leases
from app.jobs.estimate import deployment_timing
from app.jobs.leases import Claim
from app.jobs.models import Job, JobStatus
from app.reports.service import (
    InvalidReport,
    adopt_graph_family,
    attempts_block,
    build_report_row,
    mark_own_track,
    track_vouched,
)
from app.seeds import repository as seeds_repository
from app.tracks import service as tracks_service
from app.tracks.models import CustomTrackRow
from bench.errors import DEFAULT_HINTS, BenchError, ErrorCode
from bench.judge import JudgeRequest, judge
from workers.context import WorkerContext
from workers.heartbeat import Heartbeat, ProgressWriter
from workers.metrics import current as worker_metrics
from workers.tracks import custom_track_of

log = logging.getLogger("ideabench.worker")
T = TypeVar("T")
WRITE_RETRIES = 6  # the final write survives a database blip of ~6 s (0.2 s, doubling)


def _retrying(write: Callable[[], T], what: str) -> T:
    """``write`` (one transaction), again on a lost or refused connection: for a job's end the
    judging is done, and a retry is safe because every write is fenced by the claim."""
    for attempt in range(WRITE_RETRIES):
        try:
            return write()
        except (sa_exc.OperationalError, sa_exc.InterfaceError):
            if attempt == WRITE_RETRIES - 1:
                raise
            log.warning("%s: the database is unreachable; retrying", what, exc_info=True)
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


class Outcome(StrEnum):
    """What ``execute_job`` did."""

    NOT_CLAIMED = "not_claimed"
    REFUSED = "refused"  # this worker's seed secret is not the deployment's: left for another
    SUCCEEDED = "succeeded"
    ERRORED = "errored"
    CANCELLED = "cancelled"
    LOST = "lost"


def judge_request(job: Job, ctx: WorkerContext) -> JudgeRequest:
    """The engine's request for a job row (with the custom track's stored version, if any)."""
    custom = None
    if not tracks_service.is_builtin(job.track):
        with ctx.sessions() as session:
            row = session.get(CustomTrackRow, job.track)
            if row is None:
                raise BenchError(ErrorCode.UNKNOWN_TRACK, f"Track {job.track} is not registered here.")
            custom = custom_track_of(row)  # in the session: its stored build loads on access
    timing = None  # the time left before the first run ends is an estimate: a database that fails
    try:  # here leaves it the card's, never the job errored (a fault test's terminated backends)
        with ctx.sessions() as session:
            timing = deployment_timing(session, job.track, tracks_service.card_of_job_track(session, job.track))
    except sa_exc.SQLAlchemyError:
        log.warning("job %s: the track's timing on this deployment is unreadable; the card's is used", job.id)
    options = ctx.host_options()
    return JudgeRequest(
        track=job.track,
        idea_code=job.idea_code,
        baseline_code=job.baseline_code,
        n_seeds=job.n_seeds,
        hparams=job.hparams,
        mechanism=job.mechanism,
        name=job.name,
        hypothesis=job.hypothesis,
        timeout_s=ctx.settings.job_timeout_s,
        capture_timeout_s=ctx.settings.capture_timeout_s,
        memory_mb=ctx.settings.job_memory_mb,
        device=ctx.settings.device,
        custom_track=custom,
        seed_secret=options.deployment_secret(),
        # the caches live under the worker's data directory (`ideabench worker --data-dir X`)
        options=options.engine,
        job_key=job.id,  # the confirmation's seeds are this job's alone, and the same on a retry
        timing=timing,  # the time left before its first run ends: this deployment's, where known
    )


def _claim(ctx: WorkerContext, job_id: str) -> tuple[Claim, Job] | None:
    with ctx.sessions() as session:
        claim = leases.claim_job(session, job_id, ctx.worker_id, db_now(session), ctx.settings.lease_s)
        if claim is None:
            session.rollback()
            return None
        job = session.get(Job, job_id)
        session.commit()
    assert job is not None
    return claim, job


def prove_secret(ctx: WorkerContext) -> str | None:
    """None when this worker's seed secret is the deployment's current epoch
    (``app.seeds.repository.prove``); else why it must judge nothing."""
    try:
        block = ctx.host_options().deployment_secret().report_block()
    except BenchError as exc:
        return exc.message

    def check() -> str | None:
        with ctx.sessions() as session:
            problem = seeds_repository.prove(session, block)
            session.commit()
        return problem

    # Proving is idempotent (a recorded epoch is read, not written twice), so a lost connection
    # retries as the final writes do: a worker starting while Postgres drops its backends must
    # not die before its first job (a fault test saw it: every job then stayed queued).
    return _retrying(check, "proving the seed secret")


def execute_job(ctx: WorkerContext, job_id: str) -> Outcome:
    """Claim ``job_id`` and run it to its end; a delivery of a job someone else holds is a no-op.
    A worker whose seed secret is not the deployment's claims nothing (the job stays queued
    and the reconciler sends it again, for a worker that may judge it)."""
    problem = prove_secret(ctx)
    if problem is not None:
        log.error("job %s not taken: %s", job_id, problem)
        if (metrics := worker_metrics()) is not None:
            metrics.job_ended(Outcome.REFUSED.value, 0.0)
        return Outcome.REFUSED
    claimed = _claim(ctx, job_id)
    if claimed is None:
        log.info("job %s not claimable (taken, ended or cancelled); skipping", job_id)
        return Outcome.NOT_CLAIMED
    claim, job = claimed
    token = request_id.current.set(job.request_id)  # this job's log lines carry its submission's id
    started, outcome = time.monotonic(), Outcome.ERRORED
    try:
        outcome = _execute_claimed(ctx, claim, job)
        return outcome
    finally:
        request_id.current.reset(token)
        if (metrics := worker_metrics()) is not None:
            metrics.job_ended(outcome.value, time.monotonic() - started)


def _execute_claimed(ctx: WorkerContext, claim: Claim, job: Job) -> Outcome:
    job_id = claim.job_id
    log.info("running job %s (attempt %d, request %s)", job_id, claim.attempt, job.request_id or "-")
    cancel = threading.Event()
    beat = Heartbeat(ctx, claim, cancel)
    beat.start()
    writer = ProgressWriter(ctx, claim)
    try:
        judged = judge(judge_request(job, ctx), on_progress=writer, cancel=cancel,
                       keep_warm=ctx.settings.warm_children)
        writer.flush(judged.bench_report.warnings)
        report = judged.model_dump(mode="json")  # what is stored: the engine's Report as JSON
        if (metrics := worker_metrics()) is not None:
            metrics.judged(report)
    except BenchError as exc:
        writer.flush()
        cancelled = exc.code is ErrorCode.CANCELLED or beat.cancel_requested
        status = JobStatus.CANCELLED if cancelled else JobStatus.ERRORED
        return _finish_unsuccessful(ctx, claim, status, exc.to_dict(), beat)
    except Exception as exc:
        log.exception("job %s crashed the worker's runner", job_id)
        if beat.cancel_requested:
            return _finish_unsuccessful(ctx, claim, JobStatus.CANCELLED, _cancelled(), beat)
        error = BenchError(ErrorCode.INTERNAL, f"The judge failed unexpectedly ({type(exc).__name__}).")
        return _finish_unsuccessful(ctx, claim, JobStatus.ERRORED, error.to_dict(), beat)
    finally:
        beat.stop()
    return _finish_succeeded(ctx, claim, job, report)


def _cancelled() -> dict[str, str]:
    return {"code": ErrorCode.CANCELLED.value, "message": "The job was cancelled while it ran.",
            "hint": DEFAULT_HINTS[ErrorCode.CANCELLED]}


def _finish_succeeded(ctx: WorkerContext, claim: Claim, job: Job, report: dict[str, Any]) -> Outcome:
    return _retrying(lambda: _store_report(ctx, claim, job, report), f"job {claim.job_id}'s report")


def _store_report(ctx: WorkerContext, claim: Claim, job: Job, report: dict[str, Any]) -> Outcome:
    with ctx.sessions() as session:
        now = db_now(session)
        try:  # the attempts before it are counted in the transaction that stores it
            adopt_graph_family(session, job, report)
            mark_own_track(session, job, report)
            row = build_report_row(job, report, now, attempts_block(session, job),
                                   track_vouched=track_vouched(session, job.track))
        except InvalidReport as exc:
            session.rollback()
            error = BenchError(ErrorCode.INTERNAL, f"The engine returned an unusable report: {exc}.")
            return _finish_unsuccessful(ctx, claim, JobStatus.ERRORED, error.to_dict(), None)
        if not leases.finish_succeeded(session, claim, row, now):
            session.rollback()
            log.warning("job %s: lease lost before the report was stored; discarding it", claim.job_id)
            return Outcome.LOST
        session.commit()
    log.info("job %s succeeded: report %s (request %s)", claim.job_id, row.id, job.request_id or "-")
    return Outcome.SUCCEEDED


def _finish_unsuccessful(
    ctx: WorkerContext, claim: Claim, status: JobStatus, error: dict[str, str], beat: Heartbeat | None
) -> Outcome:
    if status is JobStatus.CANCELLED and error.get("code") != ErrorCode.CANCELLED.value:
        error = _cancelled()
    return _retrying(lambda: _store_end(ctx, claim, status, error), f"job {claim.job_id}'s end")


def _store_end(ctx: WorkerContext, claim: Claim, status: JobStatus, error: dict[str, str]) -> Outcome:
    with ctx.sessions() as session:
        if not leases.finish_unsuccessful(session, claim, status, error, db_now(session)):
            session.rollback()
            log.warning("job %s: lease lost before its end was stored", claim.job_id)
            return Outcome.LOST
        session.commit()
    log.info("job %s %s: %s", claim.job_id, status.value, error.get("code"))
    return Outcome.CANCELLED if status is JobStatus.CANCELLED else Outcome.ERRORED
