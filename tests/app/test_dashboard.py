"""The dashboard without a browser: sign-in and its cookie, roles, CSRF, error pages, the pages'
content against the API's answers, and the charts' points (tests/browser draws them)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.dashboard import charts
from app.dashboard.auth import COOKIE
from app.db import utcnow
from app.jobs.models import Job, JobEvent, JobStatus
from app.keys.service import revoke_key
from app.reports.service import verdict_summary
from tests.app.factories import insert_job, insert_report, key_id, report_body
from tests.bench.test_report import SEED_FILES, read_seed
from tests.conftest import bearer


def queued_job(app: Any, keys: dict[str, str]) -> str:
    """A queued job of the agent key, committed; its id."""
    with app.state.sessionmaker() as session:
        job = insert_job(session, key_id(keys["agent"]))
        session.commit()
        return job.id


def status_of(app: Any, job_id: str) -> str:
    with app.state.sessionmaker() as session:
        return session.get(Job, job_id).status  # type: ignore[union-attr]


def sign_in(client: TestClient, token: str, next_: str = "/dashboard") -> Any:
    return client.post("/dashboard/login", data={"key": token, "next": next_}, follow_redirects=False)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def test_pages_need_a_sign_in_and_send_back_where_one_was_going(client: TestClient) -> None:
    for path in ("/dashboard", "/dashboard/reports?track=smoke", "/dashboard/operator", "/dashboard/tracks/smoke"):
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/dashboard/login?next=%2Fdashboard")
    assert client.get("/dashboard/login").status_code == 200


def test_sign_in_sets_a_signed_http_only_strict_cookie_without_the_key(client: TestClient,
                                                                      keys: dict[str, str]) -> None:
    cross = client.post("/dashboard/login", data={"key": keys["viewer"]}, headers={"Origin": "https://evil.example"},
                        follow_redirects=False)
    assert cross.status_code == 403 and COOKIE not in cross.cookies  # no signing a visitor in from elsewhere
    bad = sign_in(client, "ib_00000000_not-a-key")
    assert bad.status_code == 401 and "unknown or revoked" in bad.text and COOKIE not in bad.cookies
    answer = sign_in(client, keys["viewer"], "/dashboard/reports")
    assert answer.status_code == 303 and answer.headers["location"] == "/dashboard/reports"
    header = answer.headers["set-cookie"]
    assert "HttpOnly" in header and "SameSite=lax" in header and "Path=/dashboard" in header
    assert "Secure" not in header  # plain http here; see the public_origin test
    assert keys["viewer"] not in header and keys["viewer"].split("_", 2)[2] not in header
    assert client.get("/dashboard").status_code == 200
    value = answer.cookies[COOKIE]
    client.cookies.clear()
    client.cookies.set(COOKIE, value[:-2] + ("xx" if not value.endswith("xx") else "yy"))  # tampered
    assert client.get("/dashboard", follow_redirects=False).status_code == 303


@pytest.mark.parametrize("target", ["https://evil.example/x", "//evil.example/x", "/v1/keys", "/dashboard\\@evil",
                                    "javascript:alert(1)"])
def test_sign_in_never_redirects_off_the_dashboard(client: TestClient, keys: dict[str, str], target: str) -> None:
    assert sign_in(client, keys["viewer"], target).headers["location"] == "/dashboard"


def test_a_revoked_key_ends_its_session_at_once(app: Any, client: TestClient, keys: dict[str, str]) -> None:
    sign_in(client, keys["agent"])
    assert client.get("/dashboard").status_code == 200
    with app.state.sessionmaker() as session:
        revoke_key(session, key_id(keys["agent"]))
        session.commit()
    assert client.get("/dashboard", follow_redirects=False).status_code == 303


def test_viewers_see_no_operator_page_and_cannot_cancel(app: Any, client: TestClient, keys: dict[str, str]) -> None:
    job_id = queued_job(app, keys)
    sign_in(client, keys["viewer"])
    home = client.get("/dashboard")
    assert "/dashboard/operator" not in home.text
    page = client.get("/dashboard/operator")
    assert page.status_code == 403 and 'data-code="forbidden_role"' in page.text
    assert page.headers["content-type"].startswith("text/html")
    cancel = client.post(f"/dashboard/jobs/{job_id}/cancel", data={"csrf": csrf_of(home.text)})
    assert cancel.status_code == 403
    assert status_of(app, job_id) == JobStatus.QUEUED.value


def test_an_operator_cancels_with_the_forms_token_only(app: Any, client: TestClient, keys: dict[str, str]) -> None:
    job_id = queued_job(app, keys)
    sign_in(client, keys["operator"])
    page = client.get("/dashboard/operator")
    assert page.status_code == 200 and f'data-job="{job_id}"' in page.text
    token = csrf_of(page.text)
    url = f"/dashboard/jobs/{job_id}/cancel"
    assert client.post(url, data={}).status_code == 403  # no token
    assert client.post(url, data={"csrf": token + "x"}).status_code == 403
    cross = client.post(url, data={"csrf": token}, headers={"Origin": "https://evil.example"})
    assert cross.status_code == 403 and 'data-code="csrf_failed"' in cross.text
    assert status_of(app, job_id) == JobStatus.QUEUED.value
    done = client.post(url, data={"csrf": token}, headers={"Origin": "http://testserver"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/dashboard/operator?cancelled={job_id}"
    assert status_of(app, job_id) == JobStatus.CANCELLED.value
    signed_out = client.post("/dashboard/logout", data={"csrf": token}, follow_redirects=False)
    assert signed_out.status_code == 303
    assert client.get("/dashboard", follow_redirects=False).status_code == 303


def test_pages_load_nothing_from_elsewhere_and_errors_are_pages(client: TestClient, keys: dict[str, str]) -> None:
    sign_in(client, keys["viewer"])
    page = client.get("/dashboard")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["cache-control"] == "no-store"
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith(("/", "data:", "#")) for s in sources), sources
    js = [s for s in sources if "plotly" in s]
    assert js and client.get(js[0]).status_code == 200
    missing = client.get("/dashboard/reports/rep_missing")
    assert missing.status_code == 404 and 'data-code="report_not_found"' in missing.text
    bad = client.get("/dashboard/reports?sort=nonsense")
    assert bad.status_code == 422 and 'data-code="validation_error"' in bad.text
    assert client.get("/v1/reports/rep_missing", headers=bearer(keys["viewer"])).json()["code"] == "report_not_found"


def test_the_reports_table_filters_and_pages_as_the_api_does(app: Any, client: TestClient,
                                                             keys: dict[str, str]) -> None:
    with app.state.sessionmaker() as session:
        for i, (system, practical) in enumerate([("worked", "helps")] * 3 + [("failed", "harms")] * 2
                                                 + [("partial", "inconclusive")] * 4):
            insert_report(session, key_id(keys["agent"]), report_body(system, practical),
                          created_at=utcnow() - dt.timedelta(minutes=i))
        session.commit()
    sign_in(client, keys["viewer"])
    for query, expected in (("", 9), ("system_verdict=worked", 3), ("practical_verdict=harms", 2),
                            ("system_verdict=partial&practical_verdict=inconclusive", 4)):
        page = client.get(f"/dashboard/reports?{query}&track=&mechanism_ok=&family=")  # a form's "all": empty
        api = client.get(f"/v1/reports?{query}", headers=bearer(keys["viewer"])).json()["items"]
        assert re.findall(r'data-report="([^"]+)"', page.text) == [r["report_id"] for r in api]
        assert len(api) == expected
    first = client.get("/dashboard/reports?limit=5")
    rows = re.findall(r'data-report="([^"]+)"', first.text)
    next_url = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert len(rows) == 5 and next_url
    second = client.get(next_url.group(1).replace("&amp;", "&"))
    assert len(re.findall(r'data-report="([^"]+)"', second.text)) == 4
    assert 'rel="next"' not in second.text and "First page" in second.text


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name[:3])
def test_the_seed_reports_render(app: Any, client: TestClient, keys: dict[str, str], path: Any) -> None:
    seed = read_seed(path)
    track = seed["bench_report"]["track"]
    with app.state.sessionmaker() as session:
        report = insert_report(session, key_id(keys["agent"]), seed, track=track)
        session.commit()
    sign_in(client, keys["operator"])  # an operator sees every per-seed value
    page = client.get(f"/dashboard/reports/{report.id}")
    assert page.status_code == 200, page.text[-2000:]
    assert 'id="fig-paired"' in page.text and 'data-stage="screening"' in page.text
    assert 'id="withheld"' not in page.text
    sign_in(client, keys["viewer"])  # a viewer (or an agent's key) not those of reusable seeds
    page = client.get(f"/dashboard/reports/{report.id}")
    assert page.status_code == 200 and 'id="withheld"' in page.text
    assert 'data-stage="screening"' not in page.text  # no per-seed table of the screening
    raw = client.get(f"/dashboard/reports/{report.id}.json").json()
    assert raw == client.get(f"/v1/reports/{report.id}", headers=bearer(keys["viewer"])).json()
    assert raw["report"]["bench_report"]["withheld"]


def test_the_paired_plot_has_two_points_per_seed_of_each_stage() -> None:
    bench = {"screening": {"per_seed": {"baseline": [1.0, 2.0, 3.0], "idea": [0.5, 2.5, 2.0]}, "seeds": [7, 8, 9],
                           "comparison": {}},
             "confirmation": {"per_seed": {"baseline": [1.0, 1.5], "idea": [0.9, 1.2]}, "seeds": [11, 12],
                              "comparison": {"ci_low": -0.4, "ci_high": -0.1, "delta_mean": -0.2, "mde": 0.3}}}
    stages = charts.stages_of(bench)
    assert [s.name for s in stages] == ["screening", "confirmation"]
    figure = charts.paired_figure(stages, "mse")
    markers = [t for t in figure["data"] if t["mode"] == "markers"]
    assert sum(len(t["y"]) for t in markers) == 2 * (3 + 2)
    lines = [t for t in figure["data"] if t["mode"] == "lines"]
    assert lines[0]["x"] == ["S1", "S1", None, "S2", "S2", None, "S3", "S3", None]
    assert stages[1].diffs == pytest.approx([-0.1, -0.3])
    diffs = charts.diffs_figure(stages, stages[1].comparison, "lower is better")
    kinds = [(s["type"], s.get("y0")) for s in diffs["layout"]["shapes"]]
    assert ("rect", -0.4) in kinds and ("line", 0.3) in kinds and ("line", -0.3) in kinds
    assert stages[0].runs_text == stages[1].runs_text == ""  # one run a seed: nothing to say


def test_a_stage_says_when_each_value_is_the_mean_of_a_seeds_repeat_runs() -> None:
    bench = {"screening": {"per_seed": {"baseline": [1.0], "idea": [0.5]}, "seeds": [7], "comparison": {}},
             "confirmation": {"per_seed": {"baseline": [1.0, 1.5], "idea": [0.9, 1.2]}, "seeds": [11, 12],
                              "comparison": {}},
             "budget": {"repeats": 4, "repeats_made": {"screening": [4], "confirmation": [4, 1]}}}
    screening, confirmation = charts.stages_of(bench)
    assert screening.runs_text == "each value the mean of 4 runs per arm"
    assert confirmation.runs_text == "each value the mean of a seed's runs per arm (look 1: 4 runs, look 2: 1 run)"


def test_the_history_chart_has_one_bar_per_non_empty_cell(app: Any, keys: dict[str, str]) -> None:
    today = utcnow().replace(hour=12)
    with app.state.sessionmaker() as session:
        for days, system, practical in [(0, "worked", "helps"), (0, "worked", "helps"), (0, "failed", "harms"),
                                        (2, "failed", "harms"), (3, "partial", "inconclusive")]:
            insert_report(session, key_id(keys["agent"]), report_body(system, practical),
                          created_at=today - dt.timedelta(days=days))
        session.commit()
        summary = verdict_summary(session, "day", None, None, None)
    figure = charts.history_figure(summary)
    bars = {t["name"]: t["y"] for t in figure["data"]}
    assert bars == {"worked/helps": [2], "partial/inconclusive": [1], "failed/harms": [1, 1]}


def test_stage_spans_end_at_the_next_stage_or_the_jobs_end(app: Any, keys: dict[str, str]) -> None:
    from app.health.state import job_stages

    t0 = utcnow()
    with app.state.sessionmaker() as session:
        job = insert_job(session, key_id(keys["agent"]), status=JobStatus.SUCCEEDED.value, started_at=t0,
                         finished_at=t0 + dt.timedelta(seconds=10))
        for seq, (stage, at) in enumerate([("sweep", 1), ("final", 6), ("mechanism", 9)], start=1):
            session.add(JobEvent(job_id=job.id, seq=seq, kind="stage", attempt=1, data={"stage": stage},
                                 created_at=t0 + dt.timedelta(seconds=at)))
        session.commit()
        spans = job_stages(session, [job.id], {job.id: job.finished_at})
    assert [(s.stage, round(s.seconds, 3)) for s in spans] == [("sweep", 5.0), ("final", 3.0), ("mechanism", 1.0)]


def test_processes_starting_at_once_agree_on_one_session_secret(tmp_path: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from app.dashboard.auth import session_secret
    from app.settings import Settings

    settings = Settings(data_dir=tmp_path / "var")
    with ThreadPoolExecutor(8) as pool:
        found = set(pool.map(lambda _: session_secret(settings), range(32)))
    assert len(found) == 1 and len(found.pop()) == 64
    assert oct((tmp_path / "var" / "session_secret").stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in (tmp_path / "var").iterdir()) == ["session_secret"]
    assert session_secret(Settings(data_dir=tmp_path / "var", session_secret="configured")) == "configured"


def test_a_confirmed_report_shows_both_stages_and_its_looks(app: Any, client: TestClient,
                                                            keys: dict[str, str]) -> None:
    body = report_body("worked", "helps")
    comparison = body["bench_report"]["comparison"]
    stage = {"comparison": comparison, "seeds": list(range(8)), "per_seed": {"baseline": [1.0] * 8, "idea": [0.5] * 8},
             "seed_commitment": {"scheme": "hmac-sha256/v1", "epoch": 1, "commitment": "0" * 64}}
    body["bench_report"].update(
        screening=stage, decided_by="confirmation",
        confirmation={**stage, "seeds": list(range(2000, 2016)),
                      "per_seed": {"baseline": [1.0] * 16, "idea": [0.9] * 16},
                      "p_value": 2 / 65536, "significant": True, "job_key": "job_x",
                      "looks": [{"n_pairs": 8, "p_better": 0.03, "alpha": 0.025},
                                {"n_pairs": 16, "p_better": 1 / 65536, "alpha": 0.025}]})
    with app.state.sessionmaker() as session:
        report = insert_report(session, key_id(keys["agent"]), body)
        session.commit()
    for who, per_seed in (("operator", True), ("viewer", False)):
        sign_in(client, keys[who])
        page = client.get(f"/dashboard/reports/{report.id}")
        assert page.status_code == 200
        confirmation = re.search(r'<dd id="confirmation">(.*?)</dd>', page.text, re.S)
        assert confirmation and "replicated" in confirmation.group(1) and "look 2: 16 pairs" in confirmation.group(1)
        # the confirmation's per-seed values: an operator's alone (its seeds are every job's of these models)
        assert ('data-stage="confirmation"' in page.text and ">C16<" in page.text) is per_seed, who


def test_behind_a_tls_proxy_the_public_origin_decides(tmp_path: Any) -> None:
    """A proxy that terminates TLS: the app sees http://testserver, the browser says
    https://bench.example.org; the forms check that origin and the cookie is Secure."""
    from app.keys.service import create_key
    from app.settings import Settings
    from tests.conftest import _build_app

    app = _build_app(Settings(data_dir=tmp_path / "var", public_origin="https://bench.example.org"), True)
    with app.state.sessionmaker() as session:
        token = create_key(session, "viewer", "v").token
        session.commit()
    with TestClient(app) as client:
        same = client.post("/dashboard/login", data={"key": token}, headers={"Origin": "https://bench.example.org"},
                           follow_redirects=False)
        assert same.status_code == 303 and "Secure" in same.headers["set-cookie"]
        direct = client.post("/dashboard/login", data={"key": token}, headers={"Origin": "http://testserver"},
                             follow_redirects=False)
        assert direct.status_code == 403
    app.state.engine.dispose()


