"""Shared fixtures: the API on a fresh SQLite file per test, real Postgres and Redis.

Postgres and Redis tests skip with a message saying how to enable them, unless
``CI=true``, where an unreachable server is a failure (the README's promise).
URLs: ``IDEABENCH_TEST_POSTGRES_URL`` (an admin URL used to create a scratch
database; default postgresql://postgres@127.0.0.1:5432/postgres) and
``IDEABENCH_TEST_REDIS_URL`` (default redis://127.0.0.1:6379/15; xdist worker gwN takes the
database N below it). Each xdist worker makes its own Postgres database.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from bench import options as engine_options
from bench.options import HostOptions

CI = os.environ.get("CI") == "true"
# In-process judging (bench.judge) uses a fixed seed secret, so tests never write a secret
# file into the checkout: the engine is handed it (bench.options.configure, as a host does);
# worker processes started by tests read it from their environment (Settings.seed_secret).
os.environ.setdefault("IDEABENCH_SEED_SECRET", "00" * 16 + "7e57" * 8)
# A worker judging in a test's own process (WorkerContext) starts no children for a next job no
# test gives it (issue 26.9); worker processes say their own (start_worker's ``warm``).
os.environ.setdefault("IDEABENCH_WARM_CHILDREN", "false")
HOST_OPTIONS = HostOptions(seed_secret=os.environ["IDEABENCH_SEED_SECRET"])
engine_options.configure(HOST_OPTIONS)


@pytest.fixture(autouse=True)
def _engine_options() -> Iterator[None]:
    """Every test starts with the suite's engine options and the strict sandbox policy, whatever
    the test before it configured."""
    engine_options.configure(HOST_OPTIONS)
    yield
    engine_options.configure(HOST_OPTIONS)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread, as in the sandboxed children (tiny ops on many threads are slow here,
    and two threads' barriers oversubscribe these two cores)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def fresh_children() -> None:
    """Every child of this test starts in a sandbox of its own (no fork server): for a test of a
    parent's defence that a forked child's Landlock refuses before it (a FIFO it cannot make)."""
    host = engine_options.current()
    engine_options.configure(dataclasses.replace(host, sandbox=dataclasses.replace(host.sandbox, fork_server=False)))


@pytest.fixture(scope="module")
def jobs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for a module's jobs' directories (``tempfile.tempdir`` pointed at it): the
    process's fork server, made where the jobs' directories lie (``bench.warm``), serves the
    module's jobs, where a directory per test would start one per test."""
    return tmp_path_factory.mktemp("jobs")


def use_cache(cache_dir: Path) -> None:
    """Jobs without options of their own cache under ``cache_dir`` (this test only)."""
    host = engine_options.current()
    engine_options.configure(dataclasses.replace(host, engine=dataclasses.replace(host.engine, cache_dir=cache_dir)))

def count_launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The working-directory names of the sandboxed children this test's jobs launch from now on
    (not those a warm slot starts in its own thread for a next job)."""
    import threading

    from bench import sandbox

    started: list[str] = []
    launch = sandbox.launch

    def counted(workdir: Path, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name != "ideabench-warm":
            started.append(workdir.name)
        return launch(workdir, *args, **kwargs)

    monkeypatch.setattr(sandbox, "launch", counted)
    return started


POSTGRES_ADMIN_URL = os.environ.get(
    "IDEABENCH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _per_worker(url: str) -> str:
    """Under pytest-xdist, worker gwN uses Redis database 15 - N (tests flush their database)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    base, _, db = url.rpartition("/")
    if not worker.startswith("gw") or not db.isdigit():
        return url
    return f"{base}/{int(db) - int(worker[2:])}"


