"""Claims, leases, heartbeats, the exactly-once finish and the reconciler (with a stand-in judge)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from app.db import make_engine, make_sessionmaker, utcnow
from app.jobs import leases
from app.jobs.models import Job, JobStatus
from app.keys.service import create_key
from app.models import metadata
from app.reports.models import Report, VerdictCount
from app.reports.service import build_report_row
from bench.errors import BenchError, ErrorCode
from bench.protocol import Progress
from bench.report import Report as JudgeReport
from tests.app.factories import insert_job, report_body
from tests.conftest import RecordingQueue
from workers import runner
from workers.context import WorkerContext
from workers.reconciler import reconcile_once


@pytest.fixture
def ctx(sqlite_settings: Any) -> Iterator[WorkerContext]:
    settings = sqlite_settings.model_copy(update={"heartbeat_s": 0.05, "lease_s": 30.0, "max_attempts": 2,
                                                  "requeue_after_s": 60.0, "progress_min_interval_s": 0.0})
    engine = make_engine(settings.database_url)
    metadata.create_all(engine)
    context = WorkerContext(settings=settings, engine=engine, sessions=make_sessionmaker(engine),
                            worker_id="host:1", queue=RecordingQueue())  # type: ignore[arg-type]
    yield context
    engine.dispose()


@pytest.fixture
def job_id(ctx: WorkerContext) -> str:
    with ctx.sessions() as session:
        key = create_key(session, "agent").key
        session.flush()
        job = insert_job(session, key.id)
        session.commit()
        return job.id


def load(ctx: WorkerContext, job_id: str) -> Job:
    with ctx.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def test_a_job_is_claimed_once(ctx: WorkerContext, job_id: str) -> None:
    with ctx.sessions() as session:
        first = leases.claim_job(session, job_id, "w:1", utcnow(), 30)
        second = leases.claim_job(session, job_id, "w:2", utcnow(), 30)
        session.commit()
    assert first is not None and first.attempt == 1 and second is None
    job = load(ctx, job_id)
    assert job.status == "running" and job.worker_id == "w:1" and job.lease_until is not None


def test_finish_is_fenced_and_exactly_once(ctx: WorkerContext, job_id: str) -> None:
    with ctx.sessions() as session:
        claim = leases.claim_job(session, job_id, "w:1", utcnow(), 30)
        session.commit()
    assert claim is not None
    stale = leases.Claim(job_id, "w:1", claim.attempt - 1)
    job = load(ctx, job_id)
    with ctx.sessions() as session:
        assert not leases.finish_succeeded(session, stale, build_report_row(job, report_body(), utcnow()), utcnow())
        session.rollback()
    with ctx.sessions() as session:
        assert leases.finish_succeeded(session, claim, build_report_row(job, report_body(), utcnow()), utcnow())
        session.commit()
    with ctx.sessions() as session:  # a second finish by the same claim does nothing
        assert not leases.finish_succeeded(session, claim, build_report_row(job, report_body(), utcnow()), utcnow())
        session.rollback()
        assert session.scalar(select(func.count()).select_from(Report)) == 1
    assert load(ctx, job_id).status == "succeeded"


def test_execute_job_success_writes_progress_and_one_report(ctx: WorkerContext, job_id: str,
                                                            monkeypatch: Any) -> None:
    seen: list[int | None] = []

    def fake_judge(request: Any, on_progress: Any, cancel: threading.Event, keep_warm: bool) -> JudgeReport:
        assert request.track == "smoke" and request.device == "cpu"
        on_progress(Progress("sweep", 3, 10, 5.0, "sweeping"))
        seen.append(load(ctx, job_id).runs_done)
        return JudgeReport.model_validate(report_body("partial", "helps", mechanism_ok=0))

    monkeypatch.setattr(runner, "judge", fake_judge)
    assert runner.execute_job(ctx, job_id) is runner.Outcome.SUCCEEDED
    assert seen == [3]
    job = load(ctx, job_id)
    assert job.status == "succeeded" and job.report_id and job.finished_at
    with ctx.sessions() as session:
        report = session.scalars(select(Report)).one()
    assert (report.system_verdict, report.practical_verdict, report.mechanism_ok) == ("partial", "helps", False)
    # A redelivered message finds the job finished: a no-op, still one report, counted once.
    assert runner.execute_job(ctx, job_id) is runner.Outcome.NOT_CLAIMED
    with ctx.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Report)) == 1
        assert session.scalars(select(VerdictCount.n)).all() == [1]


def test_every_stage_and_run_event_carries_its_counts(ctx: WorkerContext, job_id: str, monkeypatch: Any) -> None:
    """Issue 27.2: the first stage event was written before the run plan was known (runs_total
    0) and run events carried no total, so the CLI's bar read ``n/?`` for a whole job and MCP's
    wait_for_job sent no progress while the job swept. The engine's order of progress: the
    children start (no plan yet), the plan is known, runs end, the protocol adds edge runs."""
    from app.jobs.models import JobEvent

    run = {"arm": "idea", "stage": "sweep", "cfg": 0, "seed_index": 0, "seconds": 0.1, "cached": False}

    def fake_judge(request: Any, on_progress: Any, cancel: threading.Event, keep_warm: bool) -> JudgeReport:
        on_progress(Progress("sweep", 0, 0, None, "starting the sandboxed children"))
        on_progress(Progress("sweep", 0, 12, None, "capturing", at_most=20, eta_max_s=None))
        on_progress(Progress("sweep", 1, 12, 5.0, run=run, at_most=20, eta_max_s=9.0))
        on_progress(Progress("sweep", 2, 14, 5.0, run=run, at_most=20, eta_max_s=9.0))  # edges added
        on_progress(Progress("final", 3, 14, 5.0, run={**run, "stage": "final"}, at_most=20, eta_max_s=9.0))
        return JudgeReport.model_validate(report_body("partial", "helps", mechanism_ok=0))

    monkeypatch.setattr(runner, "judge", fake_judge)
    assert runner.execute_job(ctx, job_id) is runner.Outcome.SUCCEEDED
    with ctx.sessions() as session:
        events = [(e.kind, e.data) for e in session.scalars(select(JobEvent).where(JobEvent.job_id == job_id)
                                                              .order_by(JobEvent.seq))]
    counts = [(kind, d.get("stage"), d.get("runs_done"), d.get("runs_total"), d.get("runs_at_most"))
              for kind, d in events]
    assert counts == [("stage", "sweep", 0, 12, 20), ("run", "sweep", 1, 12, 20),
                      ("stage", "sweep", 2, 14, 20), ("run", "sweep", 2, 14, 20),
                      ("stage", "final", 3, 14, 20), ("run", "final", 3, 14, 20)]


def test_bench_error_fails_the_job_with_its_code(ctx: WorkerContext, job_id: str, monkeypatch: Any) -> None:
    def fake_judge(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        raise BenchError(ErrorCode.BAD_OUTPUT_SHAPE, "The model returned (B, 2); expected (B, 1).")

    monkeypatch.setattr(runner, "judge", fake_judge)
    assert runner.execute_job(ctx, job_id) is runner.Outcome.ERRORED
    job = load(ctx, job_id)
    assert (job.status, job.error_code) == ("errored", "bad_output_shape")
    assert job.error_message and job.error_hint


def test_unexpected_error_fails_with_internal(ctx: WorkerContext, job_id: str, monkeypatch: Any) -> None:
    monkeypatch.setattr(runner, "judge", lambda *a, **k: 1 / 0)
    assert runner.execute_job(ctx, job_id) is runner.Outcome.ERRORED
    assert load(ctx, job_id).error_code == "internal"


def test_cancel_request_reaches_the_running_judge(ctx: WorkerContext, job_id: str, monkeypatch: Any) -> None:
    def fake_judge(request: Any, on_progress: Any, cancel: threading.Event, keep_warm: bool) -> dict[str, Any]:
        with ctx.sessions() as session:  # what POST /cancel does
            session.execute(Job.__table__.update().where(Job.id == job_id).values(cancel_requested=True))
            session.commit()
        assert cancel.wait(5), "the heartbeat never set the cancel event"
        raise BenchError(ErrorCode.CANCELLED, "stopped")

    monkeypatch.setattr(runner, "judge", fake_judge)
    assert runner.execute_job(ctx, job_id) is runner.Outcome.CANCELLED
    job = load(ctx, job_id)
    assert (job.status, job.error_code) == ("cancelled", "cancelled")


def test_a_lost_lease_stops_the_run_and_discards_its_result(ctx: WorkerContext, job_id: str,
                                                            monkeypatch: Any) -> None:
    def fake_judge(request: Any, on_progress: Any, cancel: threading.Event, keep_warm: bool) -> JudgeReport:
        with ctx.sessions() as session:  # the reconciler presumed us dead and re-queued the job
            session.execute(Job.__table__.update().where(Job.id == job_id).values(status="queued", worker_id=None))
            session.commit()
        assert cancel.wait(5)
        return JudgeReport.model_validate(report_body())

    monkeypatch.setattr(runner, "judge", fake_judge)
    assert runner.execute_job(ctx, job_id) is runner.Outcome.LOST
    assert load(ctx, job_id).status == "queued"
    with ctx.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Report)) == 0


def test_reconciler_requeues_expired_leases_then_gives_up(ctx: WorkerContext, job_id: str) -> None:
    now = utcnow()
    with ctx.sessions() as session:
        assert leases.claim_job(session, job_id, "dead:1", now - dt.timedelta(minutes=5), 30)
        session.commit()
    done = reconcile_once(ctx, now)
    assert done.requeued == [job_id]
    assert ctx.queue.sent == [(job_id, "cpu")]  # type: ignore[attr-defined]
    job = load(ctx, job_id)
    assert job.status == "queued" and job.worker_id is None and job.attempts == 1
    with ctx.sessions() as session:  # second attempt dies too: attempts reach max_attempts=2
        assert leases.claim_job(session, job_id, "dead:2", now - dt.timedelta(minutes=4), 30)
        session.commit()
    assert reconcile_once(ctx, now).errored == [job_id]
    job = load(ctx, job_id)
    assert (job.status, job.error_code) == ("errored", "internal")


def test_reconciler_prunes_beats_of_workers_gone_for_a_day(ctx: WorkerContext) -> None:
    """Issue 28.8: ``worker_beats`` held a row per worker process ever started."""
    from app.health import repository as health_repository
    from app.health.models import WorkerBeat

    now = utcnow()
    with ctx.sessions() as session:
        for name, seen in (("gone:1", now - dt.timedelta(days=2)), ("alive:1", now - dt.timedelta(hours=23))):
            health_repository.record_beat(session, name, "cpu", "cpu", seen, sandbox="complete")
        session.commit()
    assert reconcile_once(ctx, now).beats_pruned == 1
    with ctx.sessions() as session:
        assert [b.id for b in session.query(WorkerBeat)] == ["alive:1"]


def test_reconciler_resends_lost_messages_once(ctx: WorkerContext, job_id: str) -> None:
    with ctx.sessions() as session:
        session.execute(Job.__table__.update().values(enqueued_at=utcnow() - dt.timedelta(minutes=10)))
        session.commit()
    assert reconcile_once(ctx).resent == [job_id]
    assert reconcile_once(ctx).resent == []  # just re-sent: not again until requeue_after_s
    assert ctx.queue.sent == [(job_id, "cpu")]  # type: ignore[attr-defined]


def test_reconciler_ends_a_cancelled_job_whose_worker_died(ctx: WorkerContext, job_id: str) -> None:
    with ctx.sessions() as session:
        assert leases.claim_job(session, job_id, "dead:1", utcnow() - dt.timedelta(minutes=5), 30)
        session.execute(Job.__table__.update().values(cancel_requested=True))
        session.commit()
    assert reconcile_once(ctx).cancelled == [job_id]
    assert load(ctx, job_id).status == JobStatus.CANCELLED.value


def test_heartbeat_extends_the_lease(ctx: WorkerContext, job_id: str) -> None:
    from workers.heartbeat import Heartbeat

    with ctx.sessions() as session:
        claim = leases.claim_job(session, job_id, "w:1", utcnow(), 1)
        session.commit()
    assert claim is not None
    before = load(ctx, job_id).lease_until
    beat = Heartbeat(ctx, claim, threading.Event())
    beat.start()
    time.sleep(0.3)
    beat.stop()
    after = load(ctx, job_id).lease_until
    assert before is not None and after is not None and after > before + dt.timedelta(seconds=20)


def test_reconciler_resends_lost_track_validations(ctx: WorkerContext) -> None:
    from pathlib import Path

    from app.tracks import service as tracks_service
    from app.tracks.models import CustomTrackRow

    source = (Path(__file__).resolve().parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text()
    now = utcnow()
    with ctx.sessions() as session:
        unsent = tracks_service.register(session, source, "key_a", None).row
        unsent.created_at = now - dt.timedelta(minutes=10)  # the broker refused the first send
        lost = tracks_service.register(session, source.replace("(B, 4)", "(B, 4) v2"), "key_a", None).row
        lost.created_at = lost.sent_at = now - dt.timedelta(hours=2)  # sent, never validated
        fresh = tracks_service.register(session, source.replace("(B, 4)", "(B, 4) v3"), "key_a", None).row
        fresh.sent_at = now  # a worker may be validating it right now
        session.commit()
    assert sorted(reconcile_once(ctx, now).tracks_resent) == ["tiny_quadratic@1", "tiny_quadratic@2"]
    assert sorted(ctx.queue.tracks_sent) == [("tiny_quadratic@1", "cpu"), ("tiny_quadratic@2", "cpu")]  # type: ignore[attr-defined]
    assert reconcile_once(ctx, now).tracks_resent == []  # just sent: not again
    with ctx.sessions() as session:
        assert session.get(CustomTrackRow, "tiny_quadratic@3").sent_at is not None


def test_an_authors_tracks_keep_builds_up_to_a_cap(ctx: WorkerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """Red team (session 22): every validated version kept its baseline's build (up to 64 MiB),
    and nothing bounded a key's versions. An author's tracks keep builds up to
    ``MAX_BUILD_BYTES_PER_AUTHOR`` together; past it a version keeps none (its jobs build the
    baseline with the track's code, as before builds were kept) and its validation says so."""
    from pathlib import Path

    from app.tracks import service as tracks_service
    from app.tracks.models import CustomTrackRow
    from bench import custom_track
    from workers import tracks

    monkeypatch.setattr(tracks, "MAX_BUILD_BYTES_PER_AUTHOR", 10)
    monkeypatch.setattr(custom_track, "validate", lambda *a, **k: {"seed_epoch": 1, "baseline_build": b"PK" * 3})
    source = (Path(__file__).resolve().parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text()
    ids = []
    for author, edit in (("key_a", ""), ("key_a", " v2"), ("key_b", " v3")):
        with ctx.sessions() as session:
            name = "tiny_quadratic" if author == "key_a" else "other_track"
            ids.append(tracks_service.register(session, source.replace("(B, 4)", f"(B, 4){edit}").replace(
                '"tiny_quadratic"', f'"{name}"'), author, None).row.id)
            session.commit()
        assert tracks.execute_validation(ctx, ids[-1]) == "active"
    with ctx.sessions() as session:
        rows = [session.get(CustomTrackRow, i) for i in ids]
        assert [r.baseline_build for r in rows] == [b"PK" * 3, None, b"PK" * 3]  # the cap is per author
        assert [r.validation["baseline_build_kept"] for r in rows] == [True, False, True]


def test_a_jobs_log_lines_carry_its_submissions_request_id(ctx: WorkerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from tests.conftest import json_log_lines

    with ctx.sessions() as session:
        key = create_key(session, "agent").key
        session.flush()
        job = insert_job(session, key.id, request_id="req_from_the_api")
        session.commit()
        job_id = job.id
    logger = logging.getLogger("ideabench.test.engine")

    def fake_judge(*_args: Any, **_kwargs: Any) -> JudgeReport:
        logger.info("training")  # a line logged while the job runs, far from the runner
        return JudgeReport.model_validate(report_body("failed", "inconclusive", mechanism_ok=None))

    monkeypatch.setattr(runner, "judge", fake_judge)
    with json_log_lines(logger.name) as lines:
        assert runner.execute_job(ctx, job_id) is runner.Outcome.SUCCEEDED
        logger.info("after")
    during, after = lines
    assert during["message"] == "training" and during["request_id"] == "req_from_the_api"
    assert {"time", "level", "logger"} <= set(during) and during["level"] == "INFO"
    assert after["request_id"] == "-"  # the id ends with the job


def test_a_worker_without_its_device_judges_nothing() -> None:
    """Issue 28.5: a worker told cuda:0 on a build or host without it must not take gpu jobs."""
    import torch

    from workers.main import check_device

    assert check_device("cpu") is None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    problem = check_device(f"cuda:{count}")  # one past the last device there is
    assert problem is not None and f"cuda:{count}" in problem
    shared = check_device("cuda:0", concurrency=2)  # one job per GPU, whatever the host has
    assert shared is not None and "one job at a time" in shared and check_device("cpu", concurrency=2) is None
