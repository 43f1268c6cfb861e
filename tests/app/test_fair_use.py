"""Fair use: per-key request rate (memory, and Redis shared by two API processes), jobs in
flight, jobs per day; each a 429 with Retry-After and a hint. Operators are exempt."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.keys.service import create_key
from app.main import create_app
from app.migrate import upgrade_head
from app.settings import Settings
from tests.app.test_api_errors import EXAMPLE
from tests.conftest import bearer


def _service(tmp_path: Any, **settings: Any) -> tuple[Any, dict[str, str]]:
    config = Settings(data_dir=tmp_path / "var", broker_url="memory://", **settings)
    upgrade_head(config)
    app = create_app(config)
    with app.state.sessionmaker() as session:
        tokens = {r: create_key(session, r, r).token for r in ("agent", "operator")}
        tokens["agent2"] = create_key(session, "agent", "agent2").token
        session.commit()
    return app, tokens


def _submit(client: Any, token: str, **body: Any) -> Any:
    return client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE, **body}, headers=bearer(token))


def test_a_burst_over_the_rate_gets_429_with_retry_after(tmp_path: Any) -> None:
    app, tokens = _service(tmp_path, rate_limit="5/minute")
    with TestClient(app, raise_server_exceptions=False) as client:
        answers = [client.get("/v1/reports", headers=bearer(tokens["agent"])) for _ in range(8)]
        assert [a.status_code for a in answers] == [200] * 5 + [429] * 3
        body = answers[-1].json()
        assert body["code"] == "rate_limited" and "Retry-After" in body["hint"]
        assert 1 <= int(answers[-1].headers["Retry-After"]) <= 60
        assert client.get("/v1/reports", headers=bearer(tokens["agent2"])).status_code == 200  # per key
        assert all(client.get("/v1/reports", headers=bearer(tokens["operator"])).status_code == 200
                   for _ in range(8))  # operators are exempt


@pytest.mark.services
def test_two_api_processes_share_the_count_in_redis(tmp_path: Any, redis_url: str) -> None:
    first, tokens = _service(tmp_path, rate_limit="4/minute", rate_limit_storage=redis_url)
    second = create_app(first.state.settings)
    with TestClient(first, raise_server_exceptions=False) as a, TestClient(second, raise_server_exceptions=False) as b:
        codes = [(a if i % 2 else b).get("/v1/reports", headers=bearer(tokens["agent"])).status_code
                 for i in range(6)]
    assert codes == [200] * 4 + [429] * 2


def test_jobs_in_flight_and_per_day_are_capped(tmp_path: Any) -> None:
    app, tokens = _service(tmp_path, max_active_jobs_per_key=2)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert [_submit(client, tokens["agent"]).status_code for _ in range(2)] == [202, 202]
        refused = _submit(client, tokens["agent"])
        assert refused.status_code == 429 and refused.json()["code"] == "too_many_jobs"
        assert refused.headers["Retry-After"] == "30"
        headers = {**bearer(tokens["agent2"]), "Idempotency-Key": "same"}
        body = {"track": "smoke", "code": EXAMPLE}
        assert client.post("/v1/ideas", json=body, headers=headers).status_code == 202
        again = client.post("/v1/ideas", json=body, headers=headers)  # a replay makes no job: not counted
        assert again.status_code == 202 and again.json()["idempotent_replay"] is True
        assert _submit(client, tokens["operator"]).status_code == 202
    app, tokens = _service(tmp_path / "daily", daily_job_quota_per_key=1)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert _submit(client, tokens["agent"]).status_code == 202
        over = _submit(client, tokens["agent"])
        assert over.status_code == 429 and over.json()["code"] == "daily_quota"
        assert 1 <= int(over.headers["Retry-After"]) <= 86400


def test_an_operator_sets_one_keys_quota_and_the_key_sees_its_limits(tmp_path: Any) -> None:
    app, tokens = _service(tmp_path, max_active_jobs_per_key=5)
    with TestClient(app, raise_server_exceptions=False) as client:
        me = client.get("/v1/keys/me", headers=bearer(tokens["agent"])).json()
        assert me["limits"] == {"rate_limit": "3000/minute", "max_active_jobs": 5, "daily_job_quota": None}
        assert me["role"] == "agent" and me["webhook_secret"].startswith("whsec_")
        # an operator's submissions meet no cap: its own limits say null, not the agents' 5
        mine = client.get("/v1/keys/me", headers=bearer(tokens["operator"])).json()["limits"]
        assert mine["max_active_jobs"] is None and mine["daily_job_quota"] is None
        patch = {"daily_job_quota": 1, "max_active_jobs": 0}
        refused = client.patch(f"/v1/keys/{me['id']}", json=patch, headers=bearer(tokens["agent"]))
        assert refused.status_code == 403 and refused.json()["code"] == "forbidden_role"
        done = client.patch(f"/v1/keys/{me['id']}", json=patch, headers=bearer(tokens["operator"]))
        assert done.status_code == 200 and done.json()["daily_job_quota"] == 1
        assert client.get("/v1/keys/me", headers=bearer(tokens["agent"])).json()["limits"]["daily_job_quota"] == 1
        assert _submit(client, tokens["agent"]).status_code == 202
        over = _submit(client, tokens["agent"])
        assert over.status_code == 429 and over.json()["code"] == "daily_quota"
        assert _submit(client, tokens["agent2"]).status_code == 202  # other keys keep the settings
        # null: back to the service's setting (no daily quota); the other override is kept
        reset = client.patch(f"/v1/keys/{me['id']}", json={"daily_job_quota": None}, headers=bearer(tokens["operator"]))
        assert reset.json()["daily_job_quota"] is None and reset.json()["max_active_jobs"] == 0
        # the overrides say 0 for "no cap" and null for "the setting"; `limits` says what is in
        # force, null for no cap, the same way /v1/keys/me does (issue 27.9)
        assert reset.json()["limits"] == {"rate_limit": "3000/minute", "max_active_jobs": None, "daily_job_quota": None}
        listed = {k["id"]: k for k in client.get("/v1/keys", headers=bearer(tokens["operator"])).json()["items"]}
        assert listed[me["id"]]["limits"]["max_active_jobs"] is None
        others = [k for k in listed.values() if k["role"] == "agent" and k["id"] != me["id"]]
        assert others and all(k["limits"]["max_active_jobs"] == 5 for k in others)
        assert all(k["limits"]["max_active_jobs"] is None for k in listed.values() if k["role"] == "operator")
        assert _submit(client, tokens["agent"]).status_code == 202
        bad = client.patch(f"/v1/keys/{me['id']}", json={"daily_job_quota": -1}, headers=bearer(tokens["operator"]))
        assert bad.status_code == 422
        assert client.patch("/v1/keys/key_nope", json={}, headers=bearer(tokens["operator"])).status_code == 404


def _burst(base_url: str, token: str, n: int) -> list[int]:
    """``n`` submissions of one key at once, each on its own connection."""
    import concurrent.futures

    import httpx

    def one(i: int) -> int:
        body = {"track": "smoke", "code": EXAMPLE, "name": f"burst {i}"}
        return httpx.post(f"{base_url}/v1/ideas", json=body, headers=bearer(token), timeout=60).status_code

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def test_a_burst_of_one_key_cannot_pass_its_cap_together(tmp_path: Any, database: str,
                                                          request: pytest.FixtureRequest) -> None:
    """An agent that sends 24 submissions at once, each in its own request: counted one after
    the other, never all against the same count (before, each counted 0 active jobs)."""
    from sqlalchemy import func, select

    from app.jobs.models import Job
    from tests.conftest import served

    url = request.getfixturevalue("pg_settings").database_url if database == "postgres" else None
    app, tokens = _service(tmp_path, max_active_jobs_per_key=3, **({"database_url": url} if url else {}))
    with served(app) as base_url:
        codes = _burst(base_url, tokens["agent"], 24)
    assert sorted(codes) == [202] * 3 + [429] * 21, codes
    with app.state.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 3
    app.state.engine.dispose()


def test_dashboard_pages_count_against_the_keys_rate(tmp_path: Any) -> None:
    """Red team: a key limited to 5 requests a minute read 20 of 20 report pages once signed in
    to the dashboard. Its pages count as its requests; the answer is the HTML error page."""
    app, tokens = _service(tmp_path, rate_limit="5/minute")
    with TestClient(app, raise_server_exceptions=False) as client:
        signed = client.post("/dashboard/login", data={"key": tokens["agent"]}, follow_redirects=False)
        assert signed.status_code == 303
        codes = [client.get("/dashboard/reports").status_code for _ in range(8)]
        assert codes.count(200) <= 5 and codes[-1] == 429, codes
        assert "rate_limited" in client.get("/dashboard/reports").text


@pytest.mark.services
def test_the_job_counts_read_only_what_they_count_however_long_the_keys_history(pg_settings: Any) -> None:
    """A key with 20,000 ended jobs: its counts (3 in flight, 5 today) read those rows from
    indexes, not the key's history. One count(*) FILTER over all the key's jobs read every
    one of them on each submission, with the key locked: 51 ms at 100,000 jobs."""
    import datetime as dt

    from sqlalchemy import insert, text

    from app.db import make_engine, make_sessionmaker
    from app.jobs import intake
    from app.jobs.models import Job

    engine = make_engine(pg_settings.database_url)
    with make_sessionmaker(engine)() as session:
        key = create_key(session, "agent", "history").key.id
        session.commit()
    with engine.begin() as conn:
        now = dt.datetime.now(dt.UTC)
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        rows = [dict(id=f"job_{i}", status="queued" if i < 3 else "succeeded", queue="cpu", track="smoke",
                     idea_code="x", submitter_id=key, request_sha256="0" * 64, runs_done=0, attempts=0,
                     cancel_requested=False, callback_attempts=0,
                     created_at=now if i < 5 else midnight - dt.timedelta(minutes=i), enqueued_at=now)
                for i in range(20_000)]
        conn.execute(insert(Job), rows)
        conn.execute(text("ANALYZE jobs"))
        assert tuple(conn.execute(intake._COUNTS, {"keys": [key], "midnight": midnight}).one()) == (key, 3, 5)
        sql = intake._COUNTS.params(keys=[key], midnight=midnight).compile(
            engine, compile_kwargs={"render_postcompile": True}).string
        params = {"status_1_1": "queued", "status_1_2": "running", "keys_1": key, "midnight": midnight}
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).scalar_one()
    engine.dispose()

    def rows_read(node: dict[str, Any]) -> int:
        own = node["Actual Rows"] * node["Actual Loops"] + node.get("Rows Removed by Filter", 0) \
            if "Scan" in node["Node Type"] else 0
        return own + sum(rows_read(child) for child in node.get("Plans", []))

    assert rows_read(plan[0]["Plan"]) <= 8 + 8, plan  # 3 + 5 rows, and slack for the planner
