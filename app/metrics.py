"""Prometheus metrics at ``GET /metrics`` (the ``prometheus_client`` library; text format).

Two kinds, read two ways:
- HTTP: ``ideabench_http_request_duration_seconds`` (a histogram by method, route template and
  status; its ``_count`` is the request count). Observed in each API process by a pure ASGI
  middleware: the route's template (``/v1/jobs/{job_id}``), never the raw path, so ids do not
  grow the label set. With several API processes, scrape each one (these counters are per
  process).
- The service's state, read from the database at scrape time (the database is the truth, so
  every API process answers the same): jobs by status and track, queue depth per queue, each
  worker's heartbeat age, failed jobs by error code (the sandbox's refusals among them:
  ``timeout``, ``out_of_memory``, ``output_limit``, ``sandbox_violation``, ...), webhooks by
  state, and the durations of jobs that ended in the last hour.

``/metrics`` needs a viewer's or an operator's key (a Prometheus ``authorization`` bearer).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.db import utcnow
from app.health.models import WorkerBeat
from app.jobs.models import Job, JobStatus
from app.keys.deps import Caller, require_role
from app.keys.roles import Role

DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)


class RequestMetrics:
    """ASGI middleware: one observation per HTTP request, labelled by the matched route."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.histogram.labels(scope["method"], route, str(status)).observe(time.perf_counter() - start)


class StateCollector(Collector):
    """The service's state from the database, at each scrape."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def collect(self) -> Iterator[Any]:
        now = utcnow()
        jobs = GaugeMetricFamily("ideabench_jobs", "Jobs by status and track.", labels=["status", "track"])
        depth = GaugeMetricFamily("ideabench_queue_depth", "Queued jobs per queue.", labels=["queue"])
        failures = GaugeMetricFamily("ideabench_job_failures", "Jobs that ended failed, by error code "
                                     "(the sandbox's refusals among them).", labels=["code"])
        webhooks = GaugeMetricFamily("ideabench_webhooks", "Job webhooks by state.", labels=["state"])
        beats = GaugeMetricFamily("ideabench_worker_heartbeat_age_seconds", "Seconds since each worker "
                                  "last said it was alive.", labels=["worker", "queue", "device"])
        with self.sessions() as session:
            for status, track, n in session.execute(
                    select(Job.status, Job.track, func.count()).group_by(Job.status, Job.track)):
                jobs.add_metric([status, track], n)
            for queue, n in session.execute(select(Job.queue, func.count()).where(
                    Job.status == JobStatus.QUEUED.value).group_by(Job.queue)):
                depth.add_metric([queue], n)
            for code, n in session.execute(select(Job.error_code, func.count()).where(
                    Job.status == JobStatus.FAILED.value).group_by(Job.error_code)):
                failures.add_metric([code or "unknown"], n)
            for state, n in session.execute(select(Job.callback_state, func.count()).where(
                    Job.callback_state.is_not(None)).group_by(Job.callback_state)):
                webhooks.add_metric([state or "none"], n)
            for beat in session.scalars(select(WorkerBeat)):
                beats.add_metric([beat.id, beat.queue, beat.device], (now - beat.seen_at).total_seconds())
            ended = session.execute(select(Job.started_at, Job.finished_at).where(
                Job.finished_at >= now - timedelta(hours=1), Job.started_at.is_not(None))).all()
        yield from (jobs, depth, failures, webhooks, beats)
        seconds = [(f - s).total_seconds() for s, f in ended if s is not None and f is not None]
        buckets = [(str(b), sum(x <= b for x in seconds)) for b in DURATION_BUCKETS]
        durations = HistogramMetricFamily("ideabench_job_duration_seconds", "Start to end of the jobs "
                                          "that ended in the last hour.")
        durations.add_metric([], buckets + [("+Inf", len(seconds))], sum(seconds))
        yield durations


def install_metrics(app: Any, sessions: sessionmaker[Session]) -> None:
    """The middleware, the collector and ``GET /metrics`` on ``app`` (its own registry)."""
    registry = CollectorRegistry()
    histogram = Histogram("ideabench_http_request_duration_seconds", "HTTP requests by method, route and "
                          "status, and their latency.", ["method", "route", "status"], registry=registry)
    registry.register(StateCollector(sessions))
    app.add_middleware(RequestMetrics, histogram=histogram)
    app.state.metrics_registry = registry
    app.include_router(router)


router = APIRouter()
ScraperDep = Annotated[Caller, Depends(require_role(Role.VIEWER, Role.OPERATOR))]


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, _caller: ScraperDep) -> Response:
    """The Prometheus text format."""
    body = await run_in_threadpool(generate_latest, request.app.state.metrics_registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
