"""The embedded service on a real port (uvicorn) with a real worker, for the client faces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.keys.service import create_key
from app.main import create_app
from app.migrate import upgrade_head
from tests.conftest import served
from tests.workers.test_end_to_end import start_worker, stop_worker, wait_for


@pytest.fixture(scope="package")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(url, agent key, worker log) of the embedded service on a free port, with a worker."""
    from app.settings import Settings

    tmp = tmp_path_factory.mktemp("service")
    settings = Settings(data_dir=tmp / "var", webhook_allow_private=True)  # webhooks to a loopback receiver
    upgrade_head(settings)
    app = create_app(settings)
    with app.state.sessionmaker() as session:
        key = create_key(session, "agent", "client-test").token
        session.commit()
    with served(app) as url:
        worker = start_worker(settings, tmp, IDEABENCH_WEBHOOK_ALLOW_PRIVATE="true")
        try:
            wait_for(lambda: httpx.get(f"{url}/readyz").status_code == 200, 90, "a ready service", tmp / "worker.log")
            yield url, key, tmp / "worker.log"
        finally:
            stop_worker(worker)
