"""A backlog is no loss (issue 28.3): the reconciler re-sends a queued job only when the broker
lacks its message, on a real Redis broker and on the embedded SQL broker."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from app.db import make_engine, make_sessionmaker, utcnow
from app.keys.service import create_key
from app.models import metadata
from app.queue import JobQueue, prepare_broker
from tests.app.factories import insert_job
from workers.context import WorkerContext
from workers.reconciler import dispatch_once, reconcile_once

JOBS = 2000


@pytest.fixture(params=["redis", "sql"])
def ctx(request: pytest.FixtureRequest, sqlite_settings: Any) -> Iterator[WorkerContext]:
    broker = request.getfixturevalue("redis_url") if request.param == "redis" else sqlite_settings.broker_url
    settings = sqlite_settings.model_copy(update={"broker_url": broker, "requeue_after_s": 60.0})
    prepare_broker(settings.broker_url)
    engine = make_engine(settings.database_url)
    metadata.create_all(engine)
    queue = JobQueue(settings.broker_url)
    yield WorkerContext(settings=settings, engine=engine, sessions=make_sessionmaker(engine),
                        worker_id="host:1", queue=queue)  # type: ignore[arg-type]
    queue.close()
    engine.dispose()


def _drop(queue: JobQueue, n: int) -> None:
    """Lose ``n`` messages of the cpu queue, as a broker failover would."""
    with queue._celery.connection_for_write() as conn, conn.channel() as channel:
        for _ in range(n):
            assert channel.basic_get("cpu", no_ack=True) is not None


def test_a_backlog_with_no_worker_is_sent_once_and_a_lost_message_again(ctx: WorkerContext) -> None:
    queue: JobQueue = ctx.queue  # type: ignore[assignment]
    with ctx.sessions() as session:
        key = create_key(session, "agent").key
        session.flush()
        for _ in range(JOBS):
            insert_job(session, key.id, enqueued_at=None)
        session.commit()
    while dispatch_once(ctx):
        pass
    assert queue.depth("cpu") == JOBS
    later = utcnow()
    for minutes in (3, 6, 10):  # ten minutes of passes with no worker: nothing is sent again
        assert reconcile_once(ctx, later + dt.timedelta(minutes=minutes)).resent == []
    assert queue.depth("cpu") == JOBS
    _drop(queue, 5)
    resent = reconcile_once(ctx, later + dt.timedelta(minutes=11)).resent
    assert len(resent) == 5 and queue.depth("cpu") == JOBS
    assert reconcile_once(ctx, later + dt.timedelta(minutes=12)).resent == []
