"""The embedded service on a real port (uvicorn) with a real worker, for the client faces."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from app.keys.service import create_key
from app.main import create_app
from app.migrate import upgrade_head
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
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    worker = start_worker(settings, tmp, IDEABENCH_WEBHOOK_ALLOW_PRIVATE="true")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: server.started, 30, "uvicorn to start")
        wait_for(lambda: httpx.get(f"{url}/readyz").status_code == 200, 90, "a ready service", tmp / "worker.log")
        yield url, key, tmp / "worker.log"
    finally:
        stop_worker(worker)
        server.should_exit = True
        thread.join(10)


