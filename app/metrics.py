"""Prometheus metrics at ``GET /metrics`` (the ``prometheus_client`` library; text format).

Two kinds, read two ways:
- HTTP: ``ideabench_http_request_duration_seconds`` (a histogram by method, route template and
  status; its ``_count`` is the request count). Observed in each API process by a pure ASGI
  middleware: the route's template (``/v1/jobs/{job_id}``), never the raw path, so ids do not
  grow the label set. Several API processes behind one port (``uvicorn --workers N``) count
  together when ``PROMETHEUS_MULTIPROC_DIR`` names an empty directory at their start
  (prometheus_client's multiprocess mode: each process writes its counts to files there,
  and any process's ``/metrics`` sums them all); without it each process counts alone.
- The service's state, read from the database at scrape time (the database is the truth, so
  every API process answers the same): jobs by status and track, queue depth per queue, each
  worker's heartbeat age, errored jobs by error code (the sandbox's refusals among them:
  ``timeout``, ``out_of_memory``, ``output_limit``, ``sandbox_violation``, ...), webhooks by
  state, and the durations of the jobs that ended in the last hour and of each of their stages
  (``app.health.state``, which the operator's dashboard page reads too).

``/metrics`` needs a viewer's or an operator's key (a Prometheus ``authorization`` bearer).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.db import db_now
from app.health.state import read_state
from app.keys.deps import Caller, require_role
from app.keys.roles import Role

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own name for it
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
        with self.sessions() as session:
            state = read_state(session, db_now(session))
        jobs = GaugeMetricFamily("ideabench_jobs", "Jobs by status and track.", labels=["status", "track"])
        for status, track, n in state.jobs:
            jobs.add_metric([status, track], n)
        depth = GaugeMetricFamily("ideabench_queue_depth", "Queued jobs per queue.", labels=["queue"])
        for queue, n in state.queue_depth.items():
            depth.add_metric([queue], n)
        failures = GaugeMetricFamily("ideabench_job_failures", "Jobs that ended errored, by error code "
                                     "(the sandbox's refusals among them).", labels=["code"])
        for code, n in state.failures.items():
            failures.add_metric([code], n)
        webhooks = GaugeMetricFamily("ideabench_webhooks", "Job webhooks by state.", labels=["state"])
        for hook_state, n in state.webhooks.items():
            webhooks.add_metric([hook_state], n)
        beats = GaugeMetricFamily("ideabench_worker_heartbeat_age_seconds", "Seconds since each worker "
                                  "last said it was alive.", labels=["worker", "queue", "device"])
        for beat in state.beats:
            beats.add_metric([beat.id, beat.queue, beat.device], state.heartbeat_age_s(beat))
        yield from (jobs, depth, failures, webhooks, beats)
        durations = HistogramMetricFamily("ideabench_job_duration_seconds", "Start to end of the jobs "
                                          "that ended in the last hour.")
        durations.add_metric([], _buckets(state.durations_s), sum(state.durations_s))
        yield durations
        stages = HistogramMetricFamily("ideabench_stage_duration_seconds", "Each stage of the jobs that "
                                       "ended in the last hour (capture, sweep, final, confirmation, ...).",
                                       labels=["stage"])
        by_stage: dict[str, list[float]] = defaultdict(list)
        for span in state.stages:
            by_stage[span.stage].append(span.seconds)
        for stage, seconds in sorted(by_stage.items()):
            stages.add_metric([stage], _buckets(seconds), sum(seconds))
        yield stages


def _buckets(seconds: list[float]) -> list[tuple[str, float]]:
    """Cumulative histogram buckets of ``seconds``."""
    return [(str(b), float(sum(x <= b for x in seconds))) for b in DURATION_BUCKETS] + [("+Inf", float(len(seconds)))]


def process_registry() -> tuple[CollectorRegistry, bool]:
    """A new registry, and whether this process counts in prometheus_client's multiprocess
    mode (``PROMETHEUS_MULTIPROC_DIR``): then its metrics live in files there, the registry
    reads every process's, and metrics must be created with no registry of their own."""
    registry = CollectorRegistry()
    # prometheus_client chose its value store when it was imported: files only if the variable
    # was set before the process started.
    shared = os.environ.get(MULTIPROCESS_ENV) if values.ValueClass is not values.MutexValue else None
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        MultiProcessCollector(registry, path=shared)
    return registry, bool(shared)


def install_metrics(app: Any, sessions: sessionmaker[Session]) -> None:
    """The middleware, the collector and ``GET /metrics`` on ``app`` (its own registry)."""
    registry, shared = process_registry()
    histogram = Histogram("ideabench_http_request_duration_seconds", "HTTP requests by method, route and "
                          "status, and their latency.", ["method", "route", "status"],
                          registry=None if shared else registry)
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
