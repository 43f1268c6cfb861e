"""The dashboard in headless Chromium, on reports a real worker judged: every page renders at a
desktop and a phone width with nothing loaded from elsewhere; the charts hold the right number
of points; the filters change the table; an operator cancels a running job from the page; a
viewer cannot reach the operator page; an agent reads its own failed job's error on the job
pages and cannot open another key's job, while an operator sees every job."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import SCREENSHOTS, Service
from tests.workers.test_end_to_end import SLOW_IDEA

WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


class Page:
    """A signed-in page that records its errors and every URL it requested."""

    def __init__(self, browser: Any, service: Service, role: str, width: str) -> None:
        w, h = WIDTHS[width]
        self.context = browser.new_context(viewport={"width": w, "height": h})
        self.page = self.context.new_page()
        self.width = width
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", lambda msg: msg.type == "error" and self.errors.append(msg.text))
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.url = service.url
        self.page.goto(f"{service.url}/dashboard/login")
        self.page.fill("#key", service.keys[role])
        self.page.click("section.login button[type=submit]")
        self.page.wait_for_url(f"{service.url}/dashboard")

    def open(self, path: str) -> Any:
        answer = self.page.goto(self.url + path)
        self.page.wait_for_function(  # every chart drawn by plotly.js
            "() => [...document.querySelectorAll('[data-figure]')].every(e => e.dataset.ready === 'true')",
            timeout=20_000)
        return answer

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}-{self.width}.png"), full_page=True)
        if name == "report" and self.width == "desktop":  # the README's picture: the page's top
            self.page.screenshot(path=str(SCREENSHOTS / "report-top.png"), full_page=True, clip={"x": 0, "y": 0, "width": 1280,
                                                                                   "height": 1300})

    def count(self, selector: str) -> int:
        n: int = self.page.locator(selector).count()
        return n

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def signed_in(browser: Any, service: Service) -> Iterator[Any]:
    pages: list[Page] = []

    def make(role: str = "operator", width: str = "desktop") -> Page:
        pages.append(Page(browser, service, role, width))
        return pages[-1]

    yield make
    for page in pages:
        page.close()


@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_page_renders_with_nothing_from_elsewhere(service: Service, signed_in: Any, width: str) -> None:
    report = service.api("GET", "/v1/reports")["items"][0]
    page = signed_in("operator", width)
    for name, path in (("history", "/dashboard"), ("reports", "/dashboard/reports"),
                       ("report", f"/dashboard/reports/{report['report_id']}"), ("tracks", "/dashboard/tracks"),
                       ("track", "/dashboard/tracks/smoke"), ("operator", "/dashboard/operator"),
                       ("jobs", "/dashboard/jobs"), ("job", f"/dashboard/jobs/{report['job_id']}")):
        answer = page.open(path)
        assert answer.status == 200, (path, answer.status)
        assert page.page.locator("main h1").count() == 1
        overflow = page.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {width} width"
        page.shot(name)
    assert page.errors == []
    assert page.requests and all(url.startswith(service.url) or url.startswith("data:") for url in page.requests), \
        [u for u in page.requests if not u.startswith(service.url)]


def test_the_tracks_page_says_which_tracks_cannot_run_here_and_why(service: Service, signed_in: Any) -> None:
    """Issue 27.3: a track whose data this deployment lacks (cifar10 without IDEABENCH_CIFAR10_DIR)
    is refused at submission; the page a person reads says so, with the API's reason."""
    listed = {t["name"]: t for t in service.api("GET", "/v1/tracks", "viewer")["items"] if t["kind"] == "builtin"}
    page = signed_in("viewer")
    assert page.open("/dashboard/tracks").status == 200
    for name, track in listed.items():
        row = page.page.locator("table.rows tbody tr", has=page.page.locator(f"a[href='/dashboard/tracks/{name}']"))
        text = row.inner_text()
        if track["available"]:
            assert "cannot run here" not in text, (name, text)
        else:
            assert f"cannot run here: {track['unavailable_reason']}" in text, (name, text)
    assert not listed["cifar10"]["available"] or os.environ.get("IDEABENCH_CIFAR10_DIR")  # the case shown here
    # the track's own page says so too, and the operator's page lists every such track with its reason
    missing = {name: track["unavailable_reason"] for name, track in listed.items() if not track["available"]}
    for name, why in missing.items():
        assert page.open(f"/dashboard/tracks/{name}").status == 200
        assert why in page.page.inner_text("#unavailable")
    assert page.errors == []
    operator = signed_in("operator")
    assert operator.open("/dashboard/operator").status == 200
    shown = operator.page.locator("#unavailable-tracks li").all_inner_texts() if missing else []
    assert sorted(text.split(":", 1)[0] for text in shown) == sorted(missing)
    assert all(why in " ".join(shown) for why in missing.values())
    assert operator.errors == []


