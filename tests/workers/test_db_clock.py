"""Leases are written and judged by the database's clock (issue 28.2), on Postgres: a
reconciler whose host clock runs minutes ahead requeues no healthy job."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import app.db
from app.db import db_now, make_engine, make_sessionmaker, utcnow
from app.jobs.models import Job
from app.keys.service import create_key
from tests.app.factories import insert_job
from tests.conftest import RecordingQueue
from workers import runner
from workers.context import WorkerContext
from workers.heartbeat import Heartbeat
from workers.reconciler import reconcile_once

AHEAD = dt.timedelta(minutes=10)


class _FastClock(dt.datetime):
    """This host's clock, ten minutes ahead of the database's."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
        return dt.datetime.now(tz) + AHEAD


@pytest.fixture
def ctx(pg_settings: Any) -> Iterator[WorkerContext]:
    settings = pg_settings.model_copy(update={"lease_s": 30.0, "max_attempts": 2, "requeue_after_s": 60.0})
    engine = make_engine(settings.database_url)
    yield WorkerContext(settings=settings, engine=engine, sessions=make_sessionmaker(engine),
                        worker_id="host:1", queue=RecordingQueue())  # type: ignore[arg-type]
    engine.dispose()


def test_a_reconciler_with_a_fast_clock_requeues_no_healthy_job(ctx: WorkerContext,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with ctx.sessions() as session:
        key = create_key(session, "agent").key
        session.flush()
        job = insert_job(session, key.id)
        session.commit()
    claimed = runner._claim(ctx, job.id)  # a healthy worker, its clock right
    assert claimed is not None
    Heartbeat(ctx, claimed[0], threading.Event()).beat()
    monkeypatch.setattr(app.db, "datetime", _FastClock)  # the reconciler's host: 10 minutes ahead
    assert utcnow() - dt.datetime.now(dt.UTC) > dt.timedelta(minutes=9)
    with ctx.sessions() as session:
        assert abs(db_now(session) - dt.datetime.now(dt.UTC)) < dt.timedelta(seconds=30)
        lease = session.get(Job, job.id).lease_until  # type: ignore[union-attr]
    assert lease is not None and dt.timedelta(seconds=20) < lease - dt.datetime.now(dt.UTC) < dt.timedelta(seconds=40)
    done = reconcile_once(ctx)
    assert done.requeued == [] and done.errored == [] and done.resent == []
    with ctx.sessions() as session:
        assert session.get(Job, job.id).status == "running"  # type: ignore[union-attr]
    # what judging by the host's own clock did (the failure): the lease looks expired
    assert reconcile_once(ctx, utcnow()).requeued == [job.id]
