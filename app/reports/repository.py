"""Queries on ``reports``; never commits."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import InstrumentedAttribute, Session, defer

from app import pagination
from app.jobs.models import Job
from app.reports.models import Report, VerdictCount


@dataclass(frozen=True)
class ReportFilters:
    """What a listing keeps; None means any."""

    track: str | None = None
    custom_track: bool | None = None
    system_verdict: str | None = None
    practical_verdict: str | None = None
    mechanism_ok: bool | None = None
    mechanism_none: bool = False
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    submitter_id: str | None = None
    family: str | None = None

    def clauses(self) -> list[ColumnElement[bool]]:
        """WHERE clauses for these filters."""
        out: list[ColumnElement[bool]] = []
        if self.track is not None:
            out.append(Report.track == self.track)
        if self.custom_track is not None:
            out.append(Report.custom_track.is_(self.custom_track))
        if self.system_verdict is not None:
            out.append(Report.system_verdict == self.system_verdict)
        if self.practical_verdict is not None:
            out.append(Report.practical_verdict == self.practical_verdict)
        if self.mechanism_none:
            out.append(Report.mechanism_ok.is_(None))
        elif self.mechanism_ok is not None:
            out.append(Report.mechanism_ok.is_(self.mechanism_ok))
        if self.created_after is not None:
            out.append(Report.created_at >= self.created_after)
        if self.created_before is not None:
            out.append(Report.created_at < self.created_before)
        if self.submitter_id is not None:
            out.append(Report.submitter_id == self.submitter_id)
        if self.family is not None:
            out.append(Report.family == self.family)
        return out


@dataclass(frozen=True)
class SortKey:
    """A keyset order: the column, its direction, whether it may be null."""

    column: InstrumentedAttribute[Any]
    descending: bool
    nullable: bool


def add_report(session: Session, report: Report) -> Report:
    """Stage a report."""
    session.add(report)
    return report


def get_report(session: Session, report_id: str) -> Report | None:
    """A report by id, with its JSON body."""
    return session.get(Report, report_id)


def get_report_of_job(session: Session, job_id: str) -> Report | None:
    """The report a job wrote, if any."""
    return session.scalars(select(Report).where(Report.job_id == job_id)).first()


def list_reports(
    session: Session, filters: ReportFilters, sort: SortKey, limit: int, after: tuple[Any, str] | None
) -> list[Report]:
    """Report rows (without the JSON body) in ``sort`` order after the keyset position."""
    stmt = select(Report).options(defer(Report.body)).where(*filters.clauses())
    if after is not None:
        stmt = stmt.where(
            pagination.after(sort.column, Report.id, after[0], after[1], sort.descending, sort.nullable)
        )
    stmt = stmt.order_by(*pagination.order_by(sort.column, Report.id, sort.descending, sort.nullable))
    return list(session.scalars(stmt.limit(limit)))


def attempts_before(session: Session, job: Job) -> tuple[int, int, int, int]:
    """Jobs on ``job``'s track submitted before it: ``(of its family, of them judged helps,
    of its key, of them judged helps)``, as stored now (one query; ties broken by id)."""
    helps = Report.practical_verdict == "helps"
    same_family = Job.family == job.family
    same_key = Job.submitter_id == job.submitter_id
    before = or_(Job.created_at < job.created_at, and_(Job.created_at == job.created_at, Job.id < job.id))
    stmt = (
        select(
            func.count().filter(same_family), func.count(Report.id).filter(same_family, helps),
            func.count().filter(same_key), func.count(Report.id).filter(same_key, helps),
        )
        .select_from(Job)
        .outerjoin(Report, Report.job_id == Job.id)
        .where(Job.track == job.track, before, or_(same_family, same_key))
    )
    row = session.execute(stmt).one()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def p_helps_of_tracks(session: Session, tracks: set[str] | None) -> list[tuple[Any, ...]]:
    """``(report id, track, baseline, p_helps, worked, submitter_id, family, practical_detail,
    track_version, seed_epoch, device_class, public_data)`` of every judged idea on ``tracks``
    (None: every track) that counts (``Report.counted``), from the (track, p_helps) index."""
    stmt = select(Report.id, Report.track, Report.baseline, Report.p_helps, Report.worked, Report.submitter_id,
                  Report.family, Report.practical_detail, Report.track_version, Report.seed_epoch,
                  Report.device_class, Report.public_data).where(
        Report.p_helps.is_not(None), Report.counted.is_(True))
    if tracks is not None:
        stmt = stmt.where(Report.track.in_(sorted(tracks)))
    return [tuple(row) for row in session.execute(stmt) if row[3] is not None]


def week_of(day: dt.date) -> dt.date:
    """The Monday of ``day``'s ISO week."""
    return day - dt.timedelta(days=day.weekday())


def stream_key(report: Report) -> dict[str, Any]:
    """A report's rollup row key (``VerdictCount``): its day, track, stream and verdict pair."""
    day = report.created_at.astimezone(dt.UTC).date()
    return {"day": day, "track": report.track, "track_version": report.track_version or 0,
            "seed_epoch": report.seed_epoch or 0, "device_class": report.device_class or "cpu",
            "system_verdict": report.system_verdict, "practical_verdict": report.practical_verdict}


def count_verdict(session: Session, report: Report) -> None:
    """Add ``report`` to the day's verdict counts of its stream (an upsert; Postgres and SQLite),
    unless it counts nowhere (``Report.counted``) or was judged against a matched baseline (the
    track's totals are its canonical stream's: issue 25.5)."""
    if report.counted is False or (report.baseline or "canonical") != "canonical":
        return
    key = stream_key(report)
    dialect = session.get_bind().dialect.name
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    stmt = insert(VerdictCount).values(**key, week=week_of(key["day"]), n=1)
    stmt = stmt.on_conflict_do_update(index_elements=list(key), set_={"n": VerdictCount.n + 1})
    session.execute(stmt)


def uncount_verdict(session: Session, report: Report) -> None:
    """Take ``report`` back out of its day's verdict counts (what ``count_verdict`` added: an
    operator withdrew the vouch for its custom track)."""
    if (report.baseline or "canonical") != "canonical":
        return
    where = [getattr(VerdictCount, column) == value for column, value in stream_key(report).items()]
    session.execute(update(VerdictCount).where(*where).values(n=VerdictCount.n - 1))
    session.execute(delete(VerdictCount).where(*where, VerdictCount.n <= 0))


def count_verdicts(
    session: Session, bucket: str, track: str | None, since: dt.date, until: dt.date,
    stream: dict[str, Any] | None = None,
) -> list[tuple[dt.date, str, str, str, int]]:
    """``(period, track, system_verdict, practical_verdict, n)`` over ``[since, until]``, summed
    over the streams (``stream``: only those with these ``track_version`` / ``seed_epoch`` /
    ``device_class``)."""
    period = VerdictCount.week if bucket == "week" else VerdictCount.day
    n = func.sum(VerdictCount.n)
    stmt = (
        select(period, VerdictCount.track, VerdictCount.system_verdict, VerdictCount.practical_verdict, n)
        .where(VerdictCount.day >= since, VerdictCount.day <= until)
        .group_by(period, VerdictCount.track, VerdictCount.system_verdict, VerdictCount.practical_verdict)
        .order_by(period, VerdictCount.track)
    )
    if track is not None:
        stmt = stmt.where(VerdictCount.track == track)
    for column, value in (stream or {}).items():
        stmt = stmt.where(getattr(VerdictCount, column) == value)
    return [(p, t, s, v, int(c)) for p, t, s, v, c in session.execute(stmt)]
