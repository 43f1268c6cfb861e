"""The ``reports`` table: the whole report JSON plus indexed columns for filters."""

from __future__ import annotations

import secrets
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    Date,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    event,
    false,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Mapper, Session, mapped_column

from app.db import Base, UTCDateTime, utcnow
from app.types import JsonType


class Report(Base):
    """One judged job's report; at most one per job (``job_id`` is unique)."""

    __tablename__ = "reports"
    # Each listing filter leads an index that ends in the keyset order
    # (created_at, id), so a filtered page is one index range scan.
    __table_args__ = (
        Index("ix_reports_created", "created_at", "id"),
        Index("ix_reports_track_created", "track", "created_at", "id"),
        Index("ix_reports_system_created", "system_verdict", "created_at", "id"),
        Index("ix_reports_practical_created", "practical_verdict", "created_at", "id"),
        Index("ix_reports_submitter_created", "submitter_id", "created_at", "id"),
        Index("ix_reports_custom_created", "custom_track", "created_at", "id"),
        Index("ix_reports_p_value", "p_value", "id"),
        Index("ix_reports_delta", "delta_mean", "id"),
        Index("ix_reports_family_created", "family", "created_at", "id"),
        Index("ix_reports_track_p_helps", "track", "p_helps"),
        Index("ix_reports_track_stream_seq", "track", "stream_seq"),
        Index("ix_reports_stream_seq", "stream_seq"),  # the few without one (IS NULL)
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), unique=True)
    track: Mapped[str] = mapped_column(String(64))
    custom_track: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    name: Mapped[str | None] = mapped_column(String(200))
    submitter_id: Mapped[str] = mapped_column(String(32))
    system_verdict: Mapped[str] = mapped_column(String(16))
    practical_verdict: Mapped[str] = mapped_column(String(16))
    practical_detail: Mapped[str | None] = mapped_column(String(16))
    mechanism_ok: Mapped[bool | None] = mapped_column(Boolean)
    worked: Mapped[bool] = mapped_column(Boolean)
    p_value: Mapped[float | None] = mapped_column(Float)
    # The deciding stage's mean difference: the confirmation's when one ran, else the screening's
    delta_mean: Mapped[float | None] = mapped_column(Float)
    delta_stage: Mapped[str | None] = mapped_column(String(16))  # screening | confirmation
    # The false-discovery accounting (bench_report.p_helps; docs/statistics.md): the idea's
    # family, what it was compared against, and its one-sided p that it helps.
    family: Mapped[str | None] = mapped_column(String(40))
    baseline: Mapped[str | None] = mapped_column(String(40))
    p_helps: Mapped[float | None] = mapped_column(Float)
    # False for a report that must count nowhere (judged under a weak sandbox, a development
    # setting): it stays readable, but enters no verdict totals and no q-values.
    counted: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # The stream it is counted in (q-values, discoveries): the track version, seed epoch and
    # device class it was judged under; none when its track evaluates public data (a file can
    # embed what it evaluates: cifar10).
    track_version: Mapped[int | None] = mapped_column(Integer)
    seed_epoch: Mapped[int | None] = mapped_column(Integer)
    device_class: Mapped[str] = mapped_column(String(16), default="cpu", server_default="cpu")
    public_data: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The change of its track's stream that stored it (``ReportStream.seq``; 0: stored before
    # 0017; none: stored by code without the mapper's events, e.g. an older worker during a
    # rolling deploy, until ``sequence_strays`` gives it one).
    stream_seq: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    body: Mapped[dict[str, Any]] = mapped_column(JsonType)


