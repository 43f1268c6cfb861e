"""Issue 28.10: the workers' statements through PgBouncer in transaction pooling.

``benchmarks/connection_budget.py`` is the measurement (100 simulated workers, directly and
through PgBouncer); this runs its machinery small, against the real Postgres, Redis and
PgBouncer, and asserts what a deployment behind PgBouncer relies on: every step of a worker's
loops (dispatch, beat, reconcile, check poll, claim, heartbeat, progress, end, webhook poll)
works when each transaction may get another server connection, and the server connections stay
within the pool however many clients there are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import connection_budget
from tests.conftest import CI


def test_worker_loops_through_pgbouncer_share_its_pool_and_fail_nothing(redis_url: str, tmp_path: Path) -> None:
    if connection_budget.pgbouncer_binary() is None:
        message = "pgbouncer is not installed (scripts/system_deps.sh installs it)"
        if CI:
            pytest.fail(message)
        pytest.skip(message)
    out = tmp_path / "budget.json"
    assert connection_budget.main([
        "--workers", "12", "--processes", "1", "--api-processes", "1", "--seconds", "8", "--job-s", "2.5",
        "--jobs-per-s", "2", "--pool-size", "3", "--modes", "pgbouncer", "--redis-url", redis_url,
        "--json", str(out),
    ]) == 0
    [row] = json.loads(out.read_text())
    assert row["processes_reported"] == "1/1"
    assert row["errors"] == {}, row["first_error"]
    assert row["jobs_ended"] >= 3  # claimed off the broker, beaten, ended: through the pool
    for step in ("dispatch", "beat", "reconcile", "check_poll", "claim", "heartbeat", "finish", "webhook_poll"):
        assert row["steps_ms"][step]["n"] >= 1, step
    # 12 workers' engines (and a poller's) held more clients than the pool has servers; the
    # feeder's one direct connection is the only other.
    assert row["server_connections_max"] <= 3 + 1
    assert row["client_connections_max"] > 3
