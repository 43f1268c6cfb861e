"""A review of the kept q-values (issue 28.9; helper, 2026-12-05): cases where the kept path
(``qvalues``, ``per_track``) parted from the whole procedure (``qvalues_from_scratch``,
``per_track_from_scratch``), on SQLite and on Postgres."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from app.keys.service import create_key
from app.reports import discoveries
from app.reports.models import Report
from app.reports.service import build_report_row
from tests.app.factories import insert_job, key_id, report_body

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
_n = itertools.count()
KEYS: dict[str, str] = {}


@pytest.fixture(params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest) -> Iterator[Any]:
    application = request.getfixturevalue("app" if request.param == "sqlite" else "pg_app")
    with application.state.sessionmaker() as session:
        for label in ("a", "b"):
            KEYS[label] = key_id(create_key(session, "agent", label).token)
        session.commit()
    yield application


def make(session: Any, submitter: str = "a", track: str = "smoke", *, p: float, worked: bool = True,
         family: str | None = None, baseline: str | None = None, version: int | None = 1,
         epoch: int | None = 1, device: str = "cpu", counted: bool = True) -> Report:
    i = next(_n)
    job = insert_job(session, KEYS[submitter], status="succeeded", track=track, family=family,
                     created_at=T0 + dt.timedelta(seconds=i))
    body = report_body("worked" if worked else "failed", "helps" if worked else "inconclusive",
                       track=track, p_helps=p)
    row = build_report_row(job, body, job.created_at)
    row.baseline, row.track_version, row.seed_epoch, row.device_class = baseline, version, epoch, device
    row.counted = counted
    job.report_id = row.id
    return row


def store(session: Any, **kw: Any) -> Report:
    row = make(session, **kw)
    session.add(row)
    session.commit()
    return row


def check(session: Any, tracks: set[str]) -> None:
    reports = list(session.scalars(select(Report).where(Report.track.in_(sorted(tracks)))))
    none = discoveries.QValues(None, None)
    kept = discoveries.qvalues(session, reports)
    scratch = discoveries.qvalues_from_scratch(session, tracks)
    assert {r.id: kept.get(r.id, none) for r in reports} == {r.id: scratch.get(r.id, none) for r in reports}
    assert discoveries.per_track(session, tracks) == discoveries.per_track_from_scratch(session, tracks)
    assert discoveries.per_track(session, None) == discoveries.per_track_from_scratch(session, None)


def raw_insert(session: Any, row: Report) -> None:
    """Store ``row`` the way code without the ``Report`` mapper's events does (an older worker
    still running through a rolling deploy of 0017, a script, a Core ``insert``): no
    ``stream_seq``, no ``report_streams`` change."""
    from sqlalchemy import insert

    session.execute(insert(Report).values(
        **{c.key: getattr(row, c.key) for c in Report.__table__.columns if c.key != "stream_seq"}))
    session.commit()


def test_a_report_stored_without_the_mapper_events_is_not_missed(app: Any) -> None:
    """A report with no ``stream_seq`` (coalesced to 0: "before any change") stored after a track
    was kept is never added: the stream row did not move, so the kept state is reused, and the
    track's accounting (and the q-values of every other report on it) stay stale until some
    rebase. Docs/deploy.md rolls the migration out before the workers: old workers store exactly
    such rows in that window."""
    from app.reports.models import sequence_strays

    with app.state.sessionmaker() as session:
        store(session, p=0.01, family="f1")
        store(session, p=0.04, family="f2")
        check(session, {"smoke"})  # keeps smoke
        raw_insert(session, make(session, p=0.001, family="f3"))
        check(session, {"smoke"})  # a track with such a report is built on every read
        assert sequence_strays(session) == 1  # the reconciler gives it a change of its track's stream
        session.commit()
        assert sequence_strays(session) == 0
        check(session, {"smoke"})
        store(session, p=0.2, family="f4")  # and the track is kept, and advanced, again
        check(session, {"smoke"})


def test_per_track_of_every_track_includes_a_track_without_a_stream_row(app: Any) -> None:
    """``per_track(session, None)`` (the verdict summary without a track filter) lists only the
    tracks with a ``report_streams`` row, so a track whose reports were stored without the
    mapper events has no discoveries there, while ``per_track(session, {track})`` and the
    reference count them."""
    with app.state.sessionmaker() as session:
        store(session, p=0.01, family="f1")
        raw_insert(session, make(session, p=0.001, family="f3", track="tabular"))
        assert discoveries.per_track(session, {"tabular"}) == discoveries.per_track_from_scratch(
            session, {"tabular"})
        assert discoveries.per_track(session, None) == discoveries.per_track_from_scratch(session, None)


def test_a_read_in_a_transaction_that_rolls_back_keeps_no_phantom(app: Any) -> None:
    """A read in a transaction that stored a report (flushed, not committed) keeps the track's
    state at that transaction's own ``seq``; the transaction rolls back, the next committed
    report takes the same ``seq`` under the same ``base``, and the kept state (with the
    rolled-back report in it, without the committed one) is taken as current."""
    with app.state.sessionmaker() as session:
        store(session, p=0.3, family="f1")
        check(session, {"smoke"})
    with app.state.sessionmaker() as session:
        session.add(make(session, p=0.001, family="f9"))
        session.flush()
        discoveries.per_track(session, {"smoke"})
        session.rollback()
    with app.state.sessionmaker() as session:
        store(session, p=0.5, family="f3")
        check(session, {"smoke"})


def test_an_empty_device_class_is_the_cpu_stream_in_both_paths(app: Any) -> None:
    """The reference reads an empty ``device_class`` as ``cpu`` (``_rows``: ``r[10] or "cpu"``),
    so a family's attempts with '' and 'cpu' are one hypothesis there; the kept path groups by
    the raw column (``_keys``) and puts two hypotheses in the cpu stream (other m, other p),
    and ``qvalues`` looks pages up under 'cpu'. ``stream_of`` gives '' for a device such as
    ':0' (``str(...).partition(':')[0]``)."""
    with app.state.sessionmaker() as session:
        store(session, p=0.01, family="f1")
        store(session, p=0.02, family="f1", device="")
        store(session, p=0.2, family="f2")
        check(session, {"smoke"})