class VerdictCount(Base):
    """How many reports of a track's stream (its version, seed epoch and device class: issue
    28.1; 0 where a report did not say) got a verdict pair on a UTC day: the summary's rollup.

    Incremented in the transaction that stores the report (which a job does
    exactly once), so dashboards read a few thousand rows instead of scanning
    every report. ``week`` is the Monday of ``day``.
    """

    __tablename__ = "verdict_counts"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    track: Mapped[str] = mapped_column(String(64), primary_key=True)
    track_version: Mapped[int] = mapped_column(Integer, primary_key=True, default=0)
    seed_epoch: Mapped[int] = mapped_column(Integer, primary_key=True, default=0)
    device_class: Mapped[str] = mapped_column(String(16), primary_key=True, default="cpu")
    system_verdict: Mapped[str] = mapped_column(String(16), primary_key=True)
    practical_verdict: Mapped[str] = mapped_column(String(16), primary_key=True)
    week: Mapped[date] = mapped_column(Date)
    n: Mapped[int] = mapped_column(Integer)


class ReportStream(Base):
    """A track's stream state, changed in every transaction that stores, changes or removes a
    report on the track (the ``Report`` mapper's events), so that an API process keeps the
    track's q-values between reads (``app.reports.discoveries``):

    - ``seq`` counts the changes; a stored report takes the next one (``Report.stream_seq``).
      The row stays locked until the storing transaction commits, so sequence order is commit
      order: a reader that has seen ``seq`` has seen every report up to it.
    - ``base`` is a random token renewed by every change that is not a new report (a report's
      ``counted`` flipped by a vouch, a removal): a process that kept the track at ``seq`` s0
      under the same ``base`` adds the reports after s0; any other change rebuilds the track.

    No row: nothing is kept for the track."""

    __tablename__ = "report_streams"

    track: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    base: Mapped[str] = mapped_column(String(32))


def next_stream_seq(connection: Connection, track: str, *, rebase: bool) -> int:
    """The next change number of ``track``'s stream (a new ``base`` too when ``rebase``), in
    ``connection``'s transaction; the row stays locked until it ends."""
    insert = postgresql_insert if connection.dialect.name == "postgresql" else sqlite_insert
    stmt = insert(ReportStream).values(track=track, seq=1, base=secrets.token_hex(16))
    renew = {"seq": ReportStream.seq + 1, **({"base": stmt.excluded.base} if rebase else {})}
    return int(connection.execute(stmt.on_conflict_do_update(index_elements=["track"], set_=renew)
                                  .returning(ReportStream.seq)).scalar_one())


def sequence_strays(session: Session) -> int:
    """Give every report without a ``stream_seq`` (stored by code without the events below: an
    older worker during a rolling deploy, a script) its track's next change, a rebasing one
    (the processes that kept the track rebuild it); the number of reports. Until then a track
    with such reports is never kept (``app.reports.discoveries``). The worker's reconciler
    calls it."""
    connection = session.connection()
    tracks = list(connection.execute(select(Report.track).where(Report.stream_seq.is_(None)).distinct()).scalars())
    fixed = 0
    for track in tracks:
        seq = next_stream_seq(connection, track, rebase=True)
        result = connection.execute(update(Report).where(Report.track == track, Report.stream_seq.is_(None))
                                    .values(stream_seq=seq))
        fixed += int(result.rowcount)  # type: ignore[attr-defined]
    return fixed


# Set on a session that flushed a report, until it commits or rolls back: what it reads of the
# streams is its own transaction's, which ``app.reports.discoveries`` must not keep.
WROTE_REPORTS = "ideabench_wrote_reports"


@event.listens_for(Session, "after_flush")
def _flushed(session: Session, _context: Any) -> None:
    if any(isinstance(obj, Report) for obj in (*session.new, *session.dirty, *session.deleted)):
        session.info[WROTE_REPORTS] = True


@event.listens_for(Session, "after_commit")
@event.listens_for(Session, "after_rollback")
@event.listens_for(Session, "after_soft_rollback")
def _ended(session: Session, *_: Any) -> None:
    session.info.pop(WROTE_REPORTS, None)


@event.listens_for(Report, "before_insert")
def _report_stored(_mapper: Mapper[Report], connection: Connection, target: Report) -> None:
    target.stream_seq = next_stream_seq(connection, target.track, rebase=False)


@event.listens_for(Report, "after_update")
@event.listens_for(Report, "after_delete")
def _report_changed(_mapper: Mapper[Report], connection: Connection, target: Report) -> None:
    next_stream_seq(connection, target.track, rebase=True)
