"""The dashboard's pages: server-rendered HTML (Jinja2) from the services the API uses.

Pages: verdict history (``/dashboard``), the reports table, one report, the tracks and one
track, the jobs table and one job (agents their own, operators every job), and the operator
page; sign-in and sign-out. Charts are Plotly figures built in
``app.dashboard.charts`` and drawn by the plotly.js that ships in the ``plotly`` package,
served from here: a page loads nothing from another host (its Content-Security-Policy says
so to the browser as well).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import importlib.util
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from app.dashboard import charts, readout
from app.dashboard.auth import (
    OperatorViewerDep,
    Sessions,
    SubmitterViewerDep,
    Viewer,
    ViewerDep,
    check_csrf,
    origin_of,
    same_origin,
)
from app.db import SessionDep, db_now
from app.errors import ApiCode, ApiError
from app.health.state import failures_by_day, job_stages, read_state, running_jobs
from app.jobs import repository as jobs_repository
from app.jobs import service as jobs_service
from app.jobs.models import FINISHED, JobStatus, status_filter
from app.jobs.schemas import JobView
from app.reports import service as reports_service
from app.reports.repository import ReportFilters
from app.reports.routes import IsoDate, ReportQueryDep
from app.reports.schemas import MechanismFilter, PracticalVerdict, ReportSort, SystemVerdict
from app.settings import Settings
from app.tracks import service as tracks_service
from bench.catalog import list_cards
from bench.errors import BenchError

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.filters["human"] = readout.human  # numbers, flags and blocks as a person reads them
templates.env.filters["entries"] = readout.entries
templates.env.filters["p_method"] = readout.method_of
router = APIRouter(prefix="/dashboard", include_in_schema=False)
PAGE_SIZE = 50
FAILURE_DAYS = 30
JOB_ID = re.compile(r"job_[0-9a-f]{1,40}")

# A page may load only what this server serves; plotly.js sets inline styles on its SVG.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _plotly_js() -> tuple[Path, str]:
    """plotly.js inside the ``plotly`` package (found without importing it) and its version."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the plotly package is not installed (pip install -e '.[server]')")
    root = Path(next(iter(spec.submodule_search_locations)))
    return root / "package_data" / "plotly.min.js", importlib.metadata.version("plotly")


PLOTLY_JS, PLOTLY_VERSION = _plotly_js()
PLOTLY_URL = f"/dashboard/static/plotly-{PLOTLY_VERSION}.min.js"


