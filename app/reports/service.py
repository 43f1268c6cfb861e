"""Reports: building a row from the engine's report, reading, listing, summarising."""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections import defaultdict
from typing import Any, Literal

from sqlalchemy.orm import Session

from app import pagination
from app.errors import ApiCode, ApiError
from app.ids import new_id
from app.jobs.models import Job
from app.reports import repository
from app.reports.models import Report
from app.reports.repository import ReportFilters, SortKey
from app.reports.schemas import (
    PracticalVerdict,
    ReportLinks,
    ReportSort,
    ReportSummary,
    ReportView,
    SystemVerdict,
    VerdictCounts,
    VerdictSummary,
)
from bench.catalog import is_builtin

log = logging.getLogger("ideabench.reports")

SORTS: dict[ReportSort, SortKey] = {
    ReportSort.CREATED_DESC: SortKey(Report.created_at, True, False),
    ReportSort.CREATED: SortKey(Report.created_at, False, False),
    ReportSort.P_VALUE: SortKey(Report.p_value, False, True),
    ReportSort.P_VALUE_DESC: SortKey(Report.p_value, True, True),
    ReportSort.DELTA: SortKey(Report.delta_mean, False, True),
    ReportSort.DELTA_DESC: SortKey(Report.delta_mean, True, True),
}


class InvalidReport(ValueError):
    """The engine's report lacks what the store indexes."""


def _finite_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None (JSON, and Postgres JSONB, reject them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def build_report_row(job: Job, body: dict[str, Any], now: dt.datetime) -> Report:
    """The ``reports`` row for ``job``'s report JSON; raises ``InvalidReport``."""
    body = json_safe(body)
    system = body.get("system_verdict")
    practical = body.get("practical_verdict")
    if system not in {v.value for v in SystemVerdict} or practical not in {v.value for v in PracticalVerdict}:
        raise InvalidReport(f"report verdicts are {system!r}/{practical!r}")
    comparison = (body.get("bench_report") or {}).get("comparison") or {}
    mechanism = body.get("mechanism_ok")
    return Report(
        id=new_id("rep"),
        job_id=job.id,
        track=job.track,
        custom_track=bool((body.get("bench_report") or {}).get("custom_track")),
        name=job.name,
        submitter_id=job.submitter_id,
        system_verdict=system,
        practical_verdict=practical,
        practical_detail=body.get("practical_detail"),
        mechanism_ok=None if mechanism is None else bool(mechanism),
        worked=bool(body.get("worked", system == SystemVerdict.WORKED.value)),
        p_value=_finite_or_none(comparison.get("p_value")),
        delta_mean=_finite_or_none(comparison.get("delta_mean")),
        created_at=now,
        body=body,
    )


def summary_of(report: Report) -> ReportSummary:
    """The light row of a report."""
    return ReportSummary(
        report_id=report.id,
        job_id=report.job_id,
        track=report.track,
        custom_track=report.custom_track,
        name=report.name,
        system_verdict=report.system_verdict,
        practical_verdict=report.practical_verdict,
        practical_detail=report.practical_detail,
        mechanism_ok=report.mechanism_ok,
        worked=report.worked,
        p_value=report.p_value,
        delta_mean=report.delta_mean,
        submitter=report.submitter_id,
        created_at=report.created_at,
        links=ReportLinks(self=f"/v1/reports/{report.id}", job=f"/v1/jobs/{report.job_id}"),
    )


def view_of(report: Report) -> ReportView:
    """The whole report."""
    return ReportView(**dict(summary_of(report)), report=report.body)


def get_report(session: Session, report_id: str) -> Report:
    """A report by id; 404 ``report_not_found``."""
    report = repository.get_report(session, report_id) if len(report_id) <= 64 else None
    if report is None:
        raise ApiError(404, ApiCode.REPORT_NOT_FOUND, f"No report with id {report_id!r}.")
    return report


def report_of_job(session: Session, job: Job) -> Report:
    """The report of a job; 409 ``report_not_ready`` until it has succeeded."""
    report = repository.get_report_of_job(session, job.id)
    if report is None:
        detail = f" ({job.error_code}: {job.error_message})" if job.error_code else ""
        raise ApiError(
            409, ApiCode.REPORT_NOT_READY, f"Job {job.id} is {job.status}{detail}; it has no report."
        )
    return report


def list_page(
    session: Session, filters: ReportFilters, sort: ReportSort, limit: int, cursor: str | None
) -> tuple[list[Report], str | None]:
    """A page of reports and the next cursor."""
    key = SORTS[sort]
    after = None
    if cursor is not None:
        value, row_id = pagination.decode_cursor(cursor, sort.value)
        typed = pagination.cursor_datetime(value) if not key.nullable else pagination.cursor_float(value)
        after = (typed, row_id)
    rows = repository.list_reports(session, filters, key, limit + 1, after)
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = None
    if more:
        last = rows[-1]
        next_cursor = pagination.encode_cursor(sort.value, getattr(last, key.column.key), last.id)
    return rows, next_cursor


DEFAULT_SUMMARY_DAYS = {"day": 30, "week": 7 * 26}


def summary_window(bucket: str, since: dt.date | None, until: dt.date | None) -> tuple[dt.date, dt.date]:
    """The range a summary covers: ``until`` defaults to today (UTC), ``since`` to
    30 days (by day) or 26 weeks (by week) before it."""
    until = until or dt.datetime.now(dt.UTC).date()
    since = since or until - dt.timedelta(days=DEFAULT_SUMMARY_DAYS[bucket] - 1)
    return since, until


def _kind(track: str) -> Literal["builtin", "custom"]:
    return "builtin" if is_builtin(track) else "custom"


def verdict_summary(
    session: Session, bucket: str, track: str | None, since: dt.date | None, until: dt.date | None,
    track_kind: str | None = None,
) -> VerdictSummary:
    """Counts of each verdict pair by track and day (or ISO week, starting Monday)."""
    since, until = summary_window(bucket, since, until)
    per_period: dict[tuple[dt.date, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for period, trk, system, practical, n in repository.count_verdicts(session, bucket, track, since, until):
        if track_kind is not None and _kind(trk) != track_kind:
            continue
        pair = f"{system}/{practical}"
        per_period[(period, trk)][pair] += n
        totals[trk][pair] += n
    return VerdictSummary(
        bucket="week" if bucket == "week" else "day",
        since=since,
        until=until,
        rows=[
            VerdictCounts(period=p, track=t, kind=_kind(t), counts=dict(c), total=sum(c.values()))
            for (p, t), c in sorted(per_period.items())
        ],
        totals=[
            VerdictCounts(period=None, track=t, kind=_kind(t), counts=dict(c), total=sum(c.values()))
            for t, c in sorted(totals.items())
        ],
    )
