"""End to end with a real Celery worker process: embedded SQLite (database and broker),
and Postgres + Redis. Submit the smoke track's example idea, poll to succeeded, fetch
the report, find it by its verdict filter and not under another; cancel a running job.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.health.models import WorkerBeat
from app.keys.service import create_key
from app.main import create_app
from app.migrate import upgrade_head
from app.reports.models import Report
from bench.catalog import get_card
from tests.conftest import bearer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = get_card("smoke")["example_idea"]
SLOW_IDEA = '''
import time
from torch import nn

def build_model(spec):
    time.sleep(2.0)  # slow on purpose: the test cancels it mid-run
    return nn.Sequential(nn.Linear(spec["input_shape"][0], 16), nn.ReLU(),
                         nn.Linear(16, spec["output_shape"][0]))
'''
VERDICTS = {"system_verdict": ("worked", "partial", "failed"),
            "practical_verdict": ("helps", "harms", "inconclusive")}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_worker(settings: Any, cwd: Path, *, warm: bool = False, **extra_env: str) -> subprocess.Popen[bytes]:
    """A real ``ideabench worker`` process on the settings' database and broker (and
    ``extra_env``). ``warm``: it starts the next job's children after each job, as in production
    (``IDEABENCH_WARM_CHILDREN``, on by default there); the end-to-end stack's workers do, the
    other faces' workers do not: a test's last job left four children importing torch that no
    job took (about 7 CPU-seconds each time, issue 26.9)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IDEABENCH_")}
    env.update(
        DATABASE_URL=settings.database_url,
        BROKER_URL=settings.broker_url,
        IDEABENCH_DATA_DIR=str(settings.data_dir),
        IDEABENCH_HEARTBEAT_S="0.5",
        IDEABENCH_WARM_CHILDREN="true" if warm else "false",
        PYTHONPATH=str(ROOT),
        **extra_env,
    )
    log = open(cwd / "worker.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "-m", "cli.main", "worker"], cwd=cwd, env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    """End a test's worker at once, as a node lost would: SIGKILL. Its sandboxed children die
    with it (bwrap --die-with-parent) and the next worker sweeps their cgroups. A cold shutdown
    (SIGQUIT) waited out Celery's 2 s drain loop and hit its 5 s timeout under load in most
    teardowns; the tests of a worker's own shutdown send their signals themselves."""
    if process.poll() is None:
        process.kill()
    process.wait()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
    pytest.fail(f"timed out waiting for {what}\n--- worker log ---\n{tail}")


def make_key(app: Any, role: str) -> str:
    """A new key of ``role`` (an operator's may set n_seeds: short jobs for tests)."""
    with app.state.sessionmaker() as session:
        token = create_key(session, role, f"e2e-{role}").token
        session.commit()
    return token


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, TestClient, str, Path]]:
    """(app, client, agent token, worker log) on the backend named by the test's parameter."""
    if request.param == "embedded":
        settings = request.getfixturevalue("sqlite_settings")
        upgrade_head(settings)
    else:
        settings = request.getfixturevalue("pg_settings").model_copy(
            update={"broker_url": request.getfixturevalue("redis_url")})
    app = create_app(settings)
    token = make_key(app, "agent")
    port = free_port()
    app.state.worker_metrics_url = f"http://127.0.0.1:{port}/metrics"
    worker = start_worker(settings, tmp_path, warm=True, IDEABENCH_WORKER_METRICS_PORT=str(port))
    log = tmp_path / "worker.log"
    try:
        with TestClient(app) as client:
            def worker_seen() -> bool:
                with app.state.sessionmaker() as session:
                    return bool(session.scalar(select(func.count()).select_from(WorkerBeat)))

            wait_for(worker_seen, 60, "the worker to start", log)
            yield app, client, token, log
    finally:
        stop_worker(worker)
        app.state.engine.dispose()