def page(request: Request, name: str, viewer: Viewer | None, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A rendered page with the dashboard's security headers."""
    response = templates.TemplateResponse(request, name, {
        "viewer": viewer, "plotly_url": PLOTLY_URL, "nav": name.removesuffix(".html"), **context,
    }, status_code=status_code)
    response.headers.update(SECURITY_HEADERS)
    return response


def safe_next(target: str | None) -> str:
    """A local dashboard path to return to after sign-in (anything else: the dashboard's home)."""
    if not target or not target.startswith("/dashboard") or target.startswith("//") or "\\" in target:
        return "/dashboard"
    if any(c in target for c in "\r\n\t"):
        return "/dashboard"
    return target


def _query(**params: Any) -> str:
    """A query string of the non-empty ``params``."""
    return urlencode({k: v for k, v in params.items() if v not in (None, "")})


def _track_names(session: Any) -> list[str]:
    return [c["name"] for c in list_cards()] + [r.id for r in tracks_service.list_custom(session)]


# --- sign-in ---------------------------------------------------------------------------------

@router.get("/login")
def login_form(request: Request, next: str | None = None) -> HTMLResponse:  # noqa: A002 - the query's name
    return page(request, "login.html", None, next=safe_next(next), error=None)


@router.post("/login")
async def login(request: Request, key: Annotated[str, Form(max_length=200)] = "",
                next: Annotated[str, Form(max_length=2000)] = "/dashboard") -> Response:  # noqa: A002
    """Check the key once; on success a session cookie and a redirect to ``next``. A sign-in
    posted from another site is refused (no one can sign a visitor in as someone else)."""
    if not same_origin(request):
        raise ApiError(403, ApiCode.CSRF_FAILED, "The sign-in form was sent from another site.")
    cache = request.app.state.key_cache
    known = await run_in_threadpool(cache.lookup, request.app.state.sessionmaker, key.strip()) if key else None
    if known is None:
        return page(request, "login.html", None, status_code=401, next=safe_next(next),
                    error="That key is unknown or revoked.")
    response = RedirectResponse(safe_next(next), status_code=303)
    sessions: Sessions = request.app.state.dashboard_sessions
    sessions.issue(response, known, secure=origin_of(request)[0] == "https")
    return response


@router.post("/logout")
def logout(request: Request, viewer: ViewerDep, csrf: Annotated[str, Form(max_length=200)] = "") -> Response:
    check_csrf(request, viewer, csrf)
    response = RedirectResponse("/dashboard/login", status_code=303)
    Sessions.clear(response)
    return response


# --- verdict history -------------------------------------------------------------------------

@router.get("")
def history(
    request: Request, session: SessionDep, viewer: ViewerDep,
    bucket: Literal["day", "week"] = "day",
    track: Annotated[str | None, Query(max_length=80)] = None,
    track_kind: Literal["builtin", "custom"] | None = None,
    since: IsoDate | None = None,
    until: IsoDate | None = None,
) -> HTMLResponse:
    """Reports per day or week by verdict pair (stacked), and totals per track."""
    if since is not None and until is not None and since > until:
        raise ApiError(422, ApiCode.VALIDATION_ERROR, "since: must not be after until")
    summary = reports_service.verdict_summary(session, bucket, track, since, until, track_kind)
    return page(request, "history.html", viewer, summary=summary, figure=charts.history_figure(summary),
                pairs=charts.pair_order({p for t in summary.totals for p in t.counts}),
                tracks=_track_names(session),
                form={"bucket": bucket, "track": track or "", "track_kind": track_kind or "",
                      "since": since.isoformat() if since else "", "until": until.isoformat() if until else ""})


# --- reports ---------------------------------------------------------------------------------

@router.get("/reports")
def reports(request: Request, session: SessionDep, viewer: ViewerDep, query: ReportQueryDep) -> HTMLResponse:
    """The listing with its filters and sorts, cursor-paged."""
    result = reports_service.report_page(session, query.filters, query.sort, query.limit, query.cursor)
    params = dict(request.query_params)
    params.pop("cursor", None)
    next_url = f"/dashboard/reports?{_query(**params, cursor=result.next_cursor)}" if result.next_cursor else None
    first_url = f"/dashboard/reports?{_query(**params)}" if query.cursor else None
    return page(request, "reports.html", viewer, page_rows=result.items, next_url=next_url, first_url=first_url,
                tracks=_track_names(session), form=params, sorts=[s.value for s in ReportSort],
                system_verdicts=[v.value for v in SystemVerdict],
                practical_verdicts=[v.value for v in PracticalVerdict],
                mechanisms=[m.value for m in MechanismFilter])


def _timeline(session: Any, job_id: str, viewer: Viewer) -> list[dict[str, Any]] | None:
    """The job's timeline, for the job's submitter and operators (as ``GET /v1/jobs/{id}``);
    None for anyone else. Stages of the attempt that ended the job."""
    job = jobs_repository.get_job(session, job_id)
    if job is None or not (viewer.is_operator or viewer.caller.key_id == job.submitter_id):
        return None
    rows: list[dict[str, Any]] = [{"what": "queued", "at": job.created_at, "seconds": None}]
    if job.started_at is not None:
        rows.append({"what": f"started (attempt {job.attempts})", "at": job.started_at, "seconds": None})
    for span in job_stages(session, [job.id], {job.id: job.finished_at}, attempt=job.attempts):
        rows.append({"what": f"stage {span.stage}", "at": span.started_at, "seconds": span.seconds})
    if job.finished_at is not None:
        total = (job.finished_at - job.started_at).total_seconds() if job.started_at else None
        rows.append({"what": f"ended {job.status}", "at": job.finished_at, "seconds": total})
    base = job.created_at
    for row in rows:
        row["offset"] = (row["at"] - base).total_seconds()
    return rows


@router.get("/reports/{report_id}.json")
def report_json(report_id: str, session: SessionDep, viewer: ViewerDep) -> JSONResponse:
    """The report as the API gives it (``GET /v1/reports/{id}``), for a signed-in browser."""
    view = reports_service.view_of(session, reports_service.get_report(session, report_id),
                                   operator=viewer.is_operator)
    return JSONResponse(view.model_dump(mode="json", by_alias=True), headers=SECURITY_HEADERS)


@router.get("/reports/{report_id}")
def report(request: Request, report_id: str, session: SessionDep, viewer: ViewerDep) -> HTMLResponse:
    """One report: verdicts, summary, paired seeds, differences, sweeps, mechanism, provenance."""
    view = reports_service.view_of(session, reports_service.get_report(session, report_id),
                                   operator=viewer.is_operator)
    body = view.report
    bench = charts.mapping(body.get("bench_report"))
    try:
        metric = str(tracks_service.card_of_job_track(session, view.track)["metric"]["name"])
    except (BenchError, KeyError, TypeError):  # a track no longer known: the report still renders
        metric = "metric"
    stages = charts.stages_of(bench)
    decision = readout.decision_of(bench)
    deciding = next((s.comparison for s in stages if s.name == decision.stage), bench.get("comparison") or {})
    figures = {"paired": charts.paired_figure(stages, metric),
               "diffs": charts.diffs_figure(stages, deciding, str(bench.get("metric_direction") or "")),
               "sweep": charts.sweep_figure(bench, metric)}
    level = deciding.get("ci_level")
    level_pct = round(100 * level) if isinstance(level, float) and 0 < level < 1 else 95
    mechanism = charts.mechanism_figure(bench.get("mechanism_signature") or {})
    if mechanism is not None:
        figures["mechanism"] = mechanism
    return page(request, "report.html", viewer, view=view, body=body, bench=bench, stages=stages,
                deciding=deciding, decision=decision, screening_test=readout.screening_test(bench),
                confirmation_test=readout.confirmation_of(bench),
                rows=readout.stage_rows(bench, decision), level_pct=level_pct,
                figures=figures, metric=metric, timeline=_timeline(session, view.job_id, viewer),
                raw_json=json.dumps(body, indent=1, sort_keys=True))


# --- tracks ----------------------------------------------------------------------------------

@router.get("/tracks")
def tracks(request: Request, session: SessionDep, viewer: ViewerDep) -> HTMLResponse:
    counts = tracks_service.report_counts(session)
    workers = tracks_service.live_workers(session, request.app.state.settings)
    cards = [tracks_service.builtin_view(c, counts, workers) for c in list_cards()]
    cards += [tracks_service.custom_view(r, counts.get(r.id, 0)) for r in tracks_service.list_custom(session)]
    return page(request, "tracks.html", viewer, cards=cards)


@router.get("/tracks/{ident}")
def track(request: Request, ident: str, session: SessionDep, viewer: ViewerDep,
          cursor: Annotated[str | None, Query(min_length=1, max_length=2000)] = None) -> HTMLResponse:
    """A track's card, spec and example idea, and its reports with q-values, best evidence first."""
    card = tracks_service.card(session, ident, request.app.state.settings)
    name = card.id if card.kind == "custom" else card.name
    result = reports_service.report_page(session, ReportFilters(track=name), ReportSort.P_HELPS, PAGE_SIZE, cursor)
    next_url = f"/dashboard/tracks/{ident}?{_query(cursor=result.next_cursor)}" if result.next_cursor else None
    return page(request, "track.html", viewer, card=card, page_rows=result.items, next_url=next_url,
                spec_json=json.dumps(card.spec, indent=1), metric_json=json.dumps(card.metric, indent=1),
                defaults_json=json.dumps(card.defaults, indent=1))


# --- jobs ------------------------------------------------------------------------------------

def _duration_s(view: JobView, now: dt.datetime) -> float | None:
    """Seconds from start to end (a running job's: so far); None before it started."""
    if view.started_at is None:
        return None
    return ((view.finished_at or now) - view.started_at).total_seconds()


@router.get("/jobs")
def jobs(
    request: Request, session: SessionDep, viewer: SubmitterViewerDep,
    status: JobStatus | Literal["failed"] | None = None,
    track: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = PAGE_SIZE,
    cursor: Annotated[str | None, Query(min_length=1, max_length=2000)] = None,
) -> HTMLResponse:
    """Jobs newest first, as ``GET /v1/jobs`` lists them (an agent's own, every job for
    operators), filtered by status and track, cursor-paged; each with its error code."""
    found, next_cursor = jobs_service.list_visible(session, viewer.caller, status=status_filter(status), track=track,
                                                   limit=limit, cursor=cursor)
    now = db_now(session)
    rows = [jobs_service.job_view(j) for j in found]
    params = dict(request.query_params)
    params.pop("cursor", None)
    next_url = f"/dashboard/jobs?{_query(**params, cursor=next_cursor)}" if next_cursor else None
    first_url = f"/dashboard/jobs?{_query(**params)}" if cursor else None
    return page(request, "jobs.html", viewer, page_rows=rows, durations={r.job_id: _duration_s(r, now) for r in rows},
                next_url=next_url, first_url=first_url, tracks=_track_names(session), form=params,
                statuses=[s.value for s in JobStatus])


@router.get("/jobs/{job_id}")
def job(request: Request, job_id: str, session: SessionDep, viewer: SubmitterViewerDep) -> HTMLResponse:
    """One job, as ``GET /v1/jobs/{id}`` gives it: status, times, progress, its error (code,
    message, hint), its callback's deliveries, the timeline, its report; a cancel form for operators."""
    try:
        found = jobs_service.get_visible_job(session, job_id, viewer.caller)
    except ApiError as exc:  # the same 404 for a missing job and another key's, with this face's hint
        raise ApiError(exc.status, exc.code, exc.message, "Your jobs are listed at /dashboard/jobs.") from None
    position = jobs_repository.queue_position(session, found) if found.status == JobStatus.QUEUED.value else None
    view = jobs_service.job_view(found, queue_position=position, session=session)
    finished = view.status in FINISHED
    cancelled = _job_id_or_none(request.query_params.get("cancelled"))
    return page(request, "job.html", viewer, view=view, finished=finished,
                duration=_duration_s(view, db_now(session)), timeline=_timeline(session, view.job_id, viewer),
                can_cancel=viewer.is_operator and not finished and not view.cancel_requested,
                cancelled=cancelled == view.job_id)


# --- operator --------------------------------------------------------------------------------

@router.get("/operator")
def operator(request: Request, session: SessionDep, viewer: OperatorViewerDep) -> HTMLResponse:
    """Queues, running jobs with progress and a cancel button, workers, failures over time."""
    settings: Settings = request.app.state.settings
    now = db_now(session)
    state = read_state(session, now)
    running = [jobs_service.job_view(j) for j in running_jobs(session)]
    queued = [jobs_service.job_view(j) for j in jobs_repository.list_jobs(
        session, limit=PAGE_SIZE, after=None, status=JobStatus.QUEUED.value)]
    since = now - dt.timedelta(days=FAILURE_DAYS - 1)
    by_day = failures_by_day(session, since.replace(hour=0, minute=0, second=0, microsecond=0))
    depth = {"cpu": 0, "gpu": 0, **state.queue_depth}
    # built-in tracks this deployment cannot run (their submissions are refused: track_unavailable)
    workers = tracks_service.live_workers(session, settings)
    unavailable = [c for c in (tracks_service.builtin_view(card, {}, workers) for card in list_cards())
                   if c.available is False]
    return page(request, "operator.html", viewer, state=state, running=running, queued=queued, depth=depth,
                unavailable=unavailable,
                figure=charts.failures_figure(by_day, since.date(), now.date()), worker_seen_s=settings.worker_seen_s,
                cancelled=_job_id_or_none(request.query_params.get("cancelled")), errored_status=JobStatus.ERRORED.value,
                n_running=sum(n for status, _, n in state.jobs if status == JobStatus.RUNNING.value))


def _job_id_or_none(value: str | None) -> str | None:
    """A job id as this service makes them (the notice after a cancel shows nothing else)."""
    return value if value is not None and JOB_ID.fullmatch(value) else None


@router.post("/jobs/{job_id}/cancel")
def cancel(request: Request, job_id: str, session: SessionDep, viewer: OperatorViewerDep,
           csrf: Annotated[str, Form(max_length=200)] = "",
           back: Annotated[Literal["operator", "job"], Form()] = "operator") -> Response:
    """Cancel a queued job, or ask its worker to stop a running one (operators; CSRF-checked);
    then back to the operator page, or to the job's page (``back=job``)."""
    check_csrf(request, viewer, csrf)
    jobs_service.cancel(session, job_id, viewer.caller)
    session.commit()
    target = f"/dashboard/jobs/{job_id}" if back == "job" else "/dashboard/operator"
    return RedirectResponse(f"{target}?{_query(cancelled=job_id)}", status_code=303)


# --- static files and errors -----------------------------------------------------------------

@router.get(f"/static/plotly-{PLOTLY_VERSION}.min.js")
def plotly_js() -> FileResponse:
    return FileResponse(PLOTLY_JS, media_type="text/javascript", headers={
        "Cache-Control": "public, max-age=31536000, immutable", "X-Content-Type-Options": "nosniff"})


def error_page(request: Request, status: int, body: dict[str, Any]) -> Response:
    """A dashboard request's error as a page (a missing sign-in: a redirect to the sign-in form)."""
    if body.get("code") == ApiCode.SIGN_IN_REQUIRED and request.method == "GET":
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/dashboard/login?{_query(next=target)}", status_code=303)
    return page(request, "error.html", None, status_code=status, error=body)


class DropEmptyFields:
    """ASGI middleware: under ``/dashboard``, query fields with an empty value are dropped before
    routing. A filter form sends its "all" choices as empty fields (``track=&sort=p_value``); the
    listing's shared query dependency rightly refuses ``system_verdict=`` from an API client."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/dashboard") and scope.get("query_string"):
            pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            kept = [(k, v) for k, v in pairs if v != ""]
            if len(kept) != len(pairs):
                scope = {**scope, "query_string": urlencode(kept).encode("latin-1")}
        await self.app(scope, receive, send)


def install_dashboard(app: Any, settings: Settings) -> None:
    """The pages, their static files, the session signer and the HTML error pages on ``app``."""
    app.state.dashboard_sessions = Sessions(settings)
    app.add_middleware(DropEmptyFields)
    app.state.error_page = error_page
    app.include_router(router)
    app.mount("/dashboard/static", StaticFiles(directory=HERE / "static"), name="dashboard-static")
