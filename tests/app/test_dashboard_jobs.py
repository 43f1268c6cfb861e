"""The dashboard's job pages without a browser: who sees which job (as ``GET /v1/jobs``: agents
their own, operators all, viewers none), the table against the API's listing with its filters
and paging, one job's error, callback and timeline, and the operator's cancel from it."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from fastapi.testclient import TestClient

from app.db import utcnow
from app.jobs.models import JobStatus
from tests.app.factories import insert_job, insert_report, key_id, report_body
from tests.app.test_dashboard import csrf_of, sign_in, status_of
from tests.conftest import bearer

ERROR = {"error_code": "build_failed", "error_message": "build_model raised RuntimeError: <b>boom</b>",
         "error_hint": "Run build_model(spec) locally with the spec of GET /v1/tracks/smoke."}


def rows_of(html: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)"', html)


def stage(app: Any, keys: dict[str, str]) -> dict[str, str]:
    """Jobs of both agents and the operator, one a minute apart: ids by label."""
    now = utcnow()
    made: dict[str, str] = {}
    with app.state.sessionmaker() as session:
        specs: list[tuple[str, str, dict[str, Any]]] = [
            ("failed", "agent", {"status": "errored", "started_at": now - dt.timedelta(minutes=5, seconds=-1),
                                 "finished_at": now - dt.timedelta(minutes=4), "attempts": 1, "runs_done": 3,
                                 "runs_total": 40, **ERROR}),
            ("queued", "agent", {"callback_url": "https://hooks.example.org/ib", "callback_state": "pending"}),
            ("other", "agent2", {"status": "errored", "finished_at": now, **ERROR}),
            ("mine", "operator", {"track": "tabular"}),
        ]
        for i, (label, role, columns) in enumerate(specs):
            job = insert_job(session, key_id(keys[role]), created_at=now - dt.timedelta(minutes=10 - i),
                             name=label, **columns)
            made[label] = job.id
        report = insert_report(session, key_id(keys["agent"]), report_body(), created_at=now)
        made["succeeded"] = report.job_id
        made["report"] = report.id
        session.commit()
    return made


def test_viewers_see_no_job_pages(app: Any, client: TestClient, keys: dict[str, str]) -> None:
    made = stage(app, keys)
    sign_in(client, keys["viewer"])
    home = client.get("/dashboard")
    assert 'href="/dashboard/jobs"' not in home.text
    for path in ("/dashboard/jobs", f"/dashboard/jobs/{made['failed']}"):
        page = client.get(path)
        assert page.status_code == 403 and 'data-code="forbidden_role"' in page.text, path
    assert client.get("/v1/jobs", headers=bearer(keys["viewer"])).status_code == 403  # as the API
    report = client.get(f"/dashboard/reports/{made['report']}").text
    assert 'id="job-link"' not in report  # the report's job is not the viewer's to open


def test_an_agent_sees_its_own_jobs_as_the_api_lists_them(app: Any, client: TestClient,
                                                         keys: dict[str, str]) -> None:
    made = stage(app, keys)
    sign_in(client, keys["agent"])
    home = client.get("/dashboard")
    assert 'href="/dashboard/jobs"' in home.text
    for query in ("", "status=errored", "status=failed", "status=queued", "track=smoke", "track=tabular"):
        page = client.get(f"/dashboard/jobs?{query}&track=&status=")  # a form's "all": empty
        assert page.status_code == 200, (query, page.text[-1500:])
        api = client.get(f"/v1/jobs?{query}", headers=bearer(keys["agent"])).json()["items"]
        assert rows_of(page.text) == [j["job_id"] for j in api], query
    listing = client.get("/dashboard/jobs").text
    assert rows_of(listing) == [made["succeeded"], made["queued"], made["failed"]]
    assert made["other"] not in listing and made["mine"] not in listing
    assert ">build_failed<" in listing and f'href="/dashboard/reports/{made["report"]}"' in listing

    page = client.get(f"/dashboard/jobs/{made['failed']}")
    assert page.status_code == 200
    error = re.search(r'<section class="job-error".*?</section>', page.text, re.S)
    assert error and 'data-code="build_failed"' in error.group(0)
    assert "&lt;b&gt;boom&lt;/b&gt;" in error.group(0) and ERROR["error_hint"] in error.group(0)
    assert "3 / 40 runs" in page.text and 'id="timeline"' in page.text and "ended " in page.text
    assert 'id="cancel"' not in page.text  # the cancel form is the operators'

    queued = client.get(f"/dashboard/jobs/{made['queued']}").text
    assert "https://hooks.example.org/ib" in queued and 'id="callback"' in queued
    assert 'id="job-error"' not in queued

    other = client.get(f"/dashboard/jobs/{made['other']}")  # another key's job: as a missing one
    assert other.status_code == 404 and 'data-code="job_not_found"' in other.text
    assert "/dashboard/jobs" in other.text and other.text.count("build_failed") == 0
    assert client.get("/dashboard/jobs/job_nothere").status_code == 404
    report = client.get(f"/dashboard/reports/{made['report']}").text
    assert f'href="/dashboard/jobs/{made["succeeded"]}"' in report


def test_an_operator_sees_every_job_pages_and_cancels_from_a_jobs_page(app: Any, client: TestClient,
                                                                       keys: dict[str, str]) -> None:
    made = stage(app, keys)
    sign_in(client, keys["operator"])
    listing = client.get("/dashboard/jobs").text
    api = client.get("/v1/jobs", headers=bearer(keys["operator"])).json()["items"]
    assert rows_of(listing) == [j["job_id"] for j in api] and len(api) == 5
    first = client.get("/dashboard/jobs?limit=2")
    next_url = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert rows_of(first.text) == [j["job_id"] for j in api[:2]] and next_url
    second = client.get(next_url.group(1).replace("&amp;", "&"))
    assert rows_of(second.text) == [j["job_id"] for j in api[2:4]] and "First page" in second.text
    assert client.get("/dashboard/jobs?cursor=nonsense").status_code == 400
    assert client.get("/dashboard/jobs?status=nonsense").status_code == 422

    operator_page = client.get("/dashboard/operator").text
    assert f'href="/dashboard/jobs/{made["queued"]}"' in operator_page
    assert client.get(f"/dashboard/jobs/{made['other']}").status_code == 200  # another key's: visible
    assert 'id="cancel"' not in client.get(f"/dashboard/jobs/{made['failed']}").text  # ended
    page = client.get(f"/dashboard/jobs/{made['queued']}")
    assert 'id="cancel"' in page.text and "queued ahead" in page.text
    done = client.post(f"/dashboard/jobs/{made['queued']}/cancel", data={"csrf": csrf_of(page.text), "back": "job"},
                       headers={"Origin": "http://testserver"}, follow_redirects=False)
    assert done.status_code == 303
    assert done.headers["location"] == f"/dashboard/jobs/{made['queued']}?cancelled={made['queued']}"
    assert status_of(app, made["queued"]) == JobStatus.CANCELLED.value
    after = client.get(done.headers["location"]).text
    assert 'id="cancelled"' in after and 'data-code="cancelled"' in after and 'id="cancel"' not in after