def poll_job(client: TestClient, token: str, job_id: str, until: set[str], timeout: float, log: Path) -> Any:
    def status() -> Any:
        body = client.get(f"/v1/jobs/{job_id}", headers=bearer(token)).json()
        return body if body["status"] in until else None

    return wait_for(status, timeout, f"job {job_id} to reach {until}", log)


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.parametrize("stack", ["embedded", "postgres_redis"], indirect=True)
def test_smoke_example_end_to_end(stack: Any) -> None:
    app, client, token, log = stack
    response = client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE, "name": "e2e"},
                           headers={**bearer(token), "X-Request-ID": "e2e-submit-1"})
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    job = poll_job(client, token, job_id, {"succeeded", "errored", "cancelled"}, 240, log)
    assert job["status"] == "succeeded", job
    assert job["progress"]["runs_total"] and job["progress"]["runs_done"] == job["progress"]["runs_total"]
    assert job["progress"]["runs_at_most"] == job["progress"]["runs_total"]  # everything decided: made
    assert "request e2e-submit-1" in log.read_text()  # the submission's id in the worker's lines
    # the worker's beat says which built-in tracks it cannot run, and the listing is the worker's word
    with app.state.sessionmaker() as session:
        (said,) = session.scalars(select(WorkerBeat.unavailable)).all()
    assert isinstance(said, dict) and "smoke" not in said
    cifar = client.get("/v1/tracks/cifar10", headers=bearer(token)).json()
    if "cifar10" in said:  # no IDEABENCH_CIFAR10_DIR with the data on this host
        assert cifar["available"] is False and cifar["unavailable_reason"] == \
            f"none of the 1 live workers can run it ({said['cifar10']})"
    else:
        assert cifar["available"] is True
    report = client.get(f"/v1/jobs/{job_id}/report", headers=bearer(token)).json()
    body = report["report"]
    assert body["system_judged"] is True and body["bench_report"]["comparison"]["n_pairs"] == 8
    assert report["report_id"] == job["report_id"]
    for field, values in VERDICTS.items():
        mine = body[field]
        found = client.get("/v1/reports", params={field: mine, "track": "smoke"}, headers=bearer(token)).json()
        assert job_id in {r["job_id"] for r in found["items"]}, (field, mine)
        for other in values:
            if other != mine:
                listed = client.get("/v1/reports", params={field: other}, headers=bearer(token)).json()
                assert job_id not in {r["job_id"] for r in listed["items"]}, (field, other)
    summary = client.get("/v1/verdicts/summary", headers=bearer(token)).json()
    pair = f"{body['system_verdict']}/{body['practical_verdict']}"
    assert [(t["track"], t["counts"], t["total"]) for t in summary["totals"]] == [("smoke", {pair: 1}, 1)]
    # The attempt record, counted when the report was stored: nothing came before it.
    attempts = body["bench_report"]["attempts"]
    assert attempts["family_before"] == attempts["key_before"] == 0 and attempts["family"] == report["family"]
    if body["practical_detail"] == "lr_confounded":  # the run's random secret made the arms' lrs differ:
        # such a result enters no stream (docs/statistics.md), so there is nothing to discover
        assert summary["totals"][0]["discoveries"] is None and report["q_value"] is None
    else:
        assert summary["totals"][0]["discoveries"]["judged"] == 1 and report["q_value"] == report["p_helps"]
    # The stored event stream of the real run, replayed, and resumed halfway.
    from tests.app.test_api_events import read_events

    events = read_events(client, token, job_id)
    kinds = [e for _, e, _ in events]
    assert kinds[0] == "queued" and kinds[-1] == "end" and events[-1][2]["report_id"] == report["report_id"]
    stages = [d["stage"] for _, e, d in events if e == "stage"]  # a stage again when its counts change
    assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s][:2] == ["sweep", "final"]
    # every progress bar has its denominator from the first stage event on (issue 27.2)
    assert all(d["runs_total"] > 0 for _, e, d in events if e == "stage")
    assert all(0 < d["runs_done"] <= d["runs_total"] <= d["runs_at_most"] for _, e, d in events if e == "run")
    # the most runs, known from the run plan on: it never grows, and never falls below the count
    bounds = [d["runs_at_most"] for _, e, d in events if e == "stage" and d["runs_at_most"] is not None]
    assert bounds and bounds == sorted(bounds, reverse=True) and bounds[-1] >= job["progress"]["runs_total"]
    assert all(d["runs_at_most"] >= d["runs_total"] for _, e, d in events if e == "stage" and d["runs_at_most"])
    runs = [d for _, e, d in events if e == "run"]
    assert len(runs) == job["progress"]["runs_total"] and {r["arm"] for r in runs} == {"baseline", "idea"}
    assert [int(i) for i, _, _ in events] == list(range(len(events)))
    half = events[len(events) // 2][0]
    assert read_events(client, token, job_id, **{"Last-Event-ID": half}) == events[len(events) // 2 + 1:]
    # The worker's own metrics (issue 28.8), scraped from its exporter.
    from prometheus_client.parser import text_string_to_metric_families

    scraped = {s.name + str(sorted(s.labels.items())): s.value for family in text_string_to_metric_families(
        httpx.get(app.state.worker_metrics_url, timeout=10).text) for s in family.samples}
    execution = body["bench_report"]["execution"]
    assert scraped["ideabench_worker_jobs_total[('outcome', 'succeeded')]"] == 1
    assert scraped["ideabench_worker_job_duration_seconds_count[]"] == 1
    # The worker's first job runs cold (bench.judge.judge prepares a warm slot only after a job):
    # the baseline's child, the idea's capture child and its trainer. The next job's warm slot,
    # launched in the background once this one ends, may or may not have started by the scrape.
    assert scraped["ideabench_worker_child_start_seconds_count[]"] >= 3
    assert scraped["ideabench_worker_judging[]"] == 1
    misses = scraped.get("ideabench_worker_baseline_cache_runs_total[('result', 'miss')]", 0)
    assert misses == execution["baseline_cache_misses"] > 0  # a fresh data dir: every baseline run trained


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["embedded"], indirect=True)
def test_cancel_a_running_job(stack: Any) -> None:
    app, client, token, log = stack
    job_id = client.post("/v1/ideas", json={"track": "smoke", "code": SLOW_IDEA}, headers=bearer(token)).json()["job_id"]
    poll_job(client, token, job_id, {"running"}, 60, log)
    time.sleep(2)  # let the sandboxed children start
    response = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(token))
    assert response.status_code == 202, response.text
    started = time.monotonic()
    job = poll_job(client, token, job_id, {"cancelled", "errored", "succeeded"}, 60, log)
    assert job["status"] == "cancelled", job
    assert job["error"]["code"] == "cancelled"
    assert time.monotonic() - started < 30
    with app.state.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(Report)) == 0