def test_the_history_chart_has_a_bar_per_period_and_verdict(service: Service, signed_in: Any) -> None:
    summary = service.api("GET", "/v1/verdicts/summary", "viewer")
    cells: dict[tuple[str, str], int] = defaultdict(int)
    for row in summary["rows"]:
        for pair, n in row["counts"].items():
            cells[(row["period"], pair)] += n
    expected = sum(1 for n in cells.values() if n)
    page = signed_in("viewer")
    page.open("/dashboard")
    assert expected >= 1
    assert page.count("#history .barlayer .point") == expected
    total = sum(t["total"] for t in summary["totals"])
    assert page.page.locator("#totals tbody tr").first.locator("td").nth(-4).inner_text() == str(total)


def test_the_report_page_plots_every_paired_seed(service: Service, signed_in: Any) -> None:
    item = service.api("GET", "/v1/reports")["items"][0]
    bench = service.api("GET", f"/v1/reports/{item['report_id']}")["report"]["bench_report"]
    seeds = len(bench["screening"]["per_seed"]["idea"]) + len((bench.get("confirmation") or {}).get("seeds") or [])
    page = signed_in("operator")  # (the timeline is the submitter's and the operators')
    page.open(f"/dashboard/reports/{item['report_id']}")
    assert page.count("#paired .scatterlayer .trace .points .point") == 2 * seeds
    assert page.count("#diffs .scatterlayer .trace .points .point") == seeds
    sweep_points = len(bench["baseline"]["sweep"]) + len(bench["idea"]["sweep"]) + 2  # + the two chosen
    assert page.count("#sweep .scatterlayer .trace .points .point") == sweep_points
    assert page.count("table.seeds[data-stage=screening] tbody tr") == len(bench["screening"]["seeds"])
    assert item["report_id"] in page.page.locator("a", has_text="raw JSON").get_attribute("href")
    assert page.page.locator("#timeline tbody tr").count() >= 4  # queued, started, stages, end


def test_the_report_page_says_which_test_decided_and_how_as_a_browser_shows_it(service: Service,
                                                                              signed_in: Any) -> None:
    """Issue 27.7 in a real browser: the headline names the deciding stage and its one-sided test,
    each look of a confirmation with its pairs, and marks a confirmation's two-sided figures (its
    one-sided test decides) descriptive (the visible text, after the page's styles)."""
    item = service.api("GET", "/v1/reports")["items"][0]
    report = service.api("GET", f"/v1/reports/{item['report_id']}")["report"]
    bench = report["bench_report"]
    page = signed_in("viewer")
    page.open(f"/dashboard/reports/{item['report_id']}")
    headline = page.page.locator("#headline")
    assert page.page.locator("#decided-by").inner_text().startswith(bench["decided_by"])
    helps = headline.locator("dt", has_text="p that it helps").locator("xpath=following-sibling::dd[1]").inner_text()
    if bench.get("p_helps") is not None:
        assert "one-sided" in helps, helps
    confirmation = bench.get("confirmation")
    if confirmation is not None and confirmation.get("looks"):
        text = page.page.locator("#confirmation").inner_text()
        assert "one-sided" in text, text
        for number, look in enumerate(confirmation["looks"], start=1):
            assert f"look {number}: {look['n_pairs']} pairs" in text, text
    else:
        assert page.page.locator("#confirmation").count() == 0
    rows = page.page.locator("#stages tbody tr")
    for i in range(rows.count()):
        row = rows.nth(i)
        descriptive = "descriptive" in (row.get_attribute("class") or "")
        shown = row.locator(".tag", has_text="descriptive")
        assert shown.count() == (2 if descriptive else 0) and all(shown.nth(j).is_visible() for j in range(shown.count()))
    # the screening's two-sided test decides it; a confirmation's two-sided figures never decide
    screening = page.page.locator("#stages tbody tr[data-comparison=screening]")
    assert screening.count() == 1 and "descriptive" not in (screening.get_attribute("class") or "")
    if confirmation is not None:
        assert "descriptive" in (page.page.locator("#stages tbody tr[data-comparison=confirmation]")
                                 .get_attribute("class") or "")


