"""Routes: reports by id or job, the filtered listing, and the verdict summary."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import AfterValidator, BeforeValidator

from app.db import SessionDep
from app.errors import ApiCode, ApiError, error_responses
from app.jobs import service as jobs_service
from app.keys.deps import ReaderDep
from app.reports import service
from app.reports.discoveries import StreamFilter
from app.reports.repository import ReportFilters
from app.reports.schemas import (
    MechanismFilter,
    PracticalVerdict,
    ReportPage,
    ReportSort,
    ReportView,
    SystemVerdict,
    VerdictSummary,
)

router = APIRouter(tags=["reports"], responses=error_responses(401, 403, 429))
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _iso_only(value: Any) -> Any:
    """Query dates and times in ISO 8601 only: pydantic alone would read ``0`` as 1970-01-01."""
    if isinstance(value, str) and not _ISO_DAY.match(value):
        raise ValueError("expected an ISO 8601 date (YYYY-MM-DD) or date-time")
    return value


def _in_utc(value: dt.datetime) -> dt.datetime:
    """A naive time is UTC; an aware one must be expressible in UTC (0001-01-01T00:00+06:00 is not)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError("the time is out of range once converted to UTC") from None


IsoDate = Annotated[dt.date, BeforeValidator(_iso_only)]
IsoDateTime = Annotated[dt.datetime, BeforeValidator(_iso_only), AfterValidator(_in_utc)]


@router.get("/v1/jobs/{job_id}/report", response_model=ReportView, responses=error_responses(404, 409))
def get_job_report(job_id: str, session: SessionDep, caller: ReaderDep) -> ReportView:
    """The full report of a succeeded job (409 report_not_ready before that)."""
    job = jobs_service.get_job_for_report(session, job_id, caller)
    return service.view_of(session, service.report_of_job(session, job), operator=caller.is_operator)


@router.get("/v1/reports/{report_id}", response_model=ReportView, responses=error_responses(404))
def get_report(report_id: str, session: SessionDep, caller: ReaderDep) -> ReportView:
    """The full report (PROTOCOL.md) with its verdicts and headline numbers (an operator's
    with the per-seed values of reusable seeds, which agents and viewers do not see)."""
    return service.view_of(session, service.get_report(session, report_id), operator=caller.is_operator)


@dataclass(frozen=True)
class ReportQuery:
    """A page request of the report listing: its filters, sort, size and cursor."""

    filters: ReportFilters
    sort: ReportSort
    limit: int
    cursor: str | None


async def report_query(
    track: Annotated[str | None, Query(max_length=80)] = None,
    track_kind: Annotated[
        Literal["builtin", "custom"] | None, Query(description="reports on built-in or on custom tracks")
    ] = None,
    system_verdict: SystemVerdict | None = None,
    practical_verdict: PracticalVerdict | None = None,
    mechanism_ok: Annotated[
        MechanismFilter | None, Query(description="true, false, or none (no mechanism declared)")
    ] = None,
    created_after: Annotated[IsoDateTime | None, Query(description="inclusive, ISO 8601 (UTC if naive)")] = None,
    created_before: Annotated[IsoDateTime | None, Query(description="exclusive, ISO 8601")] = None,
    submitter: Annotated[str | None, Query(max_length=32, description="a key id")] = None,
    family: Annotated[
        str | None, Query(max_length=40, description="an idea family (a report's family): its re-rolls")
    ] = None,
    sort: ReportSort = ReportSort.CREATED_DESC,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=2000,
                                        description="next_cursor of the previous page")] = None,
) -> ReportQuery:
    """The listing's query parameters (the API's and the dashboard's reports table); async: no
    thread hop for what is only parsing."""
    filters = ReportFilters(
        track=track,
        custom_track=None if track_kind is None else track_kind == "custom",
        system_verdict=system_verdict.value if system_verdict else None,
        practical_verdict=practical_verdict.value if practical_verdict else None,
        mechanism_ok=None if mechanism_ok in (None, MechanismFilter.NONE) else mechanism_ok is MechanismFilter.TRUE,
        mechanism_none=mechanism_ok is MechanismFilter.NONE,
        created_after=created_after,
        created_before=created_before,
        submitter_id=submitter,
        family=family,
    )
    return ReportQuery(filters, sort, limit, cursor)


ReportQueryDep = Annotated[ReportQuery, Depends(report_query)]


@router.get("/v1/reports", response_model=ReportPage, responses=error_responses(400, 422))
def list_reports(session: SessionDep, _caller: ReaderDep, query: ReportQueryDep) -> ReportPage:
    """Report rows filtered by track (or built-in vs custom), verdicts, mechanism, time, submitter and
    idea family; cursor-paged. Each row has its Benjamini-Hochberg q-value over every idea judged on
    its track so far (``q_value``) and over those against the same baseline (``q_value_baseline``);
    ``sort=p_helps`` lists the track's best evidence first (the q-values' order)."""
    return service.report_page(session, query.filters, query.sort, query.limit, query.cursor)


@router.get("/v1/verdicts/summary", response_model=VerdictSummary, responses=error_responses(422))
def verdict_summary(
    session: SessionDep,
    _caller: ReaderDep,
    bucket: Literal["day", "week"] = "day",
    track: Annotated[str | None, Query(max_length=80)] = None,
    track_kind: Annotated[
        Literal["builtin", "custom"] | None, Query(description="only built-in or only custom tracks")
    ] = None,
    since: Annotated[
        IsoDate | None, Query(description="first day, inclusive (UTC); default: 30 days / 26 weeks back")
    ] = None,
    until: Annotated[IsoDate | None, Query(description="last day, inclusive (UTC); default: today")] = None,
    track_version: Annotated[int | None, Query(ge=0, le=10**9, description=(
        "only reports judged on this version of their track (0: reports that did not say)"))] = None,
    seed_epoch: Annotated[int | None, Query(ge=0, le=10**9, description=(
        "only reports judged under this seed epoch (its secret seeds; 0: reports that did not say)"))] = None,
    device_class: Annotated[Literal["cpu", "cuda", "mps"] | None, Query(description=(
        "only reports judged on this class of device"))] = None,
) -> VerdictSummary:
    """Counts of each (system, practical) verdict pair by track and day or week, for dashboards.

    A track's reports fall in streams: its version, the seed epoch and the device class they were
    judged under (other data, other secret seeds or another device are other experiments). The
    counts and each track's discoveries add its streams up, or keep those the filters name."""
    if since is not None and until is not None and since > until:
        raise ApiError(422, ApiCode.VALIDATION_ERROR, "query.since: must not be after query.until")
    stream = StreamFilter(track_version, seed_epoch, device_class)
    return service.verdict_summary(session, bucket, track, since, until, track_kind,
                                   stream if stream != StreamFilter() else None)