# Two hostile ideas judged through the API by tests/security/test_through_the_api.py.
NETWORK_IDEA = '''
import socket
from torch import nn

def build_model(spec):
    socket.create_connection(("127.0.0.1", 5432), timeout=2)  # the database port
    return nn.Linear(spec["input_shape"][0], spec["output_shape"][0])
'''
ENVIRON_IDEA = '''
from torch import nn

def build_model(spec):
    leaked = open("/proc/1/environ", "rb").read() + repr(__import__("os").environ).encode()
    raise RuntimeError(b"LEAK:" + leaked)
'''


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["embedded"], indirect=True)
def test_custom_track_registered_validated_and_judged(stack: Any) -> None:
    """The OpenAPI example track: POST, the worker validates it in the sandbox, an idea is judged."""
    from app.tracks.schemas import TrackRegistration

    app, client, token, log = stack
    source = TrackRegistration.model_json_schema()["examples"][0]["source"]
    response = client.post("/v1/tracks", json={"source": source, "file_name": "sum_of_squares.py"},
                           headers=bearer(token))
    assert response.status_code == 202, response.text
    track_id = response.json()["id"]

    def validated() -> Any:
        body = client.get(f"/v1/tracks/{track_id}", headers=bearer(token)).json()
        return body if body["status"] != "validating" else None

    track = wait_for(validated, 180, f"track {track_id} to be validated", log)
    assert track["status"] == "active", track
    assert track["validation"]["deterministic"] is True and track["validation"]["sizes"]["train"] == 512
    idea = "from torch import nn\n\ndef build_model(spec):\n    return nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))\n"
    operator = make_key(app, "operator")  # n_seeds is an operator's override
    job_id = client.post("/v1/ideas", json={"track": "sum_of_squares", "code": idea, "n_seeds": 4},
                         headers=bearer(operator)).json()["job_id"]
    job = poll_job(client, operator, job_id, {"succeeded", "errored", "cancelled"}, 240, log)
    assert job["status"] == "succeeded", job
    assert job["track"] == track_id
    report = client.get(f"/v1/jobs/{job_id}/report", headers=bearer(operator)).json()["report"]
    assert report["bench_report"]["custom_track"]["hash"] == track["sha256"]
    # the job trained the build validation kept (no child built the baseline): validation's, bit for bit
    assert report["bench_report"]["custom_track"]["build_checked"] is True
    assert "baseline_build" not in track["validation"]  # bytes: kept in a column of its own, never shown
    from app.tracks.models import CustomTrackRow

    with app.state.sessionmaker() as session:
        assert session.get(CustomTrackRow, track_id).baseline_build[:2] == b"PK"  # bench.captured.pack_build's zip
    assert report["bench_report"]["track_justification"] == track["justification"]
    listed = client.get("/v1/reports", params={"track_kind": "custom"}, headers=bearer(token)).json()
    assert [r["job_id"] for r in listed["items"]] == [job_id]
    assert client.get(f"/v1/tracks/{track_id}", headers=bearer(token)).json()["n_reports"] == 1