def test_the_timeline_is_its_submitters_and_the_operators(app: Any, client: TestClient,
                                                         keys: dict[str, str]) -> None:
    with app.state.sessionmaker() as session:
        report = insert_report(session, key_id(keys["agent"]), report_body())
        session.commit()
    for role, shown in (("viewer", False), ("agent2", False), ("agent", True), ("operator", True)):
        client.cookies.clear()
        sign_in(client, keys[role])
        page = client.get(f"/dashboard/reports/{report.id}").text
        assert ('id="timeline"' in page) is shown and ('id="timeline-hidden"' in page) is not shown, role


def test_odd_report_shapes_render_instead_of_failing(app: Any, client: TestClient, keys: dict[str, str]) -> None:
    body = report_body()
    bench = body["bench_report"]
    bench["comparison"].update(ci_level="95%", ci_low=None, mde="big")
    bench["seeds"] = [1, 2, 3]
    bench["baseline"] = {"sweep": [{"cfg": "lr=0.1", "mean": 1.0}, "row"], "per_seed": [1.0, "x", None]}
    bench["isolation"] = ["namespaces"]
    with app.state.sessionmaker() as session:
        report = insert_report(session, key_id(keys["agent"]), body)
        session.commit()
    sign_in(client, keys["viewer"])
    page = client.get(f"/dashboard/reports/{report.id}")
    assert page.status_code == 200 and "95 % CI" in page.text


