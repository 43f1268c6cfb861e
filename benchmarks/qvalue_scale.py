"""Listings that stay fast (issue 28.9): the latency of a report listing, a report page and the
verdict summary (each carries q-values or discovery counts) over many judged reports, with the
q-values kept between reads (``app.reports.discoveries``) against the whole procedure redone on
every read (``qvalues_from_scratch``, what every read did before). A benchmark, not a timed test.

    .venv/bin/python benchmarks/qvalue_scale.py                      # 200,000 reports
    .venv/bin/python benchmarks/qvalue_scale.py --reports 1000000    # the issue's million

It creates (and drops) a scratch Postgres database, fills it with succeeded jobs and their
reports (70 % on one track, every report with a p_helps, 40 agents re-rolling 3,000 idea
families, two seed epochs), and reads through the API in this process (FastAPI's test client:
the whole HTTP stack of the app, no network). Latencies are sequential, after warm-up reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from app.db import make_engine  # noqa: E402
from app.jobs.models import Job  # noqa: E402
from app.keys.models import ApiKey  # noqa: E402
from app.keys.service import create_key, hash_token  # noqa: E402
from app.main import create_app  # noqa: E402
from app.migrate import upgrade_head  # noqa: E402
from app.reports import discoveries  # noqa: E402
from app.reports.models import Report, next_stream_seq  # noqa: E402
from app.settings import Settings  # noqa: E402
from benchmarks.api_speed import percentile, scratch_postgres  # noqa: E402

TRACKS = ["smoke"] * 7 + ["tabular", "sequence", "dynamics"]


def fill(database_url: str, n_reports: int, seed: int = 28) -> None:
    """``n_reports`` judged reports with p_helps, families and streams (Core inserts; the
    stream tokens set at the end, as the ORM's events would have)."""
    rng = random.Random(seed)
    engine = make_engine(database_url)
    keys = [{"id": f"key_{i:08x}", "name": f"agent {i}", "role": "agent", "token_sha256": hash_token(str(i)),
             "created_at": datetime.now(UTC)} for i in range(40)]
    start = datetime.now(UTC) - timedelta(days=90)
    with engine.begin() as conn:
        conn.execute(insert(ApiKey), keys)
    for offset in range(0, n_reports, 10_000):
        jobs, reports = [], []
        for i in range(offset, min(n_reports, offset + 10_000)):
            track, worked = rng.choice(TRACKS), rng.random() < 0.1
            created = start + timedelta(seconds=rng.uniform(0, 90 * 86400))
            job_id, rep_id = f"job_{i:020x}", f"rep_{i:020x}"
            submitter, family = keys[rng.randrange(40)]["id"], f"ast-v1:{rng.randrange(3000):016x}"
            p = rng.choice([0.00390625, 0.0078125, 0.03]) if worked else rng.random()
            jobs.append({"id": job_id, "status": "succeeded", "queue": "cpu", "track": track, "idea_code": "x",
                         "submitter_id": submitter, "request_sha256": "0" * 64, "runs_done": 40, "attempts": 1,
                         "cancel_requested": False, "created_at": created, "report_id": rep_id, "family": family})
            reports.append({"id": rep_id, "job_id": job_id, "track": track, "submitter_id": submitter,
                            "system_verdict": "worked" if worked else "failed",
                            "practical_verdict": "helps" if worked else "inconclusive", "worked": worked,
                            "p_value": p, "p_helps": p, "delta_mean": -0.01, "family": family,
                            "baseline": "canonical", "track_version": 1, "seed_epoch": 1 + (i % 5 == 0),
                            "created_at": created, "body": {"system_verdict": "x"}})
        with engine.begin() as conn:
            conn.execute(insert(Job), jobs)
            conn.execute(insert(Report), reports)
    with engine.begin() as conn:
        for track in set(TRACKS):
            next_stream_seq(conn, track, rebase=True)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
    engine.dispose()


def timed(call: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        answer = call()
        out.append((time.perf_counter() - t) * 1000)
        assert answer.status_code == 200, answer.text
    return out


def store_one(app: Any, i: int) -> None:
    """One more judged report on smoke, stored through the ORM (a new stream token)."""
    with app.state.sessionmaker() as session:
        job = Job(id=f"job_new{i:016x}", status="succeeded", queue="cpu", track="smoke", idea_code="x",
                  submitter_id="key_00000000", request_sha256="0" * 64, runs_done=40, attempts=1,
                  cancel_requested=False, created_at=datetime.now(UTC), family="ast-v1:new")
        session.add(job)
        session.flush()
        session.add(Report(id=f"rep_new{i:016x}", job_id=job.id, track="smoke", submitter_id="key_00000000",
                           system_verdict="failed", practical_verdict="inconclusive", worked=False, p_helps=0.5,
                           family="ast-v1:new", baseline="canonical", track_version=1, seed_epoch=1,
                           created_at=datetime.now(UTC), body={}))
        session.commit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=int, default=200_000)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    with scratch_postgres(args.pg_admin_url) as url:
        settings = Settings(database_url=url, broker_url="memory://", data_dir=Path("/tmp/ideabench-qvalue-scale"))
        upgrade_head(settings)
        t = time.perf_counter()
        fill(url, args.reports)
        fill_s = time.perf_counter() - t
        app = create_app(settings)
        with app.state.sessionmaker() as session:
            token = create_key(session, "viewer", "bench").token
            session.commit()
        headers = {"Authorization": f"Bearer {token}"}
        results: dict[str, Any] = {"reports": args.reports, "fill_s": round(fill_s, 1)}
        with TestClient(app) as client:
            listing = lambda: client.get("/v1/reports?track=smoke&limit=50", headers=headers)  # noqa: E731
            page_id = listing().json()["items"][0]["report_id"]
            report = lambda: client.get(f"/v1/reports/{page_id}", headers=headers)  # noqa: E731
            summary = lambda: client.get("/v1/verdicts/summary?track=smoke", headers=headers)  # noqa: E731
            kept_q, kept_per_track = discoveries.qvalues, discoveries.per_track
            rows = []
            for name, call in (("listing", listing), ("report page", report), ("summary", summary)):
                timed(call, 3)
                kept = timed(call, args.requests)
                discoveries.qvalues = lambda s, reports: discoveries.qvalues_from_scratch(  # type: ignore[assignment]
                    s, {r.track for r in reports})
                discoveries.per_track = discoveries.per_track_from_scratch  # type: ignore[assignment]
                scratch = timed(call, max(5, args.requests // 10))
                discoveries.qvalues, discoveries.per_track = kept_q, kept_per_track  # type: ignore[assignment]
                rows.append((name, kept, scratch))
            after_store = []
            for i in range(8):  # the first read after a new report rebuilds the track's curves
                store_one(app, i)
                after_store += timed(listing, 1)
        print(f"{args.reports:,} reports (fill {fill_s:.0f} s); latency in ms, sequential, in-process client\n")
        print("| read | kept p50 | kept p99 | from scratch p50 | from scratch p99 | p50 ratio |")
        print("|---|---|---|---|---|---|")
        for name, kept, scratch in rows:
            k50, k99, s50, s99 = (percentile(kept, 0.5), percentile(kept, 0.99), percentile(scratch, 0.5),
                                  percentile(scratch, 0.99))
            print(f"| {name} | {k50:.1f} | {k99:.1f} | {s50:.1f} | {s99:.1f} | {s50 / k50:.1f}x |")
            results[name] = {"kept_p50": k50, "kept_p99": k99, "scratch_p50": s50, "scratch_p99": s99}
        results["listing after a store (rebuild)"] = {"p50": percentile(after_store, 0.5), "max": max(after_store)}
        print(f"| listing, first read after a new report | {percentile(after_store, 0.5):.1f} | "
              f"{max(after_store):.1f} (max) | | | |")
        app.state.engine.dispose()
    print("\n" + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
