"""Reports: by job and id, filters, keyset pagination in every sort, the verdict summary.

Runs on SQLite and on Postgres (the latter skips unless reachable or CI=true).
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.app.factories import PAIRS, insert_report, key_id, report_body
from tests.conftest import bearer

T0 = dt.datetime(2025, 5, 5, 10, 0, tzinfo=dt.UTC)  # a Monday



def seed(app: Any, submitter: str, n: int = 60) -> list[Any]:
    """n reports over 10 days and two tracks, all verdict pairs, some ties in time."""
    rng = random.Random(7)
    pairs = list(PAIRS)
    rows = []
    with app.state.sessionmaker() as session:
        for i in range(n):
            system, practical = pairs[i % len(pairs)]
            body = report_body(system, practical, mechanism_ok=None if i % 7 == 0 else PAIRS[(system, practical)],
                               p_value=rng.choice([0.0078125, 0.02, 0.3, 0.5, 1.0]),
                               delta=round(rng.uniform(-0.05, 0.05), 4))
            created = T0 + dt.timedelta(hours=8 * (i // 2))  # pairs of rows share a timestamp
            rows.append(insert_report(session, submitter, body, created, track="smoke" if i % 3 else "tabular"))
        session.commit()
    return rows


def all_pages(client: Any, token: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = dict(params, limit=9, **({"cursor": cursor} if cursor else {}))
        response = client.get("/v1/reports", params=query, headers=bearer(token))
        assert response.status_code == 200, response.text
        page = response.json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def test_report_of_a_job_and_by_id(env: Any) -> None:
    app, client, tokens = env
    [report] = seed(app, key_id(tokens["agent"]), n=1)
    by_job = client.get(f"/v1/jobs/{report.job_id}/report", headers=bearer(tokens["viewer"]))
    assert by_job.status_code == 200, by_job.text
    body = by_job.json()
    assert body["report_id"] == report.id and body["report"]["system_verdict"] == "worked"
    assert body["report"]["bench_report"]["comparison"]["p_value"] == body["p_value"]
    assert client.get(f"/v1/reports/{report.id}", headers=bearer(tokens["agent"])).json() == body


def test_agents_and_viewers_do_not_see_reusable_seeds_per_seed_values(env: Any) -> None:
    """Issue 25.6: the sweep's and the screening's per-seed values (seeds other jobs reuse)
    would teach an agent which init won where; only operators see them. The confirmation's
    too: its seeds are the same for every job of the same models, and a file could write what
    it knows of them into its numbers (issue 25, red team). Means, tests and verdicts are shown
    to all."""
    app, client, tokens = env
    body = report_body()
    stage = {"seeds": [1003, 1017], "per_seed": {"baseline": [1.0, 2.0], "idea": [0.5, 1.5]},
             "comparison": {"verdict": "no significant win", "per_seed_diffs": [-0.5, -0.5], "p_value": 0.5}}
    body["bench_report"].update(
        screening=stage, comparison={**body["bench_report"]["comparison"], "per_seed_diffs": [-0.5, -0.5]},
        seeds={"sweep": [0, 1], "final": [1003, 1017], "confirmation": [2000, 2001]},
        baseline={"mean": 1.5, "full": {"mean": 1.5, "per_seed": [1.0, 2.0]},
                  "sweep": [{"cfg": {"lr": 0.1}, "mean": 1.5, "per_seed": [1.4, 1.6]}]},
        mechanism_signature={"baseline_values": [0.1, 0.2], "idea_values": [0.3, 0.4], "decision": "confirmed"},
        confirmation={**stage, "seeds": [2000, 2001], "p_value": 0.5, "significant": False, "job_key": "job_x"},
    )
    with app.state.sessionmaker() as session:
        report = insert_report(session, key_id(tokens["agent"]), body)
        session.commit()
    for role in ("agent", "viewer"):
        seen = client.get(f"/v1/reports/{report.id}", headers=bearer(tokens[role])).json()["report"]["bench_report"]
        text = str(seen)
        assert "per_seed_diffs" not in text and "'per_seed': [" not in text and "_values" not in text
        assert "1003" not in text and "1.6" not in text
        assert seen["screening"]["per_seed"] == {} and seen["seeds"]["final"] == [] and seen["withheld"]
        assert seen["baseline"]["full"]["mean"] == 1.5 and seen["comparison"]["p_value"] == body[
            "bench_report"]["comparison"]["p_value"] and seen["mechanism_signature"]["decision"] == "confirmed"
        assert seen["confirmation"]["per_seed"] == {} and "0.5, 1.5" not in text
        assert seen["confirmation"]["p_value"] == 0.5 and seen["confirmation"]["seeds"] == [2000, 2001]
    full = client.get(f"/v1/reports/{report.id}", headers=bearer(tokens["operator"])).json()["report"]
    assert full["bench_report"]["screening"] == stage and "withheld" not in full["bench_report"]
    by_job = client.get(f"/v1/jobs/{report.job_id}/report", headers=bearer(tokens["agent"])).json()
    assert by_job["report"]["bench_report"]["withheld"]


def test_filters(env: Any) -> None:
    app, client, tokens = env
    rows = seed(app, key_id(tokens["agent"]))
    viewer = tokens["viewer"]
    for params, keep in [
        ({"system_verdict": "worked"}, lambda r: r.system_verdict == "worked"),
        ({"practical_verdict": "inconclusive", "track": "smoke"},
         lambda r: r.practical_verdict == "inconclusive" and r.track == "smoke"),
        ({"system_verdict": "partial", "practical_verdict": "helps"},
         lambda r: (r.system_verdict, r.practical_verdict) == ("partial", "helps")),
        ({"mechanism_ok": "true"}, lambda r: r.mechanism_ok is True),
        ({"mechanism_ok": "false"}, lambda r: r.mechanism_ok is False),
        ({"mechanism_ok": "none"}, lambda r: r.mechanism_ok is None),
        ({"created_after": (T0 + dt.timedelta(days=3)).isoformat(),
          "created_before": (T0 + dt.timedelta(days=5)).isoformat()},
         lambda r: T0 + dt.timedelta(days=3) <= r.created_at < T0 + dt.timedelta(days=5)),
        ({"submitter": key_id(tokens["agent"])}, lambda r: True),
        ({"submitter": "key_other"}, lambda r: False),
    ]:
        got = {i["report_id"] for i in all_pages(client, viewer, params)}
        assert got == {r.id for r in rows if keep(r)}, params


@pytest.mark.parametrize("sort", ["-created_at", "created_at", "p_value", "-p_value", "delta", "-delta"])
def test_cursor_pagination_in_every_sort(env: Any, sort: str) -> None:
    app, client, tokens = env
    rows = seed(app, key_id(tokens["agent"]))
    items = all_pages(client, tokens["viewer"], {"sort": sort, "track": "smoke"})
    expected = [r for r in rows if r.track == "smoke"]
    assert len(items) == len(expected) and {i["report_id"] for i in items} == {r.id for r in expected}
    field = {"created_at": "created_at", "p_value": "p_value", "delta": "delta_mean"}[sort.lstrip("-")]
    keys = [(i[field], i["report_id"]) for i in items]
    if field == "created_at":
        keys = [(dt.datetime.fromisoformat(v.replace("Z", "+00:00")), rid) for v, rid in keys]
    assert keys == sorted(keys, reverse=sort.startswith("-"))


def test_nullable_sort_puts_nulls_last_across_pages(env: Any) -> None:
    app, client, tokens = env
    agent = key_id(tokens["agent"])
    with app.state.sessionmaker() as session:
        for i in range(12):
            body = report_body(p_value=0.1 * (i % 4))
            if i % 3 == 0:
                body["bench_report"]["comparison"]["p_value"] = float("nan")  # stored as null
            insert_report(session, agent, body, T0 + dt.timedelta(minutes=i))
        session.commit()
    for sort in ("p_value", "-p_value"):
        items = all_pages(client, tokens["viewer"], {"sort": sort})
        values = [i["p_value"] for i in items]
        assert len(items) == 12 and values[-4:] == [None] * 4 and None not in values[:-4]


def test_verdict_summary_by_day_and_week(env: Any) -> None:
    app, client, tokens = env
    rows = seed(app, key_id(tokens["agent"]))
    window = {"since": "2025-05-01", "until": "2025-05-31"}
    by_day = client.get("/v1/verdicts/summary", params=window, headers=bearer(tokens["viewer"])).json()
    assert by_day["bucket"] == "day" and by_day["since"] == "2025-05-01"
    assert sum(r["total"] for r in by_day["rows"]) == len(rows) == sum(t["total"] for t in by_day["totals"])
    expect: dict[tuple[str, str, str], int] = {}
    for r in rows:
        k = (r.created_at.date().isoformat(), r.track, f"{r.system_verdict}/{r.practical_verdict}")
        expect[k] = expect.get(k, 0) + 1
    got = {(r["period"], r["track"], pair): n for r in by_day["rows"] for pair, n in r["counts"].items()}
    assert got == expect
    weekly = client.get("/v1/verdicts/summary", params={**window, "bucket": "week", "track": "smoke"},
                        headers=bearer(tokens["viewer"])).json()
    assert {r["period"] for r in weekly["rows"]} == {"2025-05-05", "2025-05-12"}  # Mondays
    assert sum(r["total"] for r in weekly["rows"]) == sum(1 for r in rows if r.track == "smoke")
    one_day = client.get("/v1/verdicts/summary", params={"since": "2025-05-06", "until": "2025-05-06"},
                         headers=bearer(tokens["viewer"])).json()
    assert {r["period"] for r in one_day["rows"]} == {"2025-05-06"}
    # Default window: the last 30 days, which hold none of these 2025 reports.
    default = client.get("/v1/verdicts/summary", headers=bearer(tokens["viewer"])).json()
    assert default["rows"] == [] and default["until"] > default["since"]
    bad = client.get("/v1/verdicts/summary", params={"since": "2025-06-01", "until": "2025-05-01"},
                     headers=bearer(tokens["viewer"]))
    assert bad.status_code == 422 and bad.json()["code"] == "validation_error"


@pytest.mark.parametrize("query", [
    {"created_after": "0001-01-01T00:00:59+06:29"},  # before year 1 in UTC (found by schemathesis)
    {"created_before": "9999-12-31T23:59:59-06:00"},  # after year 9999 in UTC
    {"created_after": "0"}, {"since": "0"}, {"until": "1"},  # not ISO 8601: pydantic alone reads 1970
    {"cursor": ""},
])
def test_times_and_cursors_out_of_range_or_form_are_422(client: TestClient, keys: dict[str, str],
                                                        query: dict[str, str]) -> None:
    path = "/v1/verdicts/summary" if set(query) & {"since", "until"} else "/v1/reports"
    answer = client.get(path, params=query, headers=bearer(keys["viewer"]))
    assert answer.status_code == 422 and answer.json()["code"] == "validation_error", answer.text


def test_a_summary_window_at_the_first_day_of_the_calendar(client: TestClient, keys: dict[str, str]) -> None:
    answer = client.get("/v1/verdicts/summary", params={"until": "0001-01-02"}, headers=bearer(keys["viewer"]))
    assert answer.status_code == 200 and answer.json()["since"] == "0001-01-01"  # (found by schemathesis)
    answer = client.get("/v1/verdicts/summary", params={"since": "9999-12-01", "until": "9999-12-31"},
                        headers=bearer(keys["viewer"]))
    assert answer.status_code == 200


def test_the_listing_shows_the_delta_of_the_stage_that_decided(env: Any) -> None:
    """A confirmed verdict lists the confirmation's delta (the one its page shows), named as
    such; a screening's verdict its screening's (issue 27.7)."""
    app, client, tokens = env
    confirmed = report_body(delta=-0.02)
    confirmed["bench_report"].update(decided_by="confirmation",
                                     confirmation={"comparison": {"delta_mean": -0.008}, "p_value": 0.01})
    screened = report_body("failed", "inconclusive", delta=0.004)
    screened["bench_report"]["decided_by"] = "screening"
    with app.state.sessionmaker() as session:
        ids = [insert_report(session, key_id(tokens["agent"]), body, T0).id for body in (confirmed, screened)]
        session.commit()
    listed = client.get("/v1/reports", params={"track": "smoke"}, headers=bearer(tokens["viewer"])).json()["items"]
    by_id = {item["report_id"]: item for item in listed}
    assert (by_id[ids[0]]["delta_mean"], by_id[ids[0]]["delta_stage"]) == (-0.008, "confirmation")
    assert (by_id[ids[1]]["delta_mean"], by_id[ids[1]]["delta_stage"]) == (0.004, "screening")
    ordered = client.get("/v1/reports", params={"track": "smoke", "sort": "delta"}, headers=bearer(tokens["viewer"]))
    assert [i["report_id"] for i in ordered.json()["items"]] == ids  # sorted by what is listed
