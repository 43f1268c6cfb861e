"""The job event stream (SSE) and long-polling a job, on SQLite and on Postgres."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from app.db import utcnow
from app.jobs import repository
from app.jobs.models import Job, JobStatus
from app.reports.service import build_report_row
from tests.app.factories import insert_job, key_id, report_body
from tests.conftest import bearer


def read_events(client: Any, token: str, job_id: str, **headers: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, event, data) of every event until the server closes the stream."""
    out, current = [], {}
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers={**bearer(token), **headers}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                if "event" in current:
                    out.append((current["id"], current["event"], json.loads(current["data"])))
                current = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(": ")
                current[field] = value
    return out


def _running_job(app: Any, token: str) -> str:
    with app.state.sessionmaker() as session:
        job = insert_job(session, key_id(token), status=JobStatus.RUNNING.value, attempts=1)
        session.commit()
        return job.id


def _append(app: Any, job_id: str, *events: tuple[str, dict[str, Any]]) -> None:
    with app.state.sessionmaker() as session:
        repository.append_events(session, job_id, 1, list(events), utcnow())
        session.commit()


def _finish(app: Any, job_id: str) -> str:
    with app.state.sessionmaker() as session:
        job = session.get(Job, job_id)
        report = build_report_row(job, report_body("worked", "helps"), utcnow())
        session.add(report)
        job.status, job.report_id, job.finished_at = JobStatus.SUCCEEDED.value, report.id, utcnow()
        session.commit()
        return report.id


def test_a_stream_replays_everything_and_resumes_after_last_event_id(env: tuple[Any, Any, dict[str, str]]) -> None:
    app, client, tokens = env
    job_id = _running_job(app, tokens["agent"])
    _append(app, job_id, ("stage", {"stage": "sweep", "runs_total": 2}),
            ("run", {"arm": "idea", "stage": "sweep", "seed_index": 0, "seconds": 0.1}),
            ("run", {"arm": "baseline", "stage": "sweep", "seed_index": 0, "seconds": 0.1}))
    report_id = _finish(app, job_id)
    events = read_events(client, tokens["agent"], job_id)
    assert [(i, e) for i, e, _ in events] == [("0", "queued"), ("1", "stage"), ("2", "run"), ("3", "run"),
                                              ("4", "end")]
    assert events[2][2]["arm"] == "idea" and "value" not in events[2][2]
    # replayed after the job ended, each event carries the status it had (issue 27.9)
    assert [d["status"] for _, _, d in events] == ["queued", "running", "running", "running", "succeeded"]
    end = events[-1][2]
    assert end["status"] == "succeeded" and end["report_id"] == report_id and end["system_verdict"] == "worked"
    assert [i for i, _, _ in read_events(client, tokens["agent"], job_id, **{"Last-Event-ID": "2"})] == ["3", "4"]
    assert [i for i, _, _ in read_events(client, tokens["agent"], job_id, **{"Last-Event-ID": "0"})] == [
        "1", "2", "3", "4"]
    assert read_events(client, tokens["agent"], job_id, **{"Last-Event-ID": "4"}) == []  # it has the end
    response = client.get(f"/v1/jobs/{job_id}/events?after=3", headers=bearer(tokens["agent"]))
    assert "id: 4" in response.text and "id: 3" not in response.text


def test_a_live_stream_gets_events_as_they_are_stored(env: tuple[Any, Any, dict[str, str]]) -> None:
    app, client, tokens = env
    job_id = _running_job(app, tokens["agent"])

    def worker() -> None:
        for i in range(3):
            time.sleep(0.3)
            _append(app, job_id, ("run", {"arm": "idea", "stage": "screening", "seed_index": i, "seconds": 0.1}))
        time.sleep(0.3)
        _finish(app, job_id)

    thread = threading.Thread(target=worker)
    thread.start()
    events = read_events(client, tokens["agent"], job_id)
    thread.join()
    assert [e for _, e, _ in events] == ["queued", "run", "run", "run", "end"]
    assert [d.get("seed_index") for _, e, d in events if e == "run"] == [0, 1, 2]


def test_a_stream_ends_for_a_job_cancelled_while_queued(env: tuple[Any, Any, dict[str, str]]) -> None:
    app, client, tokens = env
    job_id = client.post("/v1/ideas", json={"track": "smoke", "code": "def build_model(spec):\n    pass\n"},
                         headers=bearer(tokens["agent"])).json()["job_id"]
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(tokens["agent"])).status_code in (200, 202)
    events = read_events(client, tokens["agent"], job_id)
    assert [e for _, e, _ in events] == ["queued", "end"]
    assert events[-1][2]["status"] == "cancelled" and events[-1][2]["error"]["code"] == "cancelled"
    # a replayed queued event carries the status it had, not today's (issue 27.9)
    assert events[0][2]["status"] == "queued" and events[0][2]["queue_position"] is None


