"""GET /metrics: the Prometheus text format (parsed with prometheus_client's own parser),
request counts by route template, the service's state from the database; viewers and
operators only."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.db import utcnow
from app.health import repository as health_repository
from app.jobs.models import JobStatus
from app.keys.service import create_key
from app.main import create_app
from app.migrate import upgrade_head
from app.settings import Settings
from tests.app.factories import insert_job, insert_report
from tests.conftest import bearer


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_requests_by_route_and_read_the_state(tmp_path: Any) -> None:
    settings = Settings(data_dir=tmp_path / "var", broker_url="memory://")
    upgrade_head(settings)
    app = create_app(settings)
    now = utcnow()
    with app.state.sessionmaker() as session:
        tokens = {role: create_key(session, role, role).token for role in ("agent", "viewer", "operator")}
        session.flush()
        agent = create_key(session, "agent", "owner").key
        session.flush()
        insert_report(session, agent.id)
        insert_job(session, agent.id)  # queued
        insert_job(session, agent.id, status=JobStatus.ERRORED.value, error_code="timeout",
                   started_at=now - dt.timedelta(seconds=40), finished_at=now)
        health_repository.record_beat(session, "host:7", "cpu", "cpu", now - dt.timedelta(seconds=3), sandbox="complete")
        session.commit()
    with TestClient(app, raise_server_exceptions=False) as client:
        for _ in range(3):
            assert client.get("/v1/tracks", headers=bearer(tokens["viewer"])).status_code == 200
        client.get("/v1/jobs/job_missing", headers=bearer(tokens["agent"]))
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=bearer(tokens["agent"])).status_code == 403
        answer = client.get("/metrics", headers=bearer(tokens["viewer"]))
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    samples = _samples(answer.text)

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    requests = "ideabench_http_request_duration_seconds_count"
    assert value(requests, method="GET", route="/v1/tracks", status="200") == 3
    assert value(requests, method="GET", route="/v1/jobs/{job_id}", status="404") == 1  # the template
    assert value(requests, method="GET", route="/metrics", status="403") == 1
    assert value("ideabench_jobs", status="succeeded", track="smoke") == 1
    assert value("ideabench_jobs", status="queued", track="smoke") == 1
    assert value("ideabench_queue_depth", queue="cpu") == 1
    assert value("ideabench_job_failures", code="timeout") == 1
    assert 2 <= value("ideabench_worker_heartbeat_age_seconds", worker="host:7", queue="cpu", device="cpu") < 60
    assert value("ideabench_job_duration_seconds_count") >= 1
    bucket = "ideabench_job_duration_seconds_bucket"  # the failed job took 40 s
    assert value(bucket, le="60.0") - value(bucket, le="30.0") == 1


def test_request_counts_add_up_over_every_api_process(tmp_path: Any) -> None:
    """``uvicorn --workers 2`` behind one port, with PROMETHEUS_MULTIPROC_DIR: whichever process
    answers a scrape, it reports every process's requests (without the shared directory each
    reports only its own, and the counts jump between scrapes)."""
    import http.client
    import os
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    settings = Settings(data_dir=tmp_path / "var", broker_url="memory://")
    upgrade_head(settings)
    engine_app = create_app(settings)
    with engine_app.state.sessionmaker() as session:
        token = create_key(session, "viewer", "scraper").token
        session.commit()
    engine_app.state.engine.dispose()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    shared = tmp_path / "metrics"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IDEABENCH_", "PROMETHEUS_"))}
    env.update(DATABASE_URL=settings.database_url, BROKER_URL="memory://", IDEABENCH_DATA_DIR=str(settings.data_dir),
               PROMETHEUS_MULTIPROC_DIR=str(shared), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port), "--workers", "2",
         "--log-level", "warning", "--no-access-log"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL)

    def get(path: str) -> tuple[int, str]:  # a new connection each time: the processes share them out
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", path, headers=bearer(token))
            answer = connection.getresponse()
            return answer.status, answer.read().decode()
        finally:
            connection.close()

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if get("/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "the API did not start"
            time.sleep(0.2)
        # At least 80 requests, and until both processes have served some: the second may still
        # be starting when the first answers /healthz (CI once saw all 80 go to one process).
        sent, pids = 0, set()
        deadline = time.monotonic() + 60
        while sent < 80 or len(pids) < 2:
            assert get("/v1/tracks")[0] == 200
            sent += 1
            pids = {f.stem.rsplit("_", 1)[-1] for f in shared.glob("histogram_*.db")}
            assert time.monotonic() < deadline, f"one process served all {sent} requests: {pids}"
        key = ("ideabench_http_request_duration_seconds_count",
               frozenset({"method": "GET", "route": "/v1/tracks", "status": "200"}.items()))

        def counted() -> float:
            status, text = get("/metrics")
            assert status == 200
            return _samples(text)[key]
        # A request is counted once its answer has gone out, so the last one may still be on its
        # way into the shared files when the first scrape comes (CI once read 79 of 80).
        deadline = time.monotonic() + 10
        while counted() != sent and time.monotonic() < deadline:
            time.sleep(0.2)
        for _ in range(4):  # then every process's scrape says the same
            assert counted() == sent
    finally:
        server.terminate()
        server.wait(20)