REDIS_URL = _per_worker(os.environ.get("IDEABENCH_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))


def service_missing(what: str, detail: str, how: str) -> NoReturn:
    """Skip (or, with CI=true, fail) a test whose server is not reachable."""
    message = f"{what} not reachable ({' '.join(detail.split())}); {how}"
    if CI:
        pytest.fail(f"{message} -- required when CI=true", pytrace=False)
    pytest.skip(message)


class RecordingQueue:
    """A JobQueue stand-in that records what the API enqueued."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.tracks_sent: list[tuple[str, str]] = []
        self.reachable = True

    def enqueue(self, job_id: str, queue: str) -> bool:
        self.sent.append((job_id, queue))
        return True

    def enqueue_track(self, track_id: str, queue: str) -> bool:
        self.tracks_sent.append((track_id, queue))
        return True

    def ping(self) -> bool:
        return self.reachable

    def depth(self, queue: str) -> int | None:
        """A stand-in broker does not say (the reconciler then re-sends every stale job)."""
        return None

    def close(self) -> None:
        pass


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> Any:
    """Settings on a fresh SQLite database (and SQLite broker) under ``tmp_path``."""
    from app.settings import Settings

    return Settings(data_dir=tmp_path / "var")


def _build_app(settings: Any, create_tables: bool) -> Any:
    from app.main import create_app
    from app.models import metadata

    app = create_app(settings)
    if create_tables:
        metadata.create_all(app.state.engine)
    app.state.queue = RecordingQueue()
    return app


@pytest.fixture
def app(sqlite_settings: Any) -> Iterator[Any]:
    """The API on a fresh per-test SQLite database, with a recording queue."""
    application = _build_app(sqlite_settings, create_tables=True)
    yield application
    application.state.engine.dispose()


@pytest.fixture
def client(app: Any) -> Iterator[Any]:
    """A TestClient of ``app`` (server errors become 500 answers, as in production)."""
    from fastapi.testclient import TestClient

    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def keys(app: Any) -> dict[str, str]:
    """Tokens by role: agent, agent2, operator, viewer."""
    from app.keys.service import create_key

    tokens = {}
    with app.state.sessionmaker() as session:
        for label, role in (("agent", "agent"), ("agent2", "agent"), ("operator", "operator"),
                            ("viewer", "viewer")):
            tokens[label] = create_key(session, role, label).token
        session.commit()
    return tokens


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of ``token``."""
    return {"Authorization": f"Bearer {token}"}


# --- A real HTTP server ---------------------------------------------------


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` under uvicorn on a free loopback port, in a thread; yields its base URL."""
    import socket
    import threading
    import time

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start within 30 s"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def json_log_lines(logger_name: str) -> Iterator[list[dict[str, Any]]]:
    """The lines ``logger_name`` writes meanwhile, through the service's JSON handler (parsed
    into the list once the block ends)."""
    import io
    import json
    import logging

    from app.logs import handler

    out = io.StringIO()
    line = handler("json")
    line.stream = out  # type: ignore[attr-defined]
    logger = logging.getLogger(logger_name)
    logger.addHandler(line)
    logger.setLevel(logging.INFO)
    lines: list[dict[str, Any]] = []
    try:
        yield lines
    finally:
        logger.removeHandler(line)
        lines.extend(json.loads(text) for text in out.getvalue().splitlines())


# --- Postgres ---------------------------------------------------------------


@contextlib.contextmanager
def scratch_postgres() -> Iterator[str]:
    """The URL of a new, empty Postgres database, dropped afterwards."""
    try:
        import psycopg2
    except ImportError as exc:  # pragma: no cover
        service_missing("Postgres", str(exc), "pip install psycopg2-binary")
    try:
        admin = psycopg2.connect(POSTGRES_ADMIN_URL, connect_timeout=3)
    except psycopg2.OperationalError as exc:
        service_missing(
            "Postgres", f"{POSTGRES_ADMIN_URL}: {str(exc).strip()}",
            "start PostgreSQL or set IDEABENCH_TEST_POSTGRES_URL to an admin URL",
        )
    admin.autocommit = True
    name = f"ideabench_test_{uuid.uuid4().hex[:10]}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, migrated Postgres database for this test session (dropped after)."""
    from app.migrate import upgrade_head
    from app.settings import Settings

    with scratch_postgres() as url:
        upgrade_head(Settings(database_url=url, broker_url="memory://"))
        yield url


def truncate_all(database_url: str) -> None:
    """Empty every table (per-test cleanup on the shared session database)."""
    from sqlalchemy import text

    from app.db import make_engine
    from app.models import metadata

    engine = make_engine(database_url)
    names = ", ".join(t.name for t in metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {names} CASCADE"))
    engine.dispose()


@pytest.fixture
def pg_settings(postgres_url: str, tmp_path: Path) -> Iterator[Any]:
    """Settings on the session's Postgres database, emptied before and after the test."""
    from app.settings import Settings

    truncate_all(postgres_url)
    yield Settings(data_dir=tmp_path / "var", database_url=postgres_url)
    truncate_all(postgres_url)


@pytest.fixture
def pg_app(pg_settings: Any) -> Iterator[Any]:
    """The API on Postgres, with a recording queue."""
    application = _build_app(pg_settings, create_tables=False)
    yield application
    application.state.engine.dispose()


# --- Redis ------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server() -> str:
    """A reachable Redis URL (a database reserved for tests)."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        service_missing("Redis", f"{REDIS_URL}: {exc}", "start redis-server or set IDEABENCH_TEST_REDIS_URL")
    return REDIS_URL


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The test Redis database, flushed before and after the test."""
    import redis

    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    yield redis_server
    client.flushdb()
    client.close()