# --- reports that read true (issue 27.7) -----------------------------------------------------

EXACT = "exact sign-flip (2^8 = 256 patterns)"


def _comparison(delta: float, p: float, p_better: float, verdict: str, n: int = 8, **extra: Any) -> dict[str, Any]:
    return {"delta_mean": delta, "idea_wins": n if delta < 0 else 0, "n_pairs": n, "p_value": p, "p_better": p_better,
            "p_method": EXACT, "alpha": 0.05, "ci_level": 0.95, "ci_low": min(delta * 1.8, delta * 0.2),
            "ci_high": max(delta * 1.8, delta * 0.2),
            "rel_delta_pct": delta / 0.31 * 100, "mde": 0.006, "mde_rel_pct": 1.9, "effect_size": -1.23456,
            "baseline_mean": 0.31, "idea_mean": 0.31 + delta, "verdict": verdict, **extra}


def _stage(comparison: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    n = len(seeds)
    return {"comparison": comparison, "seeds": seeds, "matched_lr": None,
            "per_seed": {"baseline": [0.31] * n, "idea": [0.31 + comparison["delta_mean"]] * n},
            "seed_commitment": {"scheme": "hmac-sha256/v1", "epoch": 1, "commitment": "0" * 64}}


def screened_body() -> dict[str, Any]:
    """A report the screening decided (no confirmation ran), with the provenance blocks a real
    report has: parameter parity, execution, wall times, and a mechanism with its rule."""
    body = report_body("partial", "harms", p_value=0.03125, delta=0.148)
    bench = body["bench_report"]
    screening = _comparison(0.148, 0.03125, 0.984375, "idea worse (significant)")
    bench.update(
        comparison=screening, screening=_stage(screening, list(range(8))), confirmation=None,
        decided_by="screening", pooled=None, metric_direction="lower is better",
        parameter_parity={"baseline": 321, "idea": 321, "ratio": 1.0, "buffers": {"baseline": 0, "idea": 0},
                          "max_ratio": 1.1, "counted_by": "bench", "flops_per_example": {"baseline": 641.0,
                                                                                         "idea": 641.0},
                          "compute_ratio": 1.0, "max_compute_ratio": 4.0},
        execution={"path": "vectorized", "arms_in_parallel": True, "baseline_cache": False,
                   "baseline_cache_hits": 0, "baseline_cache_misses": 16},
        wall_time_s={"baseline": 0.09060905900014404, "idea": 0.1023597600001267, "total": 5.1752831140001945},
        mechanism_signature={
            "quantity": "input sensitivity", "prediction": "smoother", "expect": {"kind": "lower_than_baseline"},
            "probe": {"kind": "input_gradient"}, "self_measured": False,
            "idea_values": [0.35] * 8, "baseline_values": [0.41] * 8,
            "baseline_mean": 0.40621040761470795, "idea_mean": 0.3510233499109745, "confirmed": True,
            "detail": {"kind": "lower_than_baseline", "idea_mean": 0.3510233499109745,
                       "baseline_mean": 0.40621040761470795, "p_value": 0.00390625, "p_method": EXACT, "n": 8,
                       "rule": "one-sided paired sign-flip test: idea lower than baseline, p <= 0.05"}})
    return body


def confirmed_body() -> dict[str, Any]:
    """A screened win that replicated on the second look of its confirmation: one-sided p
    0.0306 at look 2's level 0.04, while the confirmation's own two-sided test, which decides
    nothing, says "no significant win". The looks' levels carry float noise, as 0.05 * 0.2 does."""
    body = screened_body()
    body.update(system_verdict="worked", practical_verdict="helps", practical_detail=None, worked=True,
                summary="A test report: worked/helps, replicated on the confirmation's second look.")
    bench = body["bench_report"]
    screening = _comparison(-0.01, 0.0078125, 0.00390625, "idea better (significant)")
    confirmation = _comparison(-0.0043, 0.0612, 0.0306, "no significant win", n=16)
    bench.update(
        comparison=screening, screening=_stage(screening, list(range(8))), decided_by="confirmation", p_helps=0.03825,
        confirmation={**_stage(confirmation, list(range(2000, 2016))), "p_value": 0.03825, "significant": True,
                      "job_key": "job_x", "model_key": "m" * 16,
                      "looks": [{"n_pairs": 8, "p_better": 0.0703125, "alpha": 0.05 * 0.2},
                                {"n_pairs": 16, "p_better": 0.0306, "alpha": 0.05 * 0.8}]},
        pooled={"delta_mean": -0.006200000000000001, "idea_wins": 19, "n_pairs": 24, "p_value": 0.0123,
                "p_method": "Monte Carlo (100000 draws)", "ci_low": -0.0101, "ci_high": -0.0019,
                "rel_delta_pct": -2.0, "decides": False, "note": "screening and confirmation pairs pooled"})
    return body


def visible(html: str) -> str:
    """A page's HTML without its scripts (the charts' data) and the collapsed whole-report JSON."""
    html = re.sub(r"<script\b.*?</script>", "", html, flags=re.S)
    return re.sub(r"<details><summary>The whole report \(JSON\).*?</details>", "", html, flags=re.S)


def inner(html: str, element_id: str) -> str:
    """The text of the element ``element_id`` (its nested elements' too), spaces collapsed,
    entities kept as the page sends them."""
    start = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>', html)
    assert start, f"no #{element_id} on the page"
    tag, depth, at = start.group(1), 1, start.end()
    for found in re.finditer(rf"<(/?){tag}\b[^>]*>", html[at:]):
        depth += -1 if found.group(1) else 1
        if depth == 0:
            return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html[at:at + found.start()]))
    raise AssertionError(f"#{element_id} does not end")


