"""A real browser on the embedded service with a real worker: headless Chromium (Debian's
``chromium``, or ``IDEABENCH_CHROMIUM``) driven by Playwright. Screenshots go to
``artifacts/screenshots/`` (README, Tests)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.keys.service import create_key
from app.main import create_app
from app.migrate import upgrade_head
from bench.catalog import get_card
from tests.conftest import bearer, served, service_missing
from tests.workers.test_end_to_end import ROOT, start_worker, stop_worker, wait_for

SCREENSHOTS = ROOT / "artifacts" / "screenshots"
EXAMPLE = get_card("smoke")["example_idea"]
# A second family: another activation (an unused line, or another width, would be the same
# family: the family is the captured graph's, issue 25.6).
WIDER = EXAMPLE.replace("nn.SiLU()", "nn.GELU()", 1)


@dataclass(frozen=True)
class Service:
    url: str
    keys: dict[str, str]
    log: Path
    sessions: Any  # the app's sessionmaker (to stage rows a worker would not write)

    def api(self, method: str, path: str, role: str = "operator", **kwargs: Any) -> Any:
        answer = httpx.request(method, self.url + path, headers=bearer(self.keys[role]), timeout=30, **kwargs)
        answer.raise_for_status()
        return answer.json()

    def submit(self, code: str, name: str) -> str:
        body = {"track": "smoke", "code": code, "name": name}
        job: str = self.api("POST", "/v1/ideas", "agent", json=body)["job_id"]
        return job

    def wait_status(self, job_id: str, statuses: set[str], timeout: float = 240) -> dict[str, Any]:
        found: dict[str, Any] = wait_for(
            lambda: (j := self.api("GET", f"/v1/jobs/{job_id}"))["status"] in statuses and j,
            timeout, f"job {job_id} in {statuses}", self.log)
        return found


def chromium_path() -> str:
    path = os.environ.get("IDEABENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        service_missing("Chromium", "no chromium binary on PATH", "install Debian's chromium "
                        "(scripts/system_deps.sh) or set IDEABENCH_CHROMIUM")
    return path


@pytest.fixture(scope="package")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The embedded service on a free port with a worker, and two reports it judged."""
    from app.settings import Settings

    tmp = tmp_path_factory.mktemp("dashboard")
    settings = Settings(data_dir=tmp / "var")
    upgrade_head(settings)
    app = create_app(settings)
    with app.state.sessionmaker() as session:
        keys = {role: create_key(session, role, f"browser-{role}").token for role in ("agent", "operator", "viewer")}
        session.commit()
    with served(app) as url:
        worker = start_worker(settings, tmp)
        try:
            found = Service(url, keys, tmp / "worker.log", app.state.sessionmaker)
            wait_for(lambda: httpx.get(f"{url}/readyz/judging").status_code == 200, 90, "a ready service", found.log)
            jobs = [found.submit(EXAMPLE, "example"), found.submit(WIDER, "wider")]
            for job in jobs:
                assert found.wait_status(job, {"succeeded", "errored"})["status"] == "succeeded"
            yield found
        finally:
            stop_worker(worker)


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        service_missing("Playwright", "the playwright package is not installed", "make install")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable,
                                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield launched
        launched.close()