def test_only_the_jobs_owner_or_an_operator_streams_it(env: tuple[Any, Any, dict[str, str]]) -> None:
    app, client, tokens = env
    job_id = _running_job(app, tokens["agent"])
    _finish(app, job_id)
    response = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(tokens["agent2"]))
    assert response.status_code == 404 and response.json()["code"] == "job_not_found"
    assert [e for _, e, _ in read_events(client, tokens["operator"], job_id)] == ["queued", "end"]
    assert client.get(f"/v1/jobs/{job_id}/events").status_code == 401


def test_wait_answers_when_the_job_ends_or_when_the_time_is_up(env: tuple[Any, Any, dict[str, str]]) -> None:
    app, client, tokens = env
    job_id = _running_job(app, tokens["agent"])
    started = time.monotonic()
    body = client.get(f"/v1/jobs/{job_id}?wait=1", headers=bearer(tokens["agent"])).json()
    assert body["status"] == "running" and time.monotonic() - started >= 0.9
    threading.Timer(0.5, _finish, (app, job_id)).start()
    started = time.monotonic()
    body = client.get(f"/v1/jobs/{job_id}?wait=30", headers=bearer(tokens["agent"])).json()
    assert body["status"] == "succeeded" and time.monotonic() - started < 10
    response = client.get(f"/v1/jobs/{job_id}?wait=61", headers=bearer(tokens["agent"]))
    assert response.status_code == 422 and response.json()["code"] == "validation_error"


def test_long_polls_and_streams_hold_no_database_connection(app: Any, keys: dict[str, str]) -> None:
    """Red team: a long poll (``?wait=60``) and an event stream kept their request's session,
    and so a pooled connection, for their whole life: 16 - 40 of them from one key took every
    connection and everyone's requests waited 30 s for one, then got a 500. Now they read with
    short sessions of their own, and a pool that is out of connections is a 503 to retry."""
    import concurrent.futures

    import httpx

    from tests.conftest import served

    with app.state.sessionmaker() as session:
        job_id = insert_job(session, key_id(keys["agent"])).id
        session.commit()
    pool = app.state.engine.pool
    with served(app) as base_url, concurrent.futures.ThreadPoolExecutor(24) as threads:
        headers = bearer(keys["agent"])
        polls = [threads.submit(httpx.get, f"{base_url}/v1/jobs/{job_id}", params={"wait": 8}, headers=headers,
                                timeout=30) for _ in range(12)]
        streams = [threads.submit(httpx.get, f"{base_url}/v1/jobs/{job_id}/events", headers=headers, timeout=7)
                   for _ in range(12)]
        # The fewest connections checked out while all 24 wait (from 3 s to 5 s: on a slow machine
        # the requests are still starting, each with a short session, for a second or more). A
        # request that kept its session would hold it all this time: at least 24.
        time.sleep(3)
        held = []
        for _ in range(40):
            held.append(pool.checkedout())
            time.sleep(0.05)
        assert not any(p.done() for p in polls + streams), "every request was still waiting"
        answer = httpx.get(f"{base_url}/v1/reports", headers=bearer(keys["viewer"]), timeout=30)
        assert answer.status_code == 200
        assert min(held) <= 4, f"{min(held)} - {max(held)} connections held by 24 waiting requests"
        assert all(p.result().status_code == 200 for p in polls)
        for stream in streams:
            try:
                stream.result()
            except httpx.ReadTimeout:
                pass  # an open stream, closed by the client


def test_a_resume_id_beyond_64_bits_is_a_422(client: Any, keys: dict[str, str], app: Any) -> None:
    """Red team: ``after=2**63`` reached SQLite as an integer it cannot bind (an empty 200 and a
    traceback), ``Last-Event-ID: 2**64`` dropped the connection."""
    job_id = _running_job(app, keys["agent"])
    headers = bearer(keys["agent"])
    assert client.get(f"/v1/jobs/{job_id}/events", params={"after": 2**63}, headers=headers).status_code == 422
    assert client.get(f"/v1/jobs/{job_id}/events", headers={**headers, "Last-Event-ID": str(2**64)}).status_code == 422