def stored_page(app: Any, client: TestClient, keys: dict[str, str], body: dict[str, Any]) -> tuple[str, str]:
    with app.state.sessionmaker() as session:
        report = insert_report(session, key_id(keys["agent"]), body)
        session.commit()
    sign_in(client, keys["viewer"])
    page = client.get(f"/dashboard/reports/{report.id}")
    assert page.status_code == 200, page.text[-2000:]
    return report.id, page.text


def test_the_headline_names_the_one_sided_look_adjusted_test_that_decided(app: Any, client: TestClient,
                                                                           keys: dict[str, str]) -> None:
    _, html = stored_page(app, client, keys, confirmed_body())
    headline = inner(html, "headline")
    assert "p (two-sided, exact)" not in html
    test = inner(html, "deciding-test")
    assert "one-sided exact paired sign-flip" in test and "2 looks" in test and "at α = 0.05" in test, test
    assert "(looks at 0.01 and 0.04)" in test
    confirmation = inner(html, "confirmation")
    assert confirmation.startswith("replicated: p 0.03825 (one-sided, adjusted for 2 looks) ≤ 0.05"), confirmation
    assert "look 1: 8 pairs, one-sided p 0.07031 at 0.01" in confirmation
    assert "look 2: 16 pairs, one-sided p 0.0306 at 0.04" in confirmation
    assert inner(html, "delta-screening").strip().startswith("screening -0.01 (-3.23 %)")
    assert inner(html, "delta-confirmation").strip().startswith("confirmation -0.0043 (-1.39 %)")
    assert "two-sided p 0.007812 ≤ 0.05 · idea wins 8/8: idea better (significant), so a confirmation ran" in headline
    # the confirmation's two-sided p and CI (and the pooled ones) are labelled descriptive
    rows = dict(re.findall(r'<tr data-comparison="(\w+)"[^>]*>(.*?)</tr>', inner_table := visible(html), re.S))
    assert set(rows) >= {"screening", "confirmation", "pooled"}, inner_table[:200]
    assert "descriptive" not in rows["screening"] and rows["confirmation"].count(">descriptive<") == 2
    assert "Monte Carlo" in rows["pooled"] and "decides nothing" in rows["pooled"]


