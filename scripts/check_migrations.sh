#!/usr/bin/env bash
# Models and migrations never drift: on a fresh SQLite file and on a fresh
# Postgres database, run `alembic upgrade head` and `alembic check`, then a full
# downgrade and upgrade again (Alembic's command API, one process, for speed).
# Postgres: IDEABENCH_TEST_POSTGRES_URL (default
# postgresql://postgres@127.0.0.1:5432/postgres) is used only to create and drop
# a scratch database. With CI=true a missing Postgres is a failure; otherwise it
# is skipped with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" - <<'PYEOF'
import os
import sys
import tempfile
import uuid

import psycopg2
from alembic import command

from app.migrate import alembic_config

admin_url = os.environ.get("IDEABENCH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
ci = os.environ.get("CI") == "true"


def check(label: str, url: str) -> None:
    print(f"check_migrations: {label}: upgrade head, check, downgrade base, upgrade head", flush=True)
    config = alembic_config(url)
    command.upgrade(config, "head")
    command.check(config)  # raises when models and migrations differ
    command.downgrade(config, "base")
    command.upgrade(config, "head")


with tempfile.TemporaryDirectory() as tmp:
    check("sqlite", f"sqlite:///{tmp}/check.db")

try:
    admin = psycopg2.connect(admin_url, connect_timeout=3)
except psycopg2.OperationalError as exc:
    reason = f"postgres unreachable at {admin_url}: {' '.join(str(exc).split())}"
    if ci:
        sys.exit(f"check_migrations: FAIL: {reason} (required when CI=true)")
    print(f"check_migrations: SKIP postgres: {reason}; start it or set IDEABENCH_TEST_POSTGRES_URL")
    sys.exit(0)
admin.autocommit = True
name = f"ideabench_migcheck_{uuid.uuid4().hex[:8]}"
with admin.cursor() as cur:
    cur.execute(f'CREATE DATABASE "{name}"')
try:
    check("postgres", admin_url.rsplit("/", 1)[0] + "/" + name)
finally:
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()
print("check_migrations: ok")
PYEOF
