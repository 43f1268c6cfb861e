"""The dispatcher: the API commits a job and sends nothing; a worker's loop sends each queued
job once, however many dispatchers run at once (real Postgres), through the partial index."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from app.db import make_engine, make_sessionmaker, utcnow
from app.jobs import leases
from app.keys.service import create_key
from tests.app.factories import insert_job
from tests.conftest import RecordingQueue
from workers.context import WorkerContext
from workers.reconciler import WorkerLoop, dispatch_once


@pytest.fixture
def pg_ctx(pg_settings: Any) -> Iterator[WorkerContext]:
    engine = make_engine(pg_settings.database_url)
    yield WorkerContext(settings=pg_settings, engine=engine, sessions=make_sessionmaker(engine),
                        worker_id="host:1", queue=RecordingQueue())  # type: ignore[arg-type]
    engine.dispose()


def _unsent_jobs(ctx: WorkerContext, n: int) -> list[str]:
    with ctx.sessions() as session:
        key = create_key(session, "agent").key
        session.flush()
        ids = [insert_job(session, key.id, enqueued_at=None).id for _ in range(n)]
        session.commit()
    return ids


def test_concurrent_dispatchers_send_every_job_exactly_once(pg_ctx: WorkerContext) -> None:
    ids = _unsent_jobs(pg_ctx, 300)
    queues = [RecordingQueue() for _ in range(4)]
    contexts = [WorkerContext(settings=pg_ctx.settings, engine=pg_ctx.engine, sessions=pg_ctx.sessions,
                              worker_id=f"host:{i}", queue=q) for i, q in enumerate(queues)]  # type: ignore[arg-type]
    barrier = threading.Barrier(len(contexts))

    def run(ctx: WorkerContext) -> None:
        barrier.wait()
        while dispatch_once(ctx):
            pass

    threads = [threading.Thread(target=run, args=(c,)) for c in contexts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    sent = [job_id for q in queues for job_id, _ in q.sent]
    assert sorted(sent) == sorted(ids)  # each once: no job twice, none left out
    assert dispatch_once(pg_ctx) == []


def test_the_scan_for_unsent_jobs_reads_the_partial_index(pg_ctx: WorkerContext) -> None:
    _unsent_jobs(pg_ctx, 3)
    with pg_ctx.engine.connect() as conn:
        conn.execute(text("SET enable_seqscan = off"))
        plan = "\n".join(row[0] for row in conn.execute(text(
            "EXPLAIN SELECT id FROM jobs WHERE status = 'queued' AND enqueued_at IS NULL "
            "ORDER BY created_at LIMIT 500")))
    assert "ix_jobs_unsent" in plan, plan


def test_a_dispatch_that_fails_does_not_stop_the_beats(ctx_sqlite: WorkerContext,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's steps fail alone: a broken dispatch (say, the broker's client raising) still
    lets the worker say it is alive and reconcile, and the next pass dispatches again."""
    import workers.reconciler as reconciler

    calls = {"dispatch": 0, "beat": 0}

    def broken(ctx: WorkerContext) -> list[str]:
        calls["dispatch"] += 1
        raise RuntimeError("broker client broke")

    monkeypatch.setattr(reconciler, "dispatch_once", broken)
    loop = WorkerLoop(ctx_sqlite, sandbox="complete", beat_every_s=0.0)
    original_beat = loop.beat

    def beat() -> None:
        calls["beat"] += 1
        original_beat()

    loop.beat = beat  # type: ignore[method-assign]
    loop.start()
    try:
        deadline = utcnow().timestamp() + 10
        while (calls["dispatch"] < 3 or calls["beat"] < 3) and utcnow().timestamp() < deadline:
            threading.Event().wait(0.05)
    finally:
        loop.stop()
        loop.join(5)
    assert calls["dispatch"] >= 3 and calls["beat"] >= 3


@pytest.fixture
def ctx_sqlite(sqlite_settings: Any) -> Iterator[WorkerContext]:
    from app.models import metadata

    settings = sqlite_settings.model_copy(update={"dispatch_every_s": 0.02})
    engine = make_engine(settings.database_url)
    metadata.create_all(engine)
    yield WorkerContext(settings=settings, engine=engine, sessions=make_sessionmaker(engine),
                        worker_id="host:1", queue=RecordingQueue())  # type: ignore[arg-type]
    engine.dispose()


def test_take_unsent_leaves_jobs_already_sent_to_the_reconciler(ctx_sqlite: WorkerContext) -> None:
    with ctx_sqlite.sessions() as session:
        key = create_key(session, "agent").key
        session.flush()
        insert_job(session, key.id)  # enqueued_at set: a message went out
        unsent = insert_job(session, key.id, enqueued_at=None).id
        session.commit()
        assert leases.take_unsent(session, utcnow()) == [(unsent, "cpu")]
        session.commit()
        assert leases.take_unsent(session, utcnow()) == []  # stamped: taken once
