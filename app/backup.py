"""Backups of the service's database, and restores that check what they restored.

A backup is a directory holding the database (``database.sqlite``: SQLite's online backup
API, a consistent copy taken while the service runs; or ``database.pgdump``: ``pg_dump``'s
custom format, taken on an exported snapshot) and ``manifest.json``: the schema revision, the
time, and the row count of every table, counted on the very snapshot that was dumped. A restore
loads it into the configured database, refuses a target that already holds tables unless
forced, and checks every count against the manifest. ``ideabench migrate`` then brings an
older backup's schema forward.

Not in it: the seed secret (``DATA_DIR/seed_secret.json``, or ``IDEABENCH_SEED_SECRET``). It
is the one thing that must stay secret from agents, so it is backed up apart, by whoever keeps
the deployment's secrets (docs/reliability.md). API tokens are stored only as hashes, so a
backup holds no usable key.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, make_url

from app.db import make_engine, utcnow
from app.settings import Settings

MANIFEST = "manifest.json"
SQLITE_FILE = "database.sqlite"
PG_FILE = "database.pgdump"


class BackupError(RuntimeError):
    """A backup or restore that could not be done (the message says why)."""


@dataclass(frozen=True)
class Manifest:
    """What a backup holds."""

    kind: str  # sqlite | postgres
    revision: str | None
    created_at: str
    counts: dict[str, int]

    def to_json(self) -> str:
        return json.dumps({"format": 1, "kind": self.kind, "revision": self.revision,
                           "created_at": self.created_at, "counts": self.counts}, indent=2, sort_keys=True)

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        try:
            data = json.loads((folder / MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            raise BackupError(f"{folder} holds no readable {MANIFEST}: {exc}") from None
        return cls(kind=data["kind"], revision=data.get("revision"), created_at=data["created_at"],
                   counts={k: int(v) for k, v in data["counts"].items()})


def _counts(conn: Connection) -> tuple[str | None, dict[str, int]]:
    tables = sorted(inspect(conn).get_table_names())
    counts = {t: int(conn.execute(text(f'SELECT COUNT(*) FROM "{t}"')).scalar_one()) for t in tables}
    revision = None
    if "alembic_version" in tables:
        revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return revision, counts


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """A libpq URL without the password, and the environment that carries it."""
    parsed = make_url(url)
    env = dict(os.environ)
    if parsed.password:
        env["PGPASSWORD"] = str(parsed.password)
    plain = parsed.set(drivername="postgresql", password=None)
    return plain.render_as_string(hide_password=False), env


def _run(args: list[str], env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=3600)
    except FileNotFoundError:
        raise BackupError(f"{args[0]} is not installed (Debian: postgresql-client)") from None
    if done.returncode != 0:
        raise BackupError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def _sqlite_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise BackupError("an in-memory SQLite database has nothing to back up")
    return Path(database)


def backup(settings: Settings, dest: Path) -> Manifest:
    """Write a backup of the configured database into the new directory ``dest``."""
    if dest.exists() and any(dest.iterdir()):
        raise BackupError(f"{dest} exists and is not empty; give a new directory")
    dest.mkdir(parents=True, exist_ok=True)
    url = settings.database_url
    if url.startswith("sqlite"):
        source = sqlite3.connect(_sqlite_path(url))
        target = sqlite3.connect(dest / SQLITE_FILE)
        try:
            source.backup(target)  # a consistent copy, while the service writes
        finally:
            source.close()
            target.close()
        engine = make_engine(f"sqlite:///{dest / SQLITE_FILE}")
        with engine.connect() as conn:
            revision, counts = _counts(conn)
        engine.dispose()
        manifest = Manifest("sqlite", revision, utcnow().isoformat(), counts)
    elif make_url(url).get_backend_name() == "postgresql":
        engine = make_engine(url, isolation_level="REPEATABLE READ")
        with engine.connect() as conn:  # count and dump one snapshot
            snapshot = conn.execute(text("SELECT pg_export_snapshot()")).scalar_one()
            revision, counts = _counts(conn)
            libpq, env = _libpq(url)
            _run(["pg_dump", "--format=custom", f"--snapshot={snapshot}", "--no-owner", "--no-privileges",
                  f"--file={dest / PG_FILE}", libpq], env)
            conn.rollback()
        engine.dispose()
        manifest = Manifest("postgres", revision, utcnow().isoformat(), counts)
    else:
        raise BackupError(f"no backup for {make_url(url).get_backend_name()} databases")
    (dest / MANIFEST).write_text(manifest.to_json() + "\n")
    return manifest


def _target_tables(url: str) -> list[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return list(inspect(conn).get_table_names())
    finally:
        engine.dispose()


def restore(settings: Settings, source: Path, *, force: bool = False) -> Manifest:
    """Load the backup in ``source`` into the configured database and check every table's count.
    Stop the service first; ``force`` replaces a database that already holds tables."""
    manifest = Manifest.read(source)
    url = settings.database_url
    existing = _target_tables(url) if not url.startswith("sqlite") or _sqlite_path(url).exists() else []
    if existing and not force:
        raise BackupError(f"the target database already holds {len(existing)} tables; pass --force to replace it")
    if manifest.kind == "sqlite":
        if not url.startswith("sqlite"):
            raise BackupError("this backup is of an SQLite database; restore it into one (or load it with a "
                              "migration tool of your choice)")
        path = _sqlite_path(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".restoring", delete=False) as tmp:
            staging = Path(tmp.name)
        source_db = sqlite3.connect(source / SQLITE_FILE)
        target = sqlite3.connect(staging)
        try:
            source_db.backup(target)
        finally:
            source_db.close()
            target.close()
        for stale in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
        staging.replace(path)  # atomic: the old file, or the whole restored one
    else:
        if make_url(url).get_backend_name() != "postgresql":
            raise BackupError("this backup is of a Postgres database; restore it into one")
        libpq, env = _libpq(url)
        args = ["pg_restore", "--no-owner", "--no-privileges", "--single-transaction", "--exit-on-error",
                f"--dbname={libpq}"]
        if existing:
            args += ["--clean", "--if-exists"]
        _run([*args, str(source / PG_FILE)], env)
    engine = make_engine(url)
    with engine.begin() as conn:
        revision, counts = _counts(conn)
        if "report_streams" in counts:  # an API process that kept a track by its old stream must rebuild it
            conn.execute(text("UPDATE report_streams SET base = :base"), {"base": secrets.token_hex(16)})
    engine.dispose()
    wrong = {t: (n, counts.get(t)) for t, n in manifest.counts.items() if counts.get(t) != n}
    if wrong or revision != manifest.revision:
        raise BackupError(f"the restored database differs from the backup: {wrong or ''} "
                          f"revision {revision} vs {manifest.revision}")
    return manifest


def describe(manifest: Manifest) -> dict[str, Any]:
    """The manifest as the CLI prints it."""
    return json.loads(manifest.to_json())