def test_no_words_on_a_confirmed_page_contradict_its_decision(app: Any, client: TestClient,
                                                              keys: dict[str, str]) -> None:
    _, html = stored_page(app, client, keys, confirmed_body())
    shown = visible(html)
    assert "no significant win" not in shown  # the confirmation's two-sided verdict decides nothing
    assert "not replicated" not in shown and "replicated" in inner(html, "confirmation")
    assert "two-sided, descriptive: the one-sided test above decided" in shown  # the differences chart's band


def test_numbers_are_formatted_for_people_and_no_block_is_raw_json(app: Any, client: TestClient,
                                                                   keys: dict[str, str]) -> None:
    _, html = stored_page(app, client, keys, confirmed_body())
    shown = visible(html)
    assert not re.search(r"\d\.\d*0000000\d", shown), re.findall(r"\S*\d\.\d*0000000\d\S*", shown)
    assert not re.search(r"\d{9,}", re.sub(r"[0-9a-f]{16,}", "", shown))  # no 0.09060905900014404
    assert "\\u003c" not in shown and "u003c" not in shown  # (the charts' JSON in their scripts may escape)
    assert '{"' not in shown and "{&#34;" not in shown and "&#34;:" not in shown
    assert "p &lt;= 0.05" in inner(html, "mechanism-facts")  # the rule, as text
    assert inner(html, "mechanism-confirmed").strip() == "yes" and "True" not in shown and "False" not in shown
    provenance = inner(html, "provenance")
    for words in ("max ratio 1.1", "flops per example baseline 641 · idea 641", "arms in parallel yes",
                  "baseline cache no", "total 5.175", "baseline 0.09061"):
        assert words in provenance, (words, provenance)


