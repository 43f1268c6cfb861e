"""Reports: building a row from the engine's report, reading, listing, summarising."""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
from collections import defaultdict
from typing import Any, Literal

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app import pagination
from app.errors import ApiCode, ApiError
from app.ids import new_id
from app.jobs.models import FINISHED, Job, JobStatus
from app.reports import discoveries, repository
from app.reports.discoveries import QValues
from app.reports.models import Report
from app.reports.repository import ReportFilters, SortKey
from app.reports.schemas import (
    Discoveries,
    PracticalVerdict,
    ReportLinks,
    ReportPage,
    ReportSort,
    ReportSummary,
    ReportView,
    SystemVerdict,
    VerdictCounts,
    VerdictSummary,
)
from app.tracks.models import CustomTrackRow
from bench.catalog import is_builtin
from bench.report import withhold_reusable_seeds

log = logging.getLogger("ideabench.reports")

SORTS: dict[ReportSort, SortKey] = {
    ReportSort.CREATED_DESC: SortKey(Report.created_at, True, False),
    ReportSort.CREATED: SortKey(Report.created_at, False, False),
    ReportSort.P_VALUE: SortKey(Report.p_value, False, True),
    ReportSort.P_VALUE_DESC: SortKey(Report.p_value, True, True),
    ReportSort.DELTA: SortKey(Report.delta_mean, False, True),
    ReportSort.DELTA_DESC: SortKey(Report.delta_mean, True, True),
    ReportSort.P_HELPS: SortKey(Report.p_helps, False, True),
}


FAMILY = re.compile(r"graph-v1:[0-9a-f]{16}")


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


def baseline_label(baseline_code: str | None) -> str:
    """What an idea was compared against, and the stream its hypotheses are counted in:
    ``canonical`` (the track's baseline), or ``matched`` (any matched baseline). Until session
    36 a matched baseline had a stream of its own, keyed by its text's hash and then by its graph
    family: a comment, then an exact no-op the family did not fold (``-(-h)``), opened a fresh
    stream per re-roll, where q is p and the idea's attempts restart at one (red teams, session
    36). Nothing a submitter writes keys the stream now. Reports stored before keep their
    ``matched:<16 hex digits>`` (migration 0004), each its own stream."""
    return "canonical" if baseline_code is None else "matched"


def adopt_graph_family(session: Session, job: Job, body: dict[str, Any]) -> None:
    """Give ``job`` the family of the model it captured (``bench.family.graph_family``, in
    ``bench_report.capture.idea.family``) in place of the one its source text gave at intake:
    an import alias, a no-op line, reordered statements or an ``nn.Identity()`` change the
    text, not the graph (issue 25.6). A job that ended before its capture keeps its text's."""
    capture = ((body.get("bench_report") or {}).get("capture") or {}).get("idea") or {}
    family = capture.get("family") if isinstance(capture, dict) else None
    if isinstance(family, str) and FAMILY.fullmatch(family):
        job.family = family
        session.execute(update(Job).where(Job.id == job.id).values(family=family))


def mark_own_track(session: Session, job: Job, body: dict[str, Any]) -> None:
    """A verdict on a custom track the job's own key registered is the key's own word: it
    chose the data, the split and the baseline. The report says so (``bench_report.own_track``)
    and enters no totals, q-values or discoveries (``counted`` false; issue 25.8). Any version's
    author counts: an operator's upload of a version (``may_take_over``, or the same file
    validated again after a rotation) does not make the track another's."""
    if is_builtin(job.track) or not isinstance(body.get("bench_report"), dict):
        return
    track = session.get(CustomTrackRow, job.track)
    if track is None:
        return
    authors = set(session.scalars(select(CustomTrackRow.author).where(CustomTrackRow.name == track.name)))
    if job.submitter_id in authors:
        body["bench_report"]["own_track"] = True


def track_vouched(session: Session, track: str) -> bool:
    """Whether an operator vouches for ``track``'s version (a custom ``name@version``); a
    built-in track needs no vouch. Call it in the transaction that stores the report: it first
    writes the track's row (a no-op update), so that a report stored now and an operator's vouch
    or withdrawal (``recount_track``, which writes the same row) are ordered, the report seeing
    the vouch or the recount seeing the report. A lock to read would not do: SQLite has none,
    and its driver opens the write transaction only at the first write (red team: a withdrawal
    between the read and the store left a ``helps`` counted on an unvouched track)."""
    if is_builtin(track):
        return True
    session.execute(update(CustomTrackRow).where(CustomTrackRow.id == track)
                    .values(vouched_at=CustomTrackRow.vouched_at).execution_options(synchronize_session=False))
    stmt = select(CustomTrackRow.vouched_at).where(CustomTrackRow.id == track)
    return session.execute(stmt).scalar_one_or_none() is not None


