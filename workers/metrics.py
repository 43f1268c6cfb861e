"""A worker's own Prometheus metrics (issue 28.8), served by ``prometheus_client``'s HTTP server
on ``IDEABENCH_WORKER_METRICS_PORT`` (off when 0, the default) at ``/metrics``, without a key:
bind it where only the scraper reaches it (``IDEABENCH_WORKER_METRICS_ADDR``, default
``127.0.0.1``; a container sets ``0.0.0.0`` and keeps the port off its public network).

What only the worker sees (the API's ``/metrics`` reads the rest from the database, the
truth for every API process: jobs by status, errors by code, queue depth, heartbeats):

- ``ideabench_worker_jobs_total{outcome}``: the jobs this process ran to their end
  (succeeded, errored, cancelled, lost, refused), and ``ideabench_worker_job_duration_seconds``
  from the claim to the end;
- ``ideabench_worker_child_start_seconds``: each sandboxed child's start, from the launch to
  its bootstrap's report (namespaces, seccomp; before it imports torch);
- ``ideabench_worker_baseline_cache_runs_total{result}``: a built-in track's baseline runs
  answered from the cache (``hit``) or trained (``miss``), from each report's
  ``bench_report.execution``;
- ``ideabench_worker_judging``: 1 when this worker judges (its sandbox and seed secret hold).

Jobs run in the worker's process (the default ``solo`` pool). With ``--concurrency N`` the pool's
processes count apart: set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory before the worker
starts (``prometheus_client``'s multiprocess mode) and every process's counts are served summed.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from app.metrics import process_registry
from bench.sandbox import launcher

log = logging.getLogger("workers.metrics")
JOB_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
START_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class WorkerMetrics:
    """The worker's metrics in ``registry`` (a multiprocess one reads every process's files)."""

    def __init__(self, registry: CollectorRegistry, shared: bool) -> None:
        own = None if shared else registry
        self.registry = registry
        self.jobs = Counter("ideabench_worker_jobs_total", "Jobs this worker ran to their end, by outcome.",
                            ["outcome"], registry=own)
        self.job_seconds = Histogram("ideabench_worker_job_duration_seconds",
                                     "Seconds from a job's claim to its end.", buckets=JOB_BUCKETS, registry=own)
        self.child_start = Histogram("ideabench_worker_child_start_seconds", "Seconds from a sandboxed child's "
                                     "launch to its bootstrap's report.", buckets=START_BUCKETS, registry=own)
        self.cache = Counter("ideabench_worker_baseline_cache_runs_total", "Baseline runs answered from the "
                             "cache (hit) or trained (miss).", ["result"], registry=own)
        self.judging = Gauge("ideabench_worker_judging", "1 when this worker judges (sandbox and seed secret "
                             "complete), else 0.", registry=own, multiprocess_mode="max")

    def job_ended(self, outcome: str, seconds: float) -> None:
        """One job ended with ``outcome`` after ``seconds`` (refused: 0, it ran nothing)."""
        self.jobs.labels(outcome=outcome).inc()
        if outcome != "refused":
            self.job_seconds.observe(seconds)

    def judged(self, report: dict[str, Any]) -> None:
        """A job's report: its baseline runs answered from the cache and trained."""
        bench = report.get("bench_report")
        execution = bench.get("execution") if isinstance(bench, dict) else None
        if isinstance(execution, dict):
            for result, key in (("hit", "baseline_cache_hits"), ("miss", "baseline_cache_misses")):
                count = execution.get(key)
                if isinstance(count, int) and count > 0:
                    self.cache.labels(result=result).inc(count)


_metrics: WorkerMetrics | None = None


def serve(port: int, addr: str = "127.0.0.1") -> WorkerMetrics | None:
    """Start the exporter on ``addr:port`` (once per process; None when ``port`` is 0) and
    count every sandboxed child's start from now on."""
    global _metrics
    if not port:
        return None
    if _metrics is None:
        _metrics = WorkerMetrics(*process_registry())
        launcher.LAUNCH_OBSERVERS.append(_metrics.child_start.observe)
        start_http_server(port, addr=addr, registry=_metrics.registry)
        log.info("worker metrics on http://%s:%d/metrics", addr, port)
    return _metrics


def current() -> WorkerMetrics | None:
    """The process's metrics, when ``serve`` started them."""
    return _metrics