def test_a_screened_report_names_its_two_sided_test_and_one_stage(app: Any, client: TestClient,
                                                                  keys: dict[str, str]) -> None:
    _, html = stored_page(app, client, keys, screened_body())
    test = inner(html, "deciding-test")
    assert test.startswith("two-sided exact paired sign-flip test, 1 look, at α = 0.05"), test
    assert inner(html, "decided-by").strip() == "screening"
    result = inner(html, "screening-result")
    assert "two-sided p 0.03125 ≤ 0.05" in result and "idea worse (significant)" in result
    assert 'id="confirmation"' not in html and 'id="delta-confirmation"' not in html
    assert inner(html, "delta-screening").strip().startswith("screening 0.148")
    assert ">descriptive<" not in visible(html)
    assert inner(html, "mechanism-confirmed").strip() == "yes"


def test_the_listing_and_the_page_name_the_stage_of_their_numbers(app: Any, client: TestClient,
                                                                  keys: dict[str, str]) -> None:
    report_id, html = stored_page(app, client, keys, confirmed_body())
    listing = client.get("/dashboard/reports").text
    assert "Δ mean (deciding stage)" in listing and "p (screening, two-sided)" in listing
    row = re.search(rf'<tr data-report="{report_id}">(.*?)</tr>', listing, re.S)
    assert row
    cells = re.findall(r'<td class="n">(.*?)</td>', row.group(1), re.S)
    assert cells[0].startswith("-0.0043 ") and "(conf.)" in cells[0] and cells[1] == "0.007812", cells
    # the listing's Δ is the confirmation's, as the page's confirmation Δ (issue 27.7)
    assert inner(html, "delta-confirmation").split()[1] == cells[0].split()[0]
    assert "two-sided p 0.007812" in inner(html, "screening-result")


