"""Who may do what: every operation of the schema (and /mcp) tried with no key, a bad key,
and each role, against one table; agents see only their own jobs; no secret in any log
line; CORS off unless configured."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.keys.service import create_key
from app.main import create_app
from app.migrate import upgrade_head
from app.settings import Settings
from tests.app.test_api_errors import EXAMPLE
from tests.conftest import bearer

PUBLIC = frozenset({"none", "agent", "viewer", "operator"})
READERS = frozenset({"agent", "viewer", "operator"})
SUBMITTERS = frozenset({"agent", "operator"})
OPERATORS = frozenset({"operator"})

# (method, path template) -> who may call it. A new route fails the first test until it is here.
ACCESS: dict[tuple[str, str], frozenset[str]] = {
    ("GET", "/"): PUBLIC,
    ("GET", "/v1"): PUBLIC,
    ("GET", "/v1/docs"): PUBLIC,
    ("GET", "/v1/docs/{name}"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/readyz/judging"): PUBLIC,
    ("POST", "/v1/ideas"): SUBMITTERS,
    ("POST", "/v1/ideas/check"): SUBMITTERS,
    ("GET", "/v1/checks/{check_id}"): SUBMITTERS,
    ("GET", "/v1/jobs"): SUBMITTERS,
    ("GET", "/v1/jobs/{job_id}"): SUBMITTERS,
    ("GET", "/v1/jobs/{job_id}/events"): SUBMITTERS,
    ("POST", "/v1/jobs/{job_id}/cancel"): SUBMITTERS,
    ("GET", "/v1/jobs/{job_id}/report"): READERS,
    ("GET", "/v1/reports"): READERS,
    ("GET", "/v1/reports/{report_id}"): READERS,
    ("GET", "/v1/verdicts/summary"): READERS,
    ("GET", "/v1/tracks"): READERS,
    ("GET", "/v1/tracks/{ident}"): READERS,
    ("POST", "/v1/tracks"): SUBMITTERS,
    ("POST", "/v1/tracks/{ident}/deprecate"): SUBMITTERS,
    ("PUT", "/v1/tracks/{ident}/vouch"): OPERATORS,
    ("DELETE", "/v1/tracks/{ident}/vouch"): OPERATORS,
    ("POST", "/v1/compare"): READERS,
    ("GET", "/v1/keys/me"): READERS,
    ("GET", "/v1/keys"): OPERATORS,
    ("POST", "/v1/keys"): OPERATORS,
    ("PATCH", "/v1/keys/{key_id}"): OPERATORS,
    ("DELETE", "/v1/keys/{key_id}"): OPERATORS,
    ("POST", "/mcp"): READERS,  # any key; each tool then has exactly the key's own rights
    ("GET", "/metrics"): frozenset({"viewer", "operator"}),  # a Prometheus scraper's key
}

BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/ideas"): {"track": "smoke", "code": EXAMPLE},
    ("POST", "/v1/ideas/check"): {"track": "smoke", "code": "x = ("},  # refused at once: no worker here
    ("POST", "/v1/tracks"): {"source": "CARD = {}\n"},
    ("POST", "/v1/compare"): {"baseline": [1.0, 2.0, 3.0], "idea": [1.5, 2.5, 3.5]},
    ("POST", "/v1/keys"): {"role": "viewer"},
    ("PATCH", "/v1/keys/{key_id}"): {"daily_job_quota": 5},
    ("POST", "/mcp"): {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
}


@pytest.fixture
def world(tmp_path: Any) -> Any:
    settings = Settings(data_dir=tmp_path / "var", broker_url="memory://")
    upgrade_head(settings)
    app = create_app(settings)
    with app.state.sessionmaker() as session:
        tokens = {role: create_key(session, role, role).token for role in ("agent", "viewer", "operator")}
        tokens["other_agent"] = create_key(session, "agent", "other").token
        victim = create_key(session, "agent", "victim").key
        session.commit()
        tokens["victim_id"] = victim.id
    return app, tokens


def test_the_table_names_every_operation(world: Any) -> None:
    app, _ = world
    with TestClient(app) as client:
        schema = client.get("/openapi.json").json()
    operations = {(method.upper(), path) for path, ops in schema["paths"].items() for method in ops}
    assert operations == set(ACCESS) - {("POST", "/mcp"), ("GET", "/metrics")}  # (not in the schema)


def _call(client: TestClient, method: str, template: str, token: str | None, ids: dict[str, str]) -> Any:
    path = template.format(**ids)
    headers = bearer(token) if token else {}
    if template == "/mcp":
        headers = {**headers, "Accept": "application/json, text/event-stream"}
    if template.endswith("/events"):
        with client.stream(method, path, headers=headers) as answer:
            return answer.status_code, answer.read() if answer.status_code >= 400 else b""
    answer = client.request(method, path, headers=headers, json=BODIES.get((method, template)))
    return answer.status_code, answer.content


@pytest.mark.parametrize("who", ["none", "bad_key", "agent", "viewer", "operator"])
def test_every_operation_answers_each_role_by_the_table(world: Any, who: str) -> None:
    app, tokens = world
    with TestClient(app, raise_server_exceptions=False) as client:
        job = client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE}, headers=bearer(tokens["agent"]))
        ids = {"job_id": job.json()["job_id"], "report_id": "rep_missing", "ident": "smoke", "name": "protocol",
               "check_id": "chk_missing",
               "key_id": tokens["victim_id"]}
        token = {"none": None, "bad_key": "ib_00000000_not-a-real-key"}.get(who, tokens.get(who))
        for (method, template), allowed in ACCESS.items():
            status, body = _call(client, method, template, token, ids)
            where = f"{who}: {method} {template} -> {status} {body[:200]!r}"
            assert status < 500 or template == "/readyz/judging", where  # (no worker here: 503 not_ready)
            if "none" in allowed or who in allowed:
                assert status not in (401, 403) or b"forbidden_role" not in body and b"api_key" not in body, where
            elif who in ("none", "bad_key"):
                assert status == 401, where
                assert (b"missing_api_key" if who == "none" else b"invalid_api_key") in body, where
            else:
                assert status == 403 and b"forbidden_role" in body, where


def test_an_agent_sees_and_cancels_only_its_own_jobs(world: Any) -> None:
    app, tokens = world
    with TestClient(app, raise_server_exceptions=False) as client:
        job = client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE},
                          headers=bearer(tokens["agent"])).json()["job_id"]
        for method, path in [("GET", f"/v1/jobs/{job}"), ("POST", f"/v1/jobs/{job}/cancel"),
                             ("GET", f"/v1/jobs/{job}/report"), ("GET", f"/v1/jobs/{job}/events")]:
            answer = client.request(method, path, headers=bearer(tokens["other_agent"]))
            assert answer.status_code == 404 and answer.json()["code"] == "job_not_found", (method, path)
        assert client.get("/v1/jobs", headers=bearer(tokens["other_agent"])).json()["items"] == []
        assert client.get(f"/v1/jobs/{job}", headers=bearer(tokens["operator"])).status_code == 200
        assert client.get(f"/v1/jobs/{job}", headers=bearer(tokens["agent"])).json()["status"] == "queued"


def test_no_secret_reaches_a_log_line(world: Any, caplog: pytest.LogCaptureFixture) -> None:
    app, tokens = world
    caplog.set_level(logging.DEBUG)
    with TestClient(app, raise_server_exceptions=False) as client:
        made = client.post("/v1/keys", json={"role": "agent"}, headers=bearer(tokens["operator"])).json()["token"]
        secret = client.get("/v1/keys/me", headers=bearer(made)).json()["webhook_secret"]
        client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE, "callback_url": "https://h.example/x"},
                    headers=bearer(made))
        client.get("/v1/jobs", headers=bearer(made + "x"))  # a wrong key is not logged either
        client.get("/v1/nope", headers=bearer(made))
    lines = "\n".join(record.getMessage() + str(record.args) + str(record.exc_text) for record in caplog.records)
    for value in (made, made[-20:], secret, tokens["operator"], tokens["agent"]):
        assert value not in lines


def test_cors_is_off_unless_configured(world: Any, tmp_path: Any) -> None:
    app, tokens = world
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization"}
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.options("/v1/ideas", headers=preflight)
        assert "access-control-allow-origin" not in answer.headers
        got = client.get("/v1/tracks", headers={**bearer(tokens["agent"]), "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in got.headers
    settings = Settings(data_dir=tmp_path / "cors", broker_url="memory://", cors_origins=["https://ok.example"])
    upgrade_head(settings)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        ok = client.options("/v1/ideas", headers={**preflight, "Origin": "https://ok.example"})
        assert ok.headers["access-control-allow-origin"] == "https://ok.example"
        evil = client.options("/v1/ideas", headers=preflight)
        assert "access-control-allow-origin" not in evil.headers