def test_filters_change_the_table(service: Service, signed_in: Any) -> None:
    items = service.api("GET", "/v1/reports")["items"]
    assert len(items) >= 2
    page = signed_in("viewer")
    page.open("/dashboard/reports")
    assert page.count("tr[data-report]") == len(items)
    family = items[0]["family"]
    page.page.fill("input[name=family]", family)
    page.page.click("form.filters button[type=submit]")
    page.page.wait_for_url("**family=*")
    same = [i["report_id"] for i in items if i["family"] == family]
    shown = [r.get_attribute("data-report") for r in page.page.locator("tr[data-report]").all()]
    assert shown == same and len(same) < len(items)
    absent = next(v for v in ("worked", "partial", "failed") if all(i["system_verdict"] != v for i in items))
    page.page.fill("input[name=family]", "")
    page.page.select_option("select[name=system_verdict]", absent)
    page.page.click("form.filters button[type=submit]")
    page.page.wait_for_url(f"**system_verdict={absent}*")
    assert page.count("tr[data-report]") == 0 and "No reports match" in page.page.inner_text("table.rows")


def test_an_operator_cancels_a_running_job_from_the_page(service: Service, signed_in: Any) -> None:
    job = service.submit(SLOW_IDEA, "slow")
    service.wait_status(job, {"running"}, timeout=120)
    page = signed_in("operator")
    page.open("/dashboard/operator")
    row = page.page.locator(f"#running tr[data-job={job}]")
    assert row.count() == 1
    row.locator("button", has_text="Cancel").click()
    page.page.wait_for_url("**/dashboard/operator?cancelled=*")
    assert job in page.page.inner_text("#cancelled")
    ended = service.wait_status(job, {"cancelled", "succeeded", "errored"}, timeout=120)
    assert ended["status"] == "cancelled" and ended["error"]["code"] == "cancelled"
    page.open("/dashboard/operator")
    assert page.page.locator(f"#running tr[data-job={job}]").count() == 0


def test_a_viewer_cannot_reach_the_operator_page(service: Service, signed_in: Any) -> None:
    page = signed_in("viewer", "phone")
    page.open("/dashboard")
    assert page.page.locator("nav a", has_text="Operator").count() == 0
    answer = page.open("/dashboard/operator")
    assert answer.status == 403
    assert page.page.locator("section.problem[data-code=forbidden_role]").count() == 1
    page.shot("operator-as-viewer")
    page.page.goto(f"{service.url}/dashboard")
    page.page.click("form.signout button")
    page.page.wait_for_url("**/dashboard/login")
    assert page.open("/dashboard").url.startswith(f"{service.url}/dashboard/login")


HOSTILE = {
    "name": '<img src=x onerror="window.__xss=1;alert(1)">',
    "summary": "<script>window.__xss=2;alert(2)</script>",
    "quantity": '<a href="javascript:window.__xss=3">%{x} q</a>',
    "hparam": '<img src=x onerror="window.__xss=4">',
    "warning": "</script><script>window.__xss=5</script>",
}