@pytest.mark.slow
def test_a_worker_without_its_sandbox_judges_nothing(sqlite_settings: Any, tmp_path: Path) -> None:
    """Issue 25.10: on a host without bubblewrap (here: switched off) the worker used to judge
    submitted code with no namespaces and no network isolation, and /readyz said ready. Now it
    says why at its start and in /readyz/judging, and takes no job: the job waits for a worker that can
    sandbox it."""
    upgrade_head(sqlite_settings)
    app = create_app(sqlite_settings)
    token = make_key(app, "agent")
    worker = start_worker(sqlite_settings, tmp_path, IDEABENCH_BWRAP="0")
    log = tmp_path / "worker.log"
    try:
        with TestClient(app) as client:
            def refused() -> Any:
                body = client.get("/readyz/judging").json()
                return body if "may judge" in body.get("message", "") else None

            body = wait_for(refused, 60, "the worker's beat", log)
            assert "refused: missing namespaces, no_network" in body["message"] and "bubblewrap" in body["hint"]
            job = client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE}, headers=bearer(token)).json()
            time.sleep(3.0)  # several dispatches and beats
            assert client.get(f"/v1/jobs/{job['job_id']}", headers=bearer(token)).json()["status"] == "queued"
            assert worker.poll() is None  # still beating, so operators see why
            assert "this worker judges nothing: its sandbox lacks namespaces, no_network" in log.read_text()
    finally:
        stop_worker(worker)
        app.state.engine.dispose()


@pytest.mark.slow
def test_sigterm_drains_the_worker_finishes_its_job_and_claims_no_other(sqlite_settings: Any, tmp_path: Path) -> None:
    """Issue 28.4: a deploy's SIGTERM (docker stop, a pod's termination) makes the worker stop
    claiming and finish the job it runs; the next job waits queued for another worker, and the
    worker exits 0 once its job is stored (the manifests give it the job timeout as grace)."""
    upgrade_head(sqlite_settings)
    app = create_app(sqlite_settings)
    operator = make_key(app, "operator")  # n_seeds is an operator's override: a short job
    worker = start_worker(sqlite_settings, tmp_path)
    log = tmp_path / "worker.log"
    try:
        with TestClient(app) as client:
            body = {"track": "smoke", "code": SLOW_IDEA, "n_seeds": 2}
            first = client.post("/v1/ideas", json=body, headers=bearer(operator)).json()["job_id"]
            poll_job(client, operator, first, {"running"}, 90, log)
            worker.send_signal(signal.SIGTERM)
            second = client.post("/v1/ideas", json={**body, "name": "after-sigterm"},
                                 headers=bearer(operator)).json()["job_id"]
            job = poll_job(client, operator, first, {"succeeded", "errored", "cancelled", "queued"}, 240, log)
            assert job["status"] == "succeeded" and job["attempts"] == 1, job
            assert worker.wait(60) == 0, log.read_text()[-3000:]
            assert client.get(f"/v1/jobs/{second}", headers=bearer(operator)).json()["status"] == "queued"
            # Its message went back to the queue: the next worker judges it, first try.
            worker = start_worker(sqlite_settings, tmp_path)
            job = poll_job(client, operator, second, {"succeeded", "errored", "cancelled"}, 240, log)
            assert job["status"] == "succeeded" and job["attempts"] == 1, job
    finally:
        stop_worker(worker)
        app.state.engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["embedded"], indirect=True)
def test_a_check_is_answered_by_the_workers_check_thread(stack: Any) -> None:
    """Issue 27.5: POST /v1/ideas/check waits for a real worker's check thread, in seconds."""
    _app, client, token, log = stack
    started = time.monotonic()
    answer = client.post("/v1/ideas/check?wait=60", json={"track": "smoke", "code": EXAMPLE}, headers=bearer(token))
    assert answer.status_code == 200, (answer.text, log.read_text()[-3000:])
    assert answer.json()["status"] == "passed" and answer.json()["result"]["parameters"]["idea"] == [321]
    assert time.monotonic() - started < 60
    assert client.get("/v1/jobs", headers=bearer(token)).json()["items"] == []
