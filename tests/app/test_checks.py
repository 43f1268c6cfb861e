"""A check before the queue (issue 27.5): POST /v1/ideas/check answers the static checks at
once and, through a worker's check thread (here ``answer_one`` in-process, with real sandboxed
children), what a job checks before it trains; it makes no job."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, select, update

from app.checks.models import IdeaCheck
from app.checks.service import expire
from app.jobs.models import Job
from bench.catalog import get_card
from tests.bench.test_check import WIDE
from tests.conftest import bearer
from workers.checks import answer_one

EXAMPLE = get_card("smoke")["example_idea"]


def worker(app: Any) -> Any:
    from workers.context import WorkerContext

    return WorkerContext(settings=app.state.settings, engine=None, sessions=app.state.sessionmaker,  # type: ignore[arg-type]
                         worker_id="host:1", queue=None)  # type: ignore[arg-type]


def test_static_errors_come_back_at_once_and_make_nothing(app: Any, client: Any, keys: dict[str, str]) -> None:
    broken = client.post("/v1/ideas/check", json={"track": "smoke", "code": "def build_model(spec):\n    return (\n"},
                         headers=bearer(keys["agent"]))
    assert broken.status_code == 422 and broken.json()["code"] == "invalid_code", broken.text
    custom = client.post("/v1/ideas/check", json={"track": "mine@1", "code": EXAMPLE}, headers=bearer(keys["agent"]))
    assert custom.status_code == 422 and custom.json()["code"] == "unknown_track" and "POST /v1/ideas" in custom.json()["hint"]
    assert client.post("/v1/ideas/check", json={"track": "smoke", "code": EXAMPLE},
                       headers=bearer(keys["viewer"])).status_code == 403
    nul = client.post("/v1/ideas/check", json={"track": "smoke", "code": EXAMPLE, "mechanism": {"a\u0000": 1}},
                      headers=bearer(keys["agent"]))  # the fuzzer's: a 500 once
    assert nul.status_code == 422 and nul.json()["code"] == "validation_error", nul.text
    with app.state.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(IdeaCheck)) == 0


def test_a_check_is_answered_by_a_worker_and_makes_no_job(app: Any, client: Any, keys: dict[str, str]) -> None:
    agent = bearer(keys["agent"])
    pending = client.post("/v1/ideas/check?wait=0", json={"track": "smoke", "code": EXAMPLE}, headers=agent)
    assert pending.status_code == 202 and pending.json()["status"] == "pending", pending.text
    wide = client.post("/v1/ideas/check?wait=0", json={"track": "smoke", "code": WIDE}, headers=agent).json()
    third = client.post("/v1/ideas/check?wait=0", json={"track": "smoke", "code": EXAMPLE}, headers=agent)
    assert third.status_code == 429 and third.json()["code"] == "too_many_checks"
    assert answer_one(worker(app)) and answer_one(worker(app)) and not answer_one(worker(app))
    passed = client.get(pending.headers["Location"], headers=agent)
    assert passed.status_code == 200, passed.text
    body = passed.json()
    assert body["status"] == "passed" and body["error"] is None and body["result"]["track"] == "smoke@1"
    assert body["result"]["parameters"] == {"idea": [321], "baseline": 321, "limit": 353}
    failed = client.get(f"/v1/checks/{wide['check_id']}", headers=agent).json()
    assert failed["status"] == "failed" and failed["error"]["code"] == "parameter_parity" and failed["error"]["hint"]
    other = client.get(f"/v1/checks/{wide['check_id']}", headers=bearer(keys["agent2"]))
    assert other.status_code == 404 and other.json()["code"] == "check_not_found"
    assert client.get(f"/v1/checks/{wide['check_id']}", headers=bearer(keys["operator"])).status_code == 200
    with app.state.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0


def test_a_check_no_worker_takes_ends_and_says_why(app: Any, client: Any, keys: dict[str, str]) -> None:
    agent = bearer(keys["agent"])
    made = client.post("/v1/ideas/check?wait=0", json={"track": "smoke", "code": EXAMPLE}, headers=agent).json()
    with app.state.sessionmaker() as session:
        session.execute(update(IdeaCheck).values(created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))
        session.commit()
        assert expire(session, pending_s=300, running_s=300) == 1
    ended = client.get(f"/v1/checks/{made['check_id']}?wait=5", headers=agent).json()
    assert ended["status"] == "failed" and ended["error"]["code"] == "not_ready" and "readyz/judging" in ended["error"]["hint"]
