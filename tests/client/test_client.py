"""The Python client and the CLI's client verbs against the real embedded service (uvicorn on a
port, a real Celery worker process); retries against a scripted transport; and the client
running with torch, numpy and the web stack unimportable."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ideabench_client import (
    AsyncClient,
    AuthError,
    Client,
    InvalidRequest,
    NotFound,
    RateLimited,
    verify_webhook,
)
from tests.client.conftest import slow_to_build
from tests.workers.test_end_to_end import EXAMPLE, wait_for
from tests.workers.test_webhooks import Receiver

ROOT = Path(__file__).resolve().parents[2]

SLOW_EXAMPLE = slow_to_build(EXAMPLE)
BAD = "def build_model(:\n"
WIDE = """
from torch import nn

HPARAMS = {"width": [32, 400]}


def build_model(spec):
    w = spec["hparams"]["width"]
    return nn.Sequential(nn.Linear(spec["n_features"], w), nn.ReLU(), nn.Linear(w, 1))
"""  # its second config holds far more parameters than the smoke baseline's: parameter_parity


def cli(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("IDEABENCH_")}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, text=True, capture_output=True,
                          env={**base, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=300, **kwargs)


@pytest.mark.slow
def test_submit_wait_and_read_the_report_with_the_sync_client(service: tuple[str, str, Path]) -> None:
    url, key, log = service
    events: list[Any] = []
    receiver = Receiver()
    with Client(url, key) as bench:
        assert "smoke" in {t["name"] for t in bench.tracks()}
        job = bench.submit("smoke", EXAMPLE, name="client", wait=True, on_event=events.append,
                           callback_url=receiver.url)
        assert job.status == "succeeded" and job.finished and job.report_id, job
        # the worker's sender POSTs the signed end event, once, and the job shows the delivery
        wait_for(lambda: bench.job(job.job_id).raw["callback"]["state"] == "delivered", 30, "the webhook", log)
        receiver.close()
        (headers, body), = receiver.received
        message = verify_webhook(bench.me()["webhook_secret"], body, headers)
        assert message["type"] == "job.succeeded" and message["data"] == events[-1].data
        kinds = [e.event for e in events]
        assert kinds[0] == "queued" and kinds[-1] == "end" and "run" in kinds
        assert [e.id for e in events] == list(range(len(events)))
        report = bench.report(job.job_id)
        assert report["report"]["bench_report"]["comparison"]["n_pairs"] == 8
        paged = [r["job_id"] for r in bench.reports(track="smoke", page_size=1)]  # one row per page
        assert job.job_id in paged and paged == [r["job_id"] for r in bench.reports(track="smoke")]
        resumed = list(bench.events(job.job_id, last_event_id=events[-3].id))
        assert resumed == events[-2:]
        with pytest.raises(NotFound) as missing:
            bench.job("job_nope")
        assert missing.value.code == "job_not_found" and missing.value.hint
        with pytest.raises(InvalidRequest) as bad:
            bench.submit("smoke", BAD)
        assert bad.value.code == "invalid_code" and "line 1" in bad.value.message
        with pytest.raises(AuthError) as fixed:
            bench.submit("smoke", EXAMPLE, n_seeds=2)
        assert fixed.value.code == "n_seeds_fixed" and fixed.value.status == 403


@pytest.mark.slow
def test_check_an_idea_before_submitting_it(service: tuple[str, str, Path], tmp_path: Path) -> None:
    """Issue 27.5: ``check`` answers in seconds and makes no job: passed with what it found against
    the limits, or failed with the error a job would end with; the async twin and ``ideabench check``
    answer the same."""
    url, key, _log = service
    with Client(url, key) as bench:
        jobs_before = [j.job_id for j in bench.jobs()]
        passed = bench.check("smoke", EXAMPLE)
        assert passed.passed and passed.ended and passed.error is None, passed
        assert passed.result and passed.result["parameters"] == {"idea": [321], "baseline": 321, "limit": 353}
        assert passed.raw["links"]["submit"] == "/v1/ideas" and passed.raise_for_error() is passed
        assert bench.get_check(passed.check_id) == passed
        queued = bench.check("smoke", EXAMPLE, wait=False)
        assert queued.status in ("pending", "running") and not queued.ended
        assert bench.get_check(queued.check_id, wait=60).passed
        with pytest.raises(InvalidRequest) as bad:  # the static checks: at once, as a submission's
            bench.check("smoke", BAD)
        assert bad.value.code == "invalid_code" and bad.value.status == 422
        with pytest.raises(NotFound) as missing:
            bench.get_check("chk_nope")
        assert missing.value.code == "check_not_found"

        async def failing() -> Any:
            async with AsyncClient(url, key) as abench:
                found = await abench.check("smoke", WIDE)
                assert await abench.get_check(found.check_id) == found
                return found

        failed = asyncio.run(failing())
        assert failed.status == "failed" and failed.result is None and failed.error, failed
        assert failed.error["code"] == "parameter_parity" and failed.error["hint"]
        with pytest.raises(InvalidRequest) as raised:
            failed.raise_for_error()
        assert raised.value.code == "parameter_parity"
        assert [j.job_id for j in bench.jobs()] == jobs_before  # a check makes no job

    env = {"IDEABENCH_URL": url, "IDEABENCH_KEY": key}
    (tmp_path / "idea.py").write_text(EXAMPLE)
    (tmp_path / "wide.py").write_text(WIDE)
    ok = cli("check", str(tmp_path / "idea.py"), "--track", "smoke", env=env)
    assert ok.returncode == 0, ok.stderr
    assert " passed " in ok.stdout and "parameters: idea 321 (limit 353; baseline 321)" in ok.stdout
    assert "dearest forward per example: idea " in ok.stdout and "(limit " in ok.stdout.split("dearest forward")[1]
    assert "next: ideabench submit" in ok.stdout
    wide = cli("check", str(tmp_path / "wide.py"), "--track", "smoke", "--json", env=env)
    assert wide.returncode == 2, (wide.stdout, wide.stderr)  # like a submission refused
    assert json.loads(wide.stdout)["check"]["error"]["code"] == "parameter_parity"
    assert "error [parameter_parity]" in wide.stderr and "hint:" in wide.stderr


@pytest.mark.slow
def test_waits_outlast_the_keep_alive_and_the_stream_rotation(service: tuple[str, str, Path], tmp_path: Path) -> None:
    """A real job that runs longer than the server's keep-alive (``PING_S``) and its stream's
    life (``STREAM_MAX_S``): the sync and async waits and ``submit --wait`` read every event once,
    in order; a raw read of the same stream shows the pings they skipped."""
    from tests.client.conftest import STREAM_MAX_S

    url, key, _log = service
    raw: list[bytes] = []

    def read_raw(job_id: str) -> None:
        with httpx.stream("GET", f"{url}/v1/jobs/{job_id}/events", headers={"Authorization": f"Bearer {key}"},
                          timeout=httpx.Timeout(30.0)) as response:
            raw.extend(response.iter_bytes())

    with Client(url, key) as bench:
        job = bench.submit("smoke", SLOW_EXAMPLE, name="long-wait")
        reader = threading.Thread(target=read_raw, args=(job.job_id,))
        reader.start()
        started = time.monotonic()
        events: list[Any] = []
        done = bench.wait(job.job_id, on_event=events.append)
        took = time.monotonic() - started
        reader.join(30)
    assert done.status == "succeeded", done
    assert took > STREAM_MAX_S, f"the job took {took:.1f} s: too short to test a rotated stream"
    assert b": ping" in b"".join(raw), "the server sent no keep-alive during the job"
    assert [e.id for e in events] == list(range(len(events))) and events[-1].event == "end"

    async def follow() -> list[int]:
        async with AsyncClient(url, key) as bench:
            job = await bench.submit("smoke", SLOW_EXAMPLE, name="long-wait-async")
            return [e.id async for e in bench.events(job.job_id)]

    ids = asyncio.run(follow())
    assert ids == list(range(len(ids))) and len(ids) > 3

    idea = tmp_path / "slow.py"
    idea.write_text(SLOW_EXAMPLE)
    began = time.monotonic()
    waited = cli("submit", str(idea), "--track", "smoke", "--wait", "--json", env={"IDEABENCH_URL": url, "IDEABENCH_KEY": key})
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["job"]["status"] == "succeeded"
    assert time.monotonic() - began > STREAM_MAX_S, "submit --wait ended before the stream rotated"


@pytest.mark.slow
def test_the_async_client_reads_the_same_service(service: tuple[str, str, Path]) -> None:
    url, key, _log = service

    async def session() -> None:
        async with AsyncClient(url, key) as bench:
            rows = [row async for row in bench.reports(track="smoke")]
            assert rows, "the sync test's report"
            job = await bench.job(rows[0]["job_id"], wait=5)
            assert job.status == "succeeded"
            events = [e async for e in bench.events(job.job_id)]
            assert events[0].event == "queued" and events[-1].event == "end"
            assert events[-1].data["report_id"] == rows[0]["report_id"]
            with pytest.raises(InvalidRequest):
                await bench.submit("smoke", BAD)
            block = await bench.compare([1.0] * 8, [0.5] * 8)
            assert block["p_value"] == 2 / 256

    asyncio.run(session())


@pytest.mark.slow
def test_the_cli_verbs_and_login(service: tuple[str, str, Path], tmp_path: Path) -> None:
    url, key, _log = service
    idea = tmp_path / "silu.py"
    idea.write_text(EXAMPLE)
    env = {"IDEABENCH_URL": url, "IDEABENCH_KEY": key}
    done = cli("submit", str(idea), "--track", "smoke", "--wait", "--json", env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    job_id = out["job"]["job_id"]
    assert out["job"]["status"] == "succeeded" and out["report"]["report"]["system_judged"] is True
    # one shape per object across verbs (issue 27.9): status is submit's, lists are MCP's
    status = cli("status", job_id, "--json", env=env)
    assert status.returncode == 0 and json.loads(status.stdout) == out
    listed = cli("reports", "--track", "smoke", "--json", env=env)
    assert job_id in {r["job_id"] for r in json.loads(listed.stdout)["reports"]}
    assert json.loads(cli("report", job_id, "--json", env=env).stdout) == {"report": out["report"]}
    shown = cli("report", job_id, env=env)
    assert shown.returncode == 0 and "On smoke@1" in shown.stdout
    # the deciding test's p beside the verdict, as `reports` shows it; not the descriptive two-sided p
    assert f"p_helps={out['report']['p_helps']}" in shown.stdout.splitlines()[0] and " p=" not in shown.stdout.splitlines()[0]
    late = cli("cancel", job_id, "--json", env=env)
    assert late.returncode == 2 and json.loads(late.stdout)["error"]["code"] == "job_finished"
    jobs = cli("jobs", "--status", "succeeded", "--track", "smoke", "--json", env=env)
    assert jobs.returncode == 0 and job_id in {j["job_id"] for j in json.loads(jobs.stdout)["jobs"]}
    assert job_id in cli("jobs", "--since", "2026-01-01T00:00:00Z", env=env).stdout
    assert json.loads(cli("jobs", "--status", "cancelled", "--json", env=env).stdout) == {"jobs": []}
    # a hint names this face's call, never a REST route (issue 27.4)
    missing = cli("report", "job_nope", env=env)
    assert missing.returncode == 2 and "hint: List your jobs with `ideabench jobs`." in missing.stderr
    assert "/v1/" not in missing.stderr
    # without --json, a person's view: the job's events as a progress line on stderr, the verdict on stdout
    watched = cli("submit", str(idea), "--track", "smoke", "--wait", "--name", "cli-progress", env=env)
    assert watched.returncode == 0, watched.stderr
    lines = watched.stderr.splitlines()  # not a terminal: one line an event, no carriage returns
    assert lines[0].startswith("queued (position ") and lines[-1] == "ended: succeeded", lines
    assert any(line.endswith(": started") for line in lines), lines
    bars = [line for line in lines if line.startswith("[")]
    assert bars and all(re.fullmatch(r"\[[#.]{24}\] \S+\s+\d+/\d+", bar) for bar in bars), bars
    done_counts = [int(bar.rsplit(" ", 1)[1].split("/")[0]) for bar in bars]
    assert done_counts == sorted(done_counts) and done_counts[-1] > 0, done_counts
    assert "succeeded" in watched.stdout and "system_verdict=" in watched.stdout and "On smoke@1" in watched.stdout
    # --hparams, --idempotency-key: the same key answers the first job
    first = cli("submit", str(idea), "--track", "smoke", "--hparams", '{"width": [16]}', "--idempotency-key",
                "cli-test-1", "--json", env=env)
    again = cli("submit", str(idea), "--track", "smoke", "--hparams", '{"width": [16]}', "--idempotency-key",
                "cli-test-1", "--json", env=env)
    assert first.returncode == again.returncode == 0, first.stderr
    queued = json.loads(first.stdout)["job"]["job_id"]
    assert json.loads(again.stdout)["job"]["job_id"] == queued
    # --mechanism reaches the service, which checks it before the queue
    unmeasured = cli("submit", str(idea), "--track", "smoke", "--mechanism", '{"quantity": "gate"}', "--json", env=env)
    assert unmeasured.returncode == 2 and json.loads(unmeasured.stdout)["error"]["code"] == "invalid_mechanism"
    cancel = cli("cancel", queued, "--json", env=env)
    if cancel.returncode == 2:  # a warm worker judged the smoke job before the cancel arrived
        assert json.loads(cancel.stdout)["error"]["code"] == "job_finished", cancel.stdout
        at_cancel = "succeeded"
    else:
        assert cancel.returncode == 0, cancel.stderr
        at_cancel = json.loads(cancel.stdout)["job"]["status"]

    def ended() -> Any:
        shown = cli("status", queued, "--json", env=env)
        return shown if json.loads(shown.stdout)["job"]["status"] in ("succeeded", "errored", "cancelled") else None
    final = wait_for(ended, 120, "the cancelled job to end")
    outcome = (json.loads(final.stdout)["job"]["status"], final.returncode)
    if at_cancel == "cancelled":  # it was still queued: cancelled at once
        assert outcome == ("cancelled", 3)
    else:  # a worker had taken it: it stops the job, unless the job ended first (a smoke job
        # takes seconds: it can even end between the cancel's read and its answer)
        assert at_cancel in ("running", "succeeded") and outcome in {("cancelled", 3), ("succeeded", 0)}, \
            (at_cancel, outcome)
    bad = tmp_path / "bad.py"
    bad.write_text(BAD)
    refused = cli("submit", str(bad), "--track", "smoke", env=env)
    assert refused.returncode == 2 and "error [invalid_code]" in refused.stderr and "hint:" in refused.stderr
    # login stores the server and key (0600); later verbs need no environment
    config = tmp_path / "config.json"
    login = cli("login", "--url", url, "--key", key, env={"IDEABENCH_CONFIG": str(config)})
    assert login.returncode == 0, login.stderr
    assert "(role agent)" in login.stdout  # the key's role: what it may do (issue 27.9)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert cli("status", job_id, env={"IDEABENCH_CONFIG": str(config)}).returncode == 0
    wrong = cli("login", "--url", url, "--key", "ib_nope_nope", env={"IDEABENCH_CONFIG": str(tmp_path / "x.json")})
    assert wrong.returncode == 2 and "invalid_api_key" in wrong.stderr and not (tmp_path / "x.json").exists()


BLOCKER = '''
import sys
BLOCKED = {"torch", "numpy", "scipy", "fastapi", "sqlalchemy", "celery", "pydantic", "starlette"}


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed (blocked by the test)")
        return None


sys.meta_path.insert(0, Blocker())
'''


@pytest.mark.slow
def test_the_client_verbs_run_without_torch_or_the_web_stack(service: tuple[str, str, Path], tmp_path: Path) -> None:
    url, key, _log = service
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {"IDEABENCH_URL": url, "IDEABENCH_KEY": key, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    listed = cli("reports", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    probe = subprocess.run([sys.executable, "-c", "import torch"], env={**os.environ, **env},
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "blocked by the test" in probe.stderr  # the blocker works


PINGED_STREAM = (
    b'id: 0\nevent: queued\ndata: {"job_id": "job_1", "status": "queued"}\n\n'
    b": ping\n\n"  # after an id, httpx-sse yields an empty message for a comment
    b'id: 1\nevent: stage\ndata: {"job_id": "job_1", "stage": "sweep", "runs_total": 4}\n\n'
    b": ping\n\n: ping\n\n"
    b"id: 7\nevent: ping\n\n"  # a message without data is no event either
    b'id: 2\nevent: end\ndata: {"job_id": "job_1", "status": "succeeded"}\n\n'
)


def _stream_server(body: bytes, seen: list[httpx.Request]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/events"):
            return httpx.Response(200, content=body, headers={"Content-Type": "text/event-stream"})
        return httpx.Response(200, json={"job_id": "job_1", "status": "succeeded", "track": "smoke"})
    return httpx.MockTransport(handler)


def test_keep_alive_comments_are_not_events_sync_and_async() -> None:
    """Issue 27: every wait crashed with a JSONDecodeError on the first ``: ping`` after an id,
    about 15 s into any job longer than the keep-alive."""
    seen: list[httpx.Request] = []
    http = httpx.Client(base_url="http://bench", transport=_stream_server(PINGED_STREAM, seen))
    with Client("http://bench", "k", http=http) as bench:
        events = list(bench.events("job_1"))
        assert [(e.id, e.event) for e in events] == [(0, "queued"), (1, "stage"), (2, "end")]
        assert bench.wait("job_1").status == "succeeded"

    async def session() -> list[tuple[int, str]]:
        transport = _stream_server(PINGED_STREAM, [])
        async with AsyncClient("http://bench", "k", http=httpx.AsyncClient(base_url="http://bench",
                                                                           transport=transport)) as bench:
            return [(e.id, e.event) async for e in bench.events("job_1")]

    assert asyncio.run(session()) == [(0, "queued"), (1, "stage"), (2, "end")]


def test_a_message_that_is_not_json_reconnects_after_the_last_event() -> None:
    """A garbled message is a broken stream: the client resumes after the last event it had."""
    bodies = [PINGED_STREAM.replace(b'id: 1\nevent: stage\ndata: {', b"id: 1\nevent: stage\ndata: {{"),
              PINGED_STREAM.split(b": ping\n\n", 1)[1]]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=bodies[len(seen) - 1], headers={"Content-Type": "text/event-stream"})

    http = httpx.Client(base_url="http://bench", transport=httpx.MockTransport(handler))
    events = list(Client("http://bench", "k", http=http, backoff=0.0).events("job_1"))
    assert [e.id for e in events] == [0, 1, 2]
    assert seen[1].headers["Last-Event-ID"] == "0"


def test_retries_honour_retry_after_and_keep_the_idempotency_key() -> None:
    seen: list[httpx.Request] = []
    answers = [httpx.Response(429, json={"code": "rate_limited", "message": "slow down", "hint": "wait"},
                              headers={"Retry-After": "0.2"}),
               httpx.Response(503, json={"code": "not_ready", "message": "db", "hint": "later"},
                              headers={"Retry-After": "0"}),
               httpx.Response(202, json={"job_id": "job_1", "status": "queued", "track": "smoke"})]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[len(seen) - 1]

    http = httpx.Client(base_url="http://bench", transport=httpx.MockTransport(handler))
    started = time.monotonic()
    job = Client("http://bench", "ib_k_s", http=http, backoff=0.01).submit("smoke", EXAMPLE)
    assert job.job_id == "job_1" and len(seen) == 3 and time.monotonic() - started >= 0.2
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(keys) == 1 and keys.pop().startswith("client-")
    assert all(r.headers["Authorization"] == "Bearer ib_k_s" for r in seen)

    always = httpx.Client(base_url="http://bench", transport=httpx.MockTransport(
        lambda r: httpx.Response(429, json={"code": "rate_limited", "message": "no", "hint": "h"},
                                 headers={"Retry-After": "0"})))
    with pytest.raises(RateLimited) as limited:
        Client("http://bench", "k", http=always, retries=2).job("job_1")
    assert limited.value.code == "rate_limited" and limited.value.hint == "h"


def test_an_id_is_one_path_segment_never_a_path(service: tuple[str, str, Path]) -> None:
    """Red team: the MCP tools pasted their arguments into REST paths, so describe_track
    ("../keys/me") answered the key's webhook secret and ("../jobs") its jobs: an id that comes
    from a prompt the agent read could steer it to other routes."""
    url, key, _ = service
    with Client(url, key) as bench:
        for name in ("../keys/me", "../jobs", "smoke/../../v1/keys/me"):
            with pytest.raises(NotFound):
                bench.track(name)
        with pytest.raises(NotFound):
            bench.job("../keys/me")
        assert bench.track("smoke")["name"] == "smoke"


def test_a_wait_with_a_timeout_ends_on_time_when_the_stream_is_silent() -> None:
    """A wait's ``timeout`` held only at the next event: on a stream that sends nothing (a
    server that stopped pinging, a proxy that buffers) ``wait(timeout=1)`` never returned. A
    real socket server: the event stream answers its headers, then nothing for a minute."""
    import http.server
    import socketserver

    class Silent(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.endswith("/events"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.flush()
                time.sleep(60)
                return
            body = json.dumps({"job_id": "job_1", "status": "running", "track": "smoke"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Silent)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        started = time.monotonic()
        with Client(url, "k") as bench:
            assert bench.wait("job_1", timeout=1.0).status == "running"
        assert time.monotonic() - started < 5

        async def session() -> str:
            async with AsyncClient(url, "k") as bench:
                return (await bench.wait("job_1", timeout=1.0)).status

        started = time.monotonic()
        assert asyncio.run(session()) == "running"
        assert time.monotonic() - started < 5
    finally:
        server.shutdown()
        server.server_close()