def test_text_an_agent_chose_is_shown_as_text(service: Service, signed_in: Any) -> None:
    """A submission controls its name, its hyperparameters, its mechanism's name and (through
    them) parts of the summary and warnings: none of it runs as markup on any page."""
    import copy

    from tests.app.factories import insert_report, key_id

    real = service.api("GET", "/v1/reports")["items"][-1]
    body = copy.deepcopy(service.api("GET", f"/v1/reports/{real['report_id']}")["report"])
    body["summary"] = HOSTILE["summary"]
    bench = body["bench_report"]
    bench["warnings"] = [HOSTILE["warning"]]
    bench.setdefault("mechanism_signature", {})["quantity"] = HOSTILE["quantity"]
    for row in bench["idea"]["sweep"]:
        row["cfg"]["act"] = HOSTILE["hparam"] + str(row["cfg"]["lr"])  # varies: in the legend
    with service.sessions() as session:
        report = insert_report(session, key_id(service.keys["agent"]), body, name=HOSTILE["name"])
        session.commit()
    page = signed_in("operator")  # every part of the page, the per-seed ones included
    dialogs: list[str] = []
    page.page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    for path in (f"/dashboard/reports/{report.id}", "/dashboard/reports", "/dashboard/tracks/smoke", "/dashboard"):
        assert page.open(path).status == 200
        if path.startswith("/dashboard/reports/"):
            page.page.locator("#sweep .scatterlayer .point").first.hover(force=True)  # its label: the hparam
        assert page.page.evaluate("window.__xss === undefined"), path
        assert page.count("[href^='javascript'], [onerror]") == 0, path
    assert dialogs == []
    page.open(f"/dashboard/reports/{report.id}")
    assert HOSTILE["name"] in page.page.inner_text("main h1")
    assert HOSTILE["summary"] in page.page.inner_text("p.summary")
    assert HOSTILE["warning"] in page.page.inner_text("#warnings")
    assert HOSTILE["quantity"] in page.page.inner_text("#mechanism")  # the chart's title, as typed


# Passes every check before the queue; its worker finds the output one wider than the spec's.
WRONG_SHAPE = """
from torch import nn

def build_model(spec):
    return nn.Linear(spec["input_shape"][0], spec["output_shape"][0] + 1)
"""


def test_job_pages_show_an_agent_its_own_errors_and_an_operator_every_job(service: Service,
                                                                        signed_in: Any) -> None:
    from app.db import utcnow
    from tests.app.factories import insert_job, key_id

    job = service.submit(WRONG_SHAPE, "too wide")
    ended = service.wait_status(job, {"succeeded", "errored", "cancelled"}, timeout=120)
    assert ended["status"] not in ("succeeded", "cancelled") and ended["error"]["hint"], ended
    error = ended["error"]
    with service.sessions() as session:  # another key's job (ended: no worker claims it)
        other = insert_job(session, key_id(service.keys["operator"]), status=ended["status"], name="not yours",
                           finished_at=utcnow(), error_code="timeout", error_message="ran past 1800 s",
                           error_hint="make it faster").id
        session.commit()

    agent = signed_in("agent", "phone")
    agent.page.click("nav a:text-is('Jobs')")
    agent.page.wait_for_url("**/dashboard/jobs")
    row = agent.page.locator(f"#jobs tr[data-job={job}]")
    assert row.locator("code.error-code").inner_text() == error["code"]
    assert agent.count(f"#jobs tr[data-job={other}]") == 0
    row.locator("a").first.click()
    agent.page.wait_for_url(f"**/dashboard/jobs/{job}")
    assert agent.page.locator("#job-error").get_attribute("data-code") == error["code"]
    assert agent.page.inner_text("#job-error .message") == error["message"]
    assert error["hint"] in agent.page.inner_text("#job-error .hint")
    assert agent.count("#timeline tbody tr") >= 3  # queued, started, ..., ended
    assert agent.count("#cancel") == 0
    assert agent.page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    agent.shot("job-failed")
    assert agent.errors == []
    answer = agent.open(f"/dashboard/jobs/{other}")
    assert answer.status == 404 and agent.count("section.problem[data-code=job_not_found]") == 1
    assert "not yours" not in agent.page.inner_text("main")

    operator = signed_in("operator")
    operator.open("/dashboard/jobs")
    every = [j["job_id"] for j in service.api("GET", "/v1/jobs?limit=200")["items"]]
    assert [r.get_attribute("data-job") for r in operator.page.locator("#jobs tbody tr[data-job]").all()] == every
    assert {job, other} <= set(every) and len(every) > len(service.api("GET", "/v1/jobs?limit=200", "agent")["items"])
    operator.page.select_option("select[name=status]", ended["status"])
    operator.page.click("form.filters button[type=submit]")
    operator.page.wait_for_url(f"**status={ended['status']}*")
    statuses = {r.get_attribute("data-status") for r in operator.page.locator("#jobs tbody tr[data-job]").all()}
    assert statuses == {ended["status"]}
    assert operator.open(f"/dashboard/jobs/{other}").status == 200
    assert operator.page.locator("#job-error").get_attribute("data-code") == "timeout"
    assert operator.errors == []