def counts(body: dict[str, Any]) -> bool:
    """Whether a report's own body lets it count (the track's vouch is ``track_vouched``): not
    judged under a weak sandbox, not on a custom track its own key registered, not over a
    custom baseline that did not beat the bench's reference fits."""
    bench = body.get("bench_report")
    bench = bench if isinstance(bench, dict) else {}
    sandbox = bench.get("sandbox")
    return (not (isinstance(sandbox, dict) and sandbox.get("complete") is False)
            and bench.get("own_track") is not True and not _weak_track(body))


def build_checked(body: dict[str, Any]) -> bool:
    """Whether a custom track's report says its job's baseline build was validation's, bit for
    bit (``custom_track.build_checked``: the job ran in validation's seed epoch). Deny by
    default: a report without it (from before session 21, or judged after a seed rotation)
    counts nowhere, vouched or not."""
    track = (body.get("bench_report") or {}).get("custom_track")
    return isinstance(track, dict) and track.get("build_checked") is True


def recount_track(session: Session, track: str, vouched: bool) -> int:
    """Set ``counted`` of every report on custom track version ``track`` for its vouch now
    (``vouched``), moving each report that changes into or out of its day's verdict counts;
    the number that changed. The caller holds the track's row for update and commits."""
    changed = 0
    stmt = (select(Report).where(Report.track == track, Report.custom_track.is_(True)).order_by(Report.id)
            .execution_options(yield_per=500))
    for report in session.scalars(stmt):
        now = vouched and counts(report.body) and build_checked(report.body)
        if now == report.counted:
            continue
        report.counted = now
        if now:
            repository.count_verdict(session, report)
        else:
            repository.uncount_verdict(session, report)
        changed += 1
    return changed


def attempts_block(session: Session, job: Job) -> dict[str, Any]:
    """The report's ``attempts`` (PROTOCOL.md 6): the jobs of this idea family and of this key
    submitted on this track before this one, and how many of those were judged ``helps``."""
    family, family_helps, key, key_helps = repository.attempts_before(session, job)
    return {"family": job.family, "family_before": family, "family_helps_before": family_helps,
            "key": job.submitter_id, "key_before": key, "key_helps_before": key_helps,
            "name": job.name}


def build_report_row(
    job: Job, body: dict[str, Any], now: dt.datetime, attempts: dict[str, Any] | None = None, *,
    track_vouched: bool = False,
) -> Report:
    """The ``reports`` row for ``job``'s report JSON (with its ``attempts`` block, when given,
    in ``bench_report``); raises ``InvalidReport``. On a custom track it counts only when
    ``track_vouched`` (read with ``track_vouched()``) and its build was checked (``build_checked``);
    deny by default."""
    body = json_safe(body)
    if attempts is not None and isinstance(body.get("bench_report"), dict):
        body["bench_report"]["attempts"] = attempts
    system = body.get("system_verdict")
    practical = body.get("practical_verdict")
    if system not in {v.value for v in SystemVerdict} or practical not in {v.value for v in PracticalVerdict}:
        raise InvalidReport(f"report verdicts are {system!r}/{practical!r}")
    comparison = (body.get("bench_report") or {}).get("comparison") or {}
    delta, stage = deciding_delta(body)
    p_helps = _finite_or_none((body.get("bench_report") or {}).get("p_helps"))
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
        delta_mean=delta,
        delta_stage=stage,
        family=job.family,
        baseline=baseline_label(job.baseline_code),
        p_helps=p_helps if p_helps is not None and 0.0 <= p_helps <= 1.0 else None,
        counted=counts(body) and (is_builtin(job.track) or track_vouched and build_checked(body)),
        created_at=now,
        body=body,
        **stream_of(body),
    )


def deciding_delta(body: dict[str, Any]) -> tuple[float | None, str]:
    """(delta_mean, stage) of a report: the confirmation's mean difference when one ran (it
    decided the verdict, and the report page shows it), else the screening's (issue 27.7)."""
    raw = body.get("bench_report")
    bench: dict[str, Any] = raw if isinstance(raw, dict) else {}
    stage, block = "screening", bench
    confirmation = bench.get("confirmation")
    if bench.get("decided_by") == "confirmation" and isinstance(confirmation, dict):
        stage, block = "confirmation", confirmation
    comparison = block.get("comparison")
    return _finite_or_none(comparison.get("delta_mean") if isinstance(comparison, dict) else None), stage


def stream_of(body: dict[str, Any]) -> dict[str, Any]:
    """The stream columns of a report (``Report.track_version`` ... ``public_data``) from its
    body (migration 0012 backfills stored reports with the same rule)."""
    found = body.get("bench_report")
    bench: dict[str, Any] = found if isinstance(found, dict) else {}
    version, commitment = bench.get("track_version"), bench.get("seed_commitment")
    epoch = commitment.get("epoch") if isinstance(commitment, dict) else None
    return {"track_version": version if isinstance(version, int) else None,
            "seed_epoch": epoch if isinstance(epoch, int) else None,
            "device_class": str(bench.get("device") or "cpu").partition(":")[0][:16],
            "public_data": bench.get("public_data") is True}