def test_an_old_report_does_not_claim_an_exact_test_or_a_level(app: Any, client: TestClient,
                                                               keys: dict[str, str]) -> None:
    seed = read_seed(SEED_FILES[2])  # a hand-run report: Monte Carlo p, no alpha, no screening block
    with app.state.sessionmaker() as session:
        report = insert_report(session, key_id(keys["agent"]), seed, track=seed["bench_report"]["track"])
        session.commit()
    sign_in(client, keys["viewer"])
    html = client.get(f"/dashboard/reports/{report.id}").text
    test = inner(html, "deciding-test")
    assert test.startswith("two-sided paired sign-flip test, 1 look, level not recorded"), test
    assert "p method not recorded" in test


def test_values_read_as_words_and_short_numbers() -> None:
    from app.dashboard.readout import human

    assert human(0.05 * 0.2) == "0.01" and human(0.05 * 0.8) == "0.04" and human(641.0) == "641"
    assert human(True) == "yes" and human(False) == "no" and human(None) == "–"
    assert human(2 / 65536) == "3.052e-05" and human(float("inf")) == "∞"
    assert human({"baseline": 0, "max_ratio": 1.1}) == "baseline 0 · max ratio 1.1"


def test_a_screening_whose_means_came_out_worse_after_favourable_first_runs_says_why() -> None:
    """A card with repeats: the means were significantly worse, the verdict none (harms is judged
    on first runs); the page's screening line says why rather than 'p 0.0078 <= 0.05: no win'."""
    from app.dashboard.readout import screening_test
    from bench.stats import HARMS_ON_FIRST_RUNS

    comparison = {"p_value": 0.0078, "alpha": 0.05, "verdict": "no significant win", "n_pairs": 8,
                  "p_method": f"exact sign-flip (2^8 = 256 patterns); {HARMS_ON_FIRST_RUNS}"}
    decided = screening_test({"screening": {"comparison": comparison}})
    assert decided.outcome.startswith("no significant win (its means came out worse") and not decided.significant
    plain = screening_test({"screening": {"comparison": {**comparison, "p_method": "exact sign-flip"}}})
    assert plain.outcome == "no significant win"
