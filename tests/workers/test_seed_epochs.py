"""One seed secret per deployment, proven (issue 28.1), on SQLite and Postgres: the first
worker records its epoch's commitment; a worker with another secret, or an older epoch,
judges nothing and leaves the job queued for one that may."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from app.db import make_engine, make_sessionmaker
from app.jobs.models import Job
from app.keys.service import create_key
from app.models import metadata
from app.seeds.models import SeedEpoch
from app.seeds.repository import prove
from bench.seeding import SeedSecret
from tests.app.factories import insert_job
from tests.conftest import RecordingQueue
from workers import runner
from workers.context import WorkerContext

ONE = SeedSecret(key=b"1" * 32, epoch=1)
OTHER = SeedSecret(key=b"2" * 32, epoch=1)
NEXT = SeedSecret(key=b"3" * 32, epoch=2)


@pytest.fixture(params=["sqlite", "postgres"])
def ctx(request: pytest.FixtureRequest) -> Iterator[WorkerContext]:
    settings = request.getfixturevalue("sqlite_settings" if request.param == "sqlite" else "pg_settings")
    engine = make_engine(settings.database_url)
    if request.param == "sqlite":
        metadata.create_all(engine)
    yield WorkerContext(settings=settings, engine=engine, sessions=make_sessionmaker(engine),
                        worker_id="host:1", queue=RecordingQueue())  # type: ignore[arg-type]
    engine.dispose()


def _prove(ctx: WorkerContext, secret: SeedSecret) -> str | None:
    with ctx.sessions() as session:
        problem = prove(session, secret.report_block())
        session.commit()
    return problem


def test_the_first_secret_of_an_epoch_is_recorded_and_another_is_refused(ctx: WorkerContext) -> None:
    assert _prove(ctx, ONE) is None and _prove(ctx, ONE) is None
    problem = _prove(ctx, OTHER)
    assert problem is not None and "not the deployment's for epoch 1" in problem
    assert ONE.key.hex() not in problem and OTHER.key.hex() not in problem
    assert _prove(ctx, NEXT) is None  # a rotation: epoch 2 starts, epoch 1 is retired
    problem = _prove(ctx, ONE)
    assert problem is not None and "replaced by epoch 2" in problem
    with ctx.sessions() as session:
        rows = {r.epoch: r for r in session.query(SeedEpoch)}
    assert rows[1].retired_at is not None and rows[2].retired_at is None
    assert rows[1].commitment == ONE.commitment and rows[2].commitment == NEXT.commitment


def test_a_worker_with_another_secret_leaves_the_job_queued(ctx: WorkerContext, monkeypatch: Any) -> None:
    with ctx.sessions() as session:
        key = create_key(session, "agent").key
        session.flush()
        job = insert_job(session, key.id)
        session.add(SeedEpoch(epoch=ctx.settings.host_options().deployment_secret().epoch, scheme="hmac-sha256/v1",
                              commitment="0" * 64, created_at=job.created_at))
        session.commit()
    judged: list[Any] = []
    monkeypatch.setattr(runner, "judge", lambda *a, **k: judged.append(a))
    assert runner.execute_job(ctx, job.id) is runner.Outcome.REFUSED
    assert judged == []
    with ctx.sessions() as session:
        row = session.get(Job, job.id)
        assert row is not None and (row.status, row.attempts, row.worker_id) == ("queued", 0, None)


def test_proving_rides_through_a_terminated_backend(pg_settings: Any, monkeypatch: Any) -> None:
    """A worker starting while Postgres drops its backends (the fault test's killer) proves its
    secret on a new connection, instead of dying before its first job."""
    engine = make_engine(pg_settings.database_url)
    ctx = WorkerContext(settings=pg_settings, engine=engine, sessions=make_sessionmaker(engine),
                        worker_id="host:1", queue=RecordingQueue())  # type: ignore[arg-type]
    terminated: list[int] = []

    def prove_on_a_dying_backend(session: Any, block: dict[str, Any]) -> str | None:
        if not terminated:  # the first try's own backend is terminated under it
            terminated.append(session.execute(text("SELECT pg_backend_pid()")).scalar_one())
            with make_engine(pg_settings.database_url).connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": terminated[0]})
        return prove(session, block)

    monkeypatch.setattr(runner.seeds_repository, "prove", prove_on_a_dying_backend)
    monkeypatch.setattr(runner.time, "sleep", lambda s: None)
    try:
        assert runner.prove_secret(ctx) is None and terminated
        with ctx.sessions() as session:
            assert session.get(SeedEpoch, pg_settings.host_options().deployment_secret().epoch) is not None
    finally:
        engine.dispose()


def test_a_worker_with_another_secret_validates_no_track(ctx: WorkerContext, monkeypatch: Any) -> None:
    """A validation under a replaced (or another) epoch would be stale from birth: its verdicts
    never count, and an identical upload would stage yet another version (red team, session 22).
    The track stays ``validating`` for a worker that may validate it."""
    from app.tracks import service as tracks_service
    from bench import custom_track
    from workers import tracks

    source = (Path(__file__).resolve().parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text()
    with ctx.sessions() as session:
        track_id = tracks_service.register(session, source, "author", "tiny.py").row.id
        session.add(SeedEpoch(epoch=ctx.settings.host_options().deployment_secret().epoch, scheme="hmac-sha256/v1",
                              commitment="0" * 64, created_at=datetime.now(UTC)))
        session.commit()
    validated: list[Any] = []
    monkeypatch.setattr(custom_track, "validate", lambda *a, **k: validated.append(a))
    assert tracks.execute_validation(ctx, track_id) == "refused"
    assert validated == []
    with ctx.sessions() as session:
        assert tracks_service.get(session, track_id).status == "validating"
