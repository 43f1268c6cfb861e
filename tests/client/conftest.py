"""The embedded service on a real port (uvicorn) with a real worker, for the client faces.

Its event streams are as they are in production, only faster: a keep-alive comment every
``PING_S`` (FastAPI's is 15 s) and a stream closed after ``STREAM_MAX_S`` (300 s), so every job
a test waits on outlasts both, and each face meets the pings and the reconnects of a real job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fastapi.routing
import httpx
import pytest

from app.keys.service import create_key
from app.main import create_app
from app.migrate import upgrade_head
from tests.conftest import served
from tests.workers.test_end_to_end import start_worker, stop_worker, wait_for

PING_S = 0.2
STREAM_MAX_S = 2.0


def slow_to_build(idea: str) -> str:
    """``idea`` a little slow to build (0.4 s a model, ten in the capture): a job that outlasts
    the stream's keep-alive and life however warm the worker is (a warm one judged smoke's
    example in 1.6 s, and a wait on it failed the rotation's test, helper-64)."""
    return "import time\n" + idea.replace("def build_model(spec):\n", "def build_model(spec):\n    time.sleep(0.4)\n", 1)


@pytest.fixture(scope="package")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(url, agent key, worker log) of the embedded service on a free port, with a worker."""
    from app.settings import Settings

    tmp = tmp_path_factory.mktemp("service")
    settings = Settings(data_dir=tmp / "var", webhook_allow_private=True,  # webhooks to a loopback receiver
                        stream_max_s=STREAM_MAX_S)
    patch = pytest.MonkeyPatch()
    patch.setattr(fastapi.routing, "_PING_INTERVAL", PING_S)  # the server's keep-alive interval
    upgrade_head(settings)
    app = create_app(settings)
    with app.state.sessionmaker() as session:
        key = create_key(session, "agent", "client-test").token
        session.commit()
    with served(app) as url:
        worker = start_worker(settings, tmp, IDEABENCH_WEBHOOK_ALLOW_PRIVATE="true")
        try:
            wait_for(lambda: httpx.get(f"{url}/readyz/judging").status_code == 200, 90, "a ready service", tmp / "worker.log")
            yield url, key, tmp / "worker.log"
        finally:
            stop_worker(worker)
            patch.undo()
