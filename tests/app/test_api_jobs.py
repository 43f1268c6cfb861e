"""Submitting ideas, idempotency, job views, listing with filters and cursors, cancelling."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.db import utcnow
from app.jobs.models import Job, JobStatus
from bench.catalog import get_card
from tests.app.factories import insert_job, key_id
from tests.conftest import bearer

EXAMPLE = get_card("smoke")["example_idea"]


def submit(client: Any, token: str, headers: dict[str, str] | None = None, **overrides: Any) -> Any:
    body = {"track": "smoke", "code": EXAMPLE, "name": "silu", **overrides}
    return client.post("/v1/ideas", json=body, headers={**bearer(token), **(headers or {})})


def dispatch(app: Any) -> list[str]:
    """One pass of a worker's dispatcher on the app's database and (recording) queue."""
    from workers.context import WorkerContext
    from workers.reconciler import dispatch_once

    ctx = WorkerContext(settings=app.state.settings, engine=app.state.engine, sessions=app.state.sessionmaker,
                        worker_id="host:1", queue=app.state.queue)
    return dispatch_once(ctx)


def test_submit_commits_a_job_that_the_dispatcher_sends_once(app: Any, client: Any, keys: dict[str, str]) -> None:
    response = submit(client, keys["agent"])
    assert response.status_code == 202, response.text
    body = response.json()
    job_id = body["job_id"]
    assert body["status"] == "queued"
    assert body["links"] == {"self": f"/v1/jobs/{job_id}", "report": f"/v1/jobs/{job_id}/report",
                             "cancel": f"/v1/jobs/{job_id}/cancel"}
    assert response.headers["location"] == f"/v1/jobs/{job_id}"
    assert body["queue_position"] == 0
    assert body["estimate"]["runs_total"] > 0 and body["estimate"]["basis"] == "card"
    assert body["idempotent_replay"] is False
    assert app.state.queue.sent == []  # the API publishes nothing: it committed the job
    with app.state.sessionmaker() as session:
        job = session.get(Job, job_id)
        assert job.status == "queued" and job.enqueued_at is None
    assert dispatch(app) == [job_id]
    assert app.state.queue.sent == [(job_id, "cpu")]
    with app.state.sessionmaker() as session:  # stamped (committed) before the message went out
        assert session.get(Job, job_id).enqueued_at is not None
    assert dispatch(app) == [] and len(app.state.queue.sent) == 1  # sent once


def test_the_dispatcher_sends_oldest_first_and_skips_cancelled_jobs(app: Any, client: Any,
                                                                    keys: dict[str, str]) -> None:
    ids = [submit(client, keys["agent"], name=f"n{i}").json()["job_id"] for i in range(3)]
    cancelled = client.post(f"/v1/jobs/{ids[1]}/cancel", headers=bearer(keys["agent"]))
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"
    assert dispatch(app) == [ids[0], ids[2]]
    assert app.state.queue.sent == [(ids[0], "cpu"), (ids[2], "cpu")]


def test_device_routes_to_the_gpu_queue(app: Any, client: Any, keys: dict[str, str]) -> None:
    from app.db import utcnow
    from app.health import repository as health_repository

    # no GPU worker alive: refused at once, not queued forever (issue 28.5)
    refused = submit(client, keys["agent"], device="gpu")
    assert refused.status_code == 409 and refused.json()["code"] == "no_gpu_worker" and refused.json()["hint"]
    with app.state.sessionmaker() as session:  # one whose sandbox refuses to judge does not count
        health_repository.record_beat(session, "gpuhost:1", "gpu", "cuda:0", utcnow(), sandbox="refused: missing x")
        session.commit()
    assert submit(client, keys["agent"], device="gpu").status_code == 409
    with app.state.sessionmaker() as session:
        health_repository.record_beat(session, "gpuhost:2", "gpu", "cuda:0", utcnow(), sandbox="complete")
        session.commit()
    body = submit(client, keys["agent"], device="gpu").json()
    assert body["device"] == "gpu"
    assert dispatch(app) == [body["job_id"]]
    assert app.state.queue.sent[-1] == (body["job_id"], "gpu")


def test_grid_alias_and_queue_position(app: Any, client: Any, keys: dict[str, str]) -> None:
    first = submit(client, keys["agent"], grid={"width": [16, 32]}).json()
    second = submit(client, keys["agent"]).json()
    assert second["queue_position"] == 1
    with app.state.sessionmaker() as session:
        assert session.get(Job, first["job_id"]).hparams == {"width": [16, 32]}
    assert first["estimate"]["runs_total"] > second["estimate"]["runs_total"]
    view = client.get(f"/v1/jobs/{second['job_id']}", headers=bearer(keys["agent"])).json()
    assert view["queue_position"] == 1


def test_idempotency_key_returns_the_same_job(app: Any, client: Any, keys: dict[str, str]) -> None:
    headers = {"Idempotency-Key": "idea-42"}
    first = submit(client, keys["agent"], headers)
    second = submit(client, keys["agent"], headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["job_id"] == second.json()["job_id"]
    assert second.json()["idempotent_replay"] is True
    assert dispatch(app) == [first.json()["job_id"]]  # one job, one message: the replay made none
    # Another key's namespace is separate.
    other = submit(client, keys["agent2"], headers)
    assert other.json()["job_id"] != first.json()["job_id"]
    # The same key with a different body is a conflict.
    conflict = submit(client, keys["agent"], headers, name="something else")
    assert conflict.status_code == 409 and conflict.json()["code"] == "idempotency_conflict"


def test_agents_see_only_their_own_jobs(client: Any, keys: dict[str, str]) -> None:
    mine = submit(client, keys["agent"]).json()["job_id"]
    theirs = submit(client, keys["agent2"]).json()["job_id"]
    assert client.get(f"/v1/jobs/{theirs}", headers=bearer(keys["agent"])).status_code == 404
    listed = client.get("/v1/jobs", headers=bearer(keys["agent"])).json()["items"]
    assert [j["job_id"] for j in listed] == [mine]
    every = client.get("/v1/jobs", headers=bearer(keys["operator"])).json()["items"]
    assert {j["job_id"] for j in every} == {mine, theirs}
    assert client.get(f"/v1/jobs/{theirs}", headers=bearer(keys["operator"])).status_code == 200


def test_job_listing_filters_and_cursor_pagination(app: Any, client: Any, keys: dict[str, str]) -> None:
    agent = key_id(keys["agent"])
    start = utcnow() - dt.timedelta(hours=1)
    with app.state.sessionmaker() as session:
        made = []
        for i in range(25):
            status = JobStatus.ERRORED.value if i % 5 == 0 else JobStatus.QUEUED.value
            # Two jobs share each timestamp: the id breaks the tie in the keyset.
            made.append(insert_job(session, agent, status=status, created_at=start + dt.timedelta(seconds=i // 2),
                                   track="smoke" if i % 2 else "tabular").id)
        session.commit()
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 7}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/v1/jobs", params=params, headers=bearer(keys["agent"])).json()
        seen += [j["job_id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(made) and len(seen) == len(set(seen)) == 25
    times = [client.get(f"/v1/jobs/{j}", headers=bearer(keys["agent"])).json()["created_at"] for j in seen]
    assert times == sorted(times, reverse=True)
    errored = client.get("/v1/jobs", params={"status": "errored"}, headers=bearer(keys["agent"])).json()["items"]
    assert len(errored) == 5 and all(j["status"] == "errored" for j in errored)
    # the status's old name (issue 27.7) still lists them, as they are called now
    legacy = client.get("/v1/jobs", params={"status": "failed"}, headers=bearer(keys["agent"])).json()["items"]
    assert [j["job_id"] for j in legacy] == [j["job_id"] for j in errored]
    # since keeps the jobs created at or after it, and leaves the older ones out
    cut = (start + dt.timedelta(seconds=6)).isoformat().replace("+00:00", "Z")
    recent = client.get("/v1/jobs", params={"since": cut, "limit": 100}, headers=bearer(keys["agent"])).json()["items"]
    assert len(recent) == 13 and all(j["created_at"] >= cut.replace("Z", "") for j in recent)
    nonsense = client.get("/v1/jobs", params={"status": "lost"}, headers=bearer(keys["agent"]))
    assert nonsense.status_code == 422 and nonsense.json()["code"] == "validation_error"
    tabular = client.get("/v1/jobs", params={"track": "tabular", "status": "queued"},
                         headers=bearer(keys["agent"])).json()["items"]
    assert len(tabular) == 10 and all(j["track"] == "tabular" for j in tabular)


def test_cancel_a_queued_job(app: Any, client: Any, keys: dict[str, str]) -> None:
    job_id = submit(client, keys["agent"]).json()["job_id"]
    response = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(keys["agent"]))
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "cancelled" and body["error"]["code"] == "cancelled"
    again = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(keys["agent"]))
    assert again.status_code == 409 and again.json()["code"] == "job_finished"
    report = client.get(f"/v1/jobs/{job_id}/report", headers=bearer(keys["agent"]))
    assert report.status_code == 409 and report.json()["code"] == "report_not_ready"
    # an ended job will never have one: the hint says so, not "poll until succeeded" (issue 27.9)
    assert "will never have a report" in report.json()["hint"] and "poll" not in report.json()["hint"].lower()


def test_cancel_a_running_job_flags_it_for_its_worker(app: Any, client: Any, keys: dict[str, str]) -> None:
    with app.state.sessionmaker() as session:
        job = insert_job(session, key_id(keys["agent"]), status=JobStatus.RUNNING.value, worker_id="w:1",
                         attempts=1)
        session.commit()
    assert client.post(f"/v1/jobs/{job.id}/cancel", headers=bearer(keys["agent2"])).status_code == 404
    body = client.post(f"/v1/jobs/{job.id}/cancel", headers=bearer(keys["operator"])).json()
    assert body["status"] == "running" and body["cancel_requested"] is True


def test_job_view_shows_progress_and_error(app: Any, client: Any, keys: dict[str, str]) -> None:
    with app.state.sessionmaker() as session:
        job = insert_job(session, key_id(keys["agent"]), status=JobStatus.ERRORED.value, stage="sweep",
                         runs_done=3, runs_total=40, eta_s=12.5, runs_at_most=88, eta_max_s=30.0,
                         error_code="bad_output_shape",
                         error_message="The model returned (B, 2).", error_hint="Read the spec.")
        session.commit()
    body = client.get(f"/v1/jobs/{job.id}", headers=bearer(keys["agent"])).json()
    assert body["progress"] == {"stage": "sweep", "runs_done": 3, "runs_total": 40, "eta_s": 12.5,
                                "runs_at_most": 88, "eta_max_s": 30.0, "message": None}
    assert body["error"] == {"code": "bad_output_shape", "message": "The model returned (B, 2).",
                             "hint": "Read the spec."}
    assert body["queue_position"] is None
