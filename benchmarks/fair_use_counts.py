"""The fair-use counts against a key's history (docs/reliability.md, session 10). A benchmark,
not a timed test.

    .venv/bin/python benchmarks/fair_use_counts.py                # 100,000 jobs of one key
    .venv/bin/python benchmarks/fair_use_counts.py --history 20000

On a scratch Postgres database it gives one key ``--history`` jobs (8 of them in flight, a few
hundred made today, the rest ended earlier), then times the counts that every submission of that
key takes while the key is locked: the service's (``app.fair_use._COUNTS``: two counts, each
on its own index) against the one ``count(*) FILTER`` over all of the key's jobs that it
replaced (kept here as the reference). Prints both, their ratio, and the rows each reads
(``EXPLAIN ANALYZE``), as JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import fair_use  # noqa: E402
from app.db import make_engine  # noqa: E402
from app.jobs.models import Job, JobStatus  # noqa: E402
from app.migrate import upgrade_head  # noqa: E402
from app.settings import Settings  # noqa: E402
from benchmarks.api_speed import new_key, scratch_postgres  # noqa: E402

# The query of session 9: one pass over every job of the key.
ONE_PASS = select(
    func.count().filter(Job.status.in_([JobStatus.QUEUED.value, JobStatus.RUNNING.value])),
    func.count().filter(Job.created_at >= bindparam("midnight")),
).where(Job.submitter_id == bindparam("key"))


def _ms_per_count(conn: Connection, statement: Any, params: dict[str, Any], n: int) -> tuple[float, tuple[int, ...]]:
    counts = tuple(conn.execute(statement, params).one())  # (warm: plan cached, pages in memory)
    start = time.perf_counter()
    for _ in range(n):
        conn.execute(statement, params).one()
    return 1000 * (time.perf_counter() - start) / n, counts


def _rows_read(conn: Connection, statement: Any, params: dict[str, Any]) -> int:
    compiled = statement.compile(conn)
    sql = compiled.string.replace("__[POSTCOMPILE_status_1]", "'queued', 'running'")
    plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, {**compiled.params, **params}).scalar_one()

    def walk(node: dict[str, Any]) -> int:
        own = node["Actual Rows"] * node["Actual Loops"] + node.get("Rows Removed by Filter", 0) \
            if "Scan" in node["Node Type"] else 0
        return own + sum(walk(child) for child in node.get("Plans", []))

    return int(walk(plan[0]["Plan"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=100_000, help="jobs of the key")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--pg-admin-url", default=os.environ.get("IDEABENCH_TEST_POSTGRES_URL",
                                                                 "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = parser.parse_args()
    with scratch_postgres(args.pg_admin_url) as url, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "var", database_url=url)
        upgrade_head(settings)
        new_key(settings, "agent")
        engine = make_engine(url)
        now = dt.datetime.now(dt.UTC)
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        with engine.begin() as conn:
            key = conn.execute(text("SELECT id FROM api_keys")).scalar_one()
            for first in range(0, args.history, 10_000):
                conn.execute(insert(Job), [
                    dict(id=f"job_{i}", status=JobStatus.QUEUED.value if i < 8 else JobStatus.SUCCEEDED.value,
                         queue="cpu", track="smoke", idea_code="x", submitter_id=key, request_sha256="0" * 64,
                         runs_done=0, attempts=0, cancel_requested=False, callback_attempts=0,
                         created_at=now - dt.timedelta(minutes=i), enqueued_at=now)
                    for i in range(first, min(first + 10_000, args.history))])
            conn.execute(text("ANALYZE jobs"))
        params = {"key": key, "midnight": midnight}
        with engine.connect() as conn:
            service_ms, counts = _ms_per_count(conn, fair_use._COUNTS, params, args.repeat)
            one_pass_ms, reference = _ms_per_count(conn, ONE_PASS, params, args.repeat)
            assert counts == reference, (counts, reference)
            result = {
                "history": args.history, "in_flight_and_today": counts,
                "service_ms": round(service_ms, 3), "one_pass_ms": round(one_pass_ms, 3),
                "one_pass_over_service": round(one_pass_ms / service_ms, 1),
                "rows_read": {"service": _rows_read(conn, fair_use._COUNTS, params),
                              "one_pass": _rows_read(conn, ONE_PASS, params)},
            }
        engine.dispose()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