def _weak_track(body: dict[str, Any]) -> bool:
    """Whether the report is on a custom track whose baseline did not beat the bench's reference
    fits at validation (``custom_track.weak_baseline``): a win over it is no discovery."""
    track = (body.get("bench_report") or {}).get("custom_track")
    return isinstance(track, dict) and track.get("weak_baseline") is True


def summary_of(report: Report, q: QValues | None = None) -> ReportSummary:
    """The light row of a report (``q``: its q-values, ``discoveries.qvalues``)."""
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
        delta_stage=report.delta_stage or "screening",
        family=report.family,
        baseline=report.baseline,
        p_helps=report.p_helps,
        q_value=q.track if q else None,
        q_value_baseline=q.baseline if q else None,
        counted=report.counted is not False,
        submitter=report.submitter_id,
        created_at=report.created_at,
        links=ReportLinks(self=f"/v1/reports/{report.id}", job=f"/v1/jobs/{report.job_id}"),
    )


def summaries(session: Session, reports: list[Report]) -> list[ReportSummary]:
    """The light rows of ``reports``, with their q-values over everything stored so far."""
    q = discoveries.qvalues(session, reports)
    return [summary_of(r, q.get(r.id)) for r in reports]


def view_of(session: Session, report: Report, *, operator: bool = False) -> ReportView:
    """The report as ``operator`` or not sees it: an agent or viewer gets it without the
    per-seed values of reusable seeds (``bench.report.withhold_reusable_seeds``)."""
    (summary,) = summaries(session, [report])
    return ReportView(**dict(summary), report=report.body if operator else withhold_reusable_seeds(report.body))


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
        ended = JobStatus(job.status) in FINISHED
        hint = (f"Job {job.id} ended {job.status} and will never have a report: read its error with GET "
                f"/v1/jobs/{job.id} (code, message, hint), fix the idea and submit it again." if ended else None)
        raise ApiError(
            409, ApiCode.REPORT_NOT_READY,
            f"Job {job.id} is {job.status}{detail}; it has no report{'' if ended else ' yet'}.", hint,
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


def report_page(session: Session, filters: ReportFilters, sort: ReportSort, limit: int,
                cursor: str | None) -> ReportPage:
    """A page of the listing as light rows with their q-values."""
    rows, next_cursor = list_page(session, filters, sort, limit, cursor)
    return ReportPage(items=summaries(session, rows), next_cursor=next_cursor)


DEFAULT_SUMMARY_DAYS = {"day": 30, "week": 7 * 26}


def summary_window(bucket: str, since: dt.date | None, until: dt.date | None) -> tuple[dt.date, dt.date]:
    """The range a summary covers: ``until`` defaults to today (UTC), ``since`` to
    30 days (by day) or 26 weeks (by week) before it."""
    until = until or dt.datetime.now(dt.UTC).date()
    span = dt.timedelta(days=DEFAULT_SUMMARY_DAYS[bucket] - 1)
    since = since or (until - span if until - dt.date.min >= span else dt.date.min)
    return since, until


def _kind(track: str) -> Literal["builtin", "custom"]:
    return "builtin" if is_builtin(track) else "custom"


def verdict_summary(
    session: Session, bucket: str, track: str | None, since: dt.date | None, until: dt.date | None,
    track_kind: str | None = None, stream: discoveries.StreamFilter | None = None,
) -> VerdictSummary:
    """Counts of each verdict pair by track and day (or ISO week, starting Monday), over the
    tracks' streams (``stream``: only those of one version, seed epoch and/or device class)."""
    since, until = summary_window(bucket, since, until)
    per_period: dict[tuple[dt.date, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    where = {k: v for k, v in vars(stream).items() if v is not None} if stream is not None else None
    for period, trk, system, practical, n in repository.count_verdicts(session, bucket, track, since, until, where):
        if track_kind is not None and _kind(trk) != track_kind:
            continue
        pair = f"{system}/{practical}"
        per_period[(period, trk)][pair] += n
        totals[trk][pair] += n
    accounting = discoveries.per_track(session, {track} if track is not None else None, stream)

    def discoveries_of(trk: str) -> Discoveries | None:
        found = accounting.get(trk)
        return Discoveries(**vars(found)) if found is not None else None

    return VerdictSummary(
        bucket="week" if bucket == "week" else "day",
        since=since,
        until=until,
        rows=[
            VerdictCounts(period=p, track=t, kind=_kind(t), counts=dict(c), total=sum(c.values()))
            for (p, t), c in sorted(per_period.items())
        ],
        totals=[
            VerdictCounts(period=None, track=t, kind=_kind(t), counts=dict(c), total=sum(c.values()),
                          discoveries=discoveries_of(t))
            for t, c in sorted(totals.items())
        ],
    )
