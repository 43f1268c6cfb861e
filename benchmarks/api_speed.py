"""API speed: listing and summary latency over 100,000 reports, submission throughput,
queue-to-start latency (issue 3, section 8). A benchmark, not a timed test.

    .venv/bin/python benchmarks/api_speed.py            # Postgres + Redis on localhost
    .venv/bin/python benchmarks/api_speed.py --reports 20000 --post-seconds 5   # quicker

It creates (and drops) a scratch Postgres database, fills it, starts the API with
uvicorn as a real HTTP server (and real workers for the queue-to-start part), and
prints a Markdown table plus JSON. Needs Postgres and Redis (see --pg-admin-url,
--redis-url); the embedded part needs nothing.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg2
from sqlalchemy import insert

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db import make_engine  # noqa: E402
from app.jobs.models import Job  # noqa: E402
from app.keys.models import ApiKey  # noqa: E402
from app.keys.service import create_key, hash_token  # noqa: E402
from app.migrate import upgrade_head  # noqa: E402
from app.reports.models import Report, VerdictCount  # noqa: E402
from app.reports.repository import week_of  # noqa: E402
from app.settings import Settings  # noqa: E402
from bench.catalog import get_card  # noqa: E402

TRACKS = ["smoke", "tabular", "correlated_tokens", "dynamics", "sequence", "vision", "cifar10"]
PAIRS = [("worked", "helps", 0.15), ("partial", "helps", 0.10), ("partial", "inconclusive", 0.15),
         ("failed", "inconclusive", 0.40), ("failed", "harms", 0.10), ("partial", "harms", 0.10)]
FAILING_IDEA = "def build_model(spec):\n    raise ValueError('benchmark: fail fast')\n"


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def report_json(track: str, system: str, practical: str, p: float, delta: float) -> dict[str, Any]:
    """A report body of realistic size (about 2 KB)."""
    per_seed = [round(0.3 + 0.01 * i, 4) for i in range(8)]
    return {
        "worked": system == "worked", "summary": "A synthetic benchmark report. " * 6,
        "metrics": {"baseline": 0.31, "idea": 0.31 + delta},
        "system_verdict": system, "practical_verdict": practical,
        "practical_detail": "underpowered" if practical == "inconclusive" else None,
        "mechanism_ok": 1 if system == "worked" else 0, "system_judged": True,
        "bench_report": {
            "bench_version": 1, "track": track, "model": "bench", "metric_direction": "lower", "n_seeds": 8,
            "baseline": {"per_seed": per_seed, "sweep": [{"cfg": {"lr": lr}, "mean": 0.3} for lr in (0.003, 0.01, 0.03)]},
            "idea": {"per_seed": [v + delta for v in per_seed]},
            "comparison": {"delta_mean": delta, "p_value": p, "idea_wins": 4, "n_pairs": 8,
                           "verdict": "no significant win", "per_seed_diffs": [delta] * 8},
        },
    }


def fill(database_url: str, n_reports: int, seed: int = 1) -> None:
    """Insert ``n_reports`` succeeded jobs and their reports spread over a year."""
    rng = random.Random(seed)
    engine = make_engine(database_url)
    keys = [{"id": f"key_{i:08x}", "name": f"agent {i}", "role": "agent", "token_sha256": hash_token(str(i)),
             "created_at": datetime.now(UTC)} for i in range(50)]
    weights = [w for *_, w in PAIRS]
    start = datetime.now(UTC) - timedelta(days=365)
    counts: dict[tuple[Any, str, str, str], int] = {}
    with engine.begin() as conn:
        conn.execute(insert(ApiKey), keys)
    batch = 5000
    for offset in range(0, n_reports, batch):
        jobs, reports = [], []
        for i in range(offset, min(n_reports, offset + batch)):
            track = rng.choice(TRACKS)
            system, practical, _ = rng.choices(PAIRS, weights)[0]
            created = start + timedelta(seconds=rng.uniform(0, 365 * 86400))
            job_id, rep_id = f"job_{i:020x}", f"rep_{i:020x}"
            p, delta = rng.choice([0.0078125, 0.03, 0.2, 0.6, 1.0]), rng.uniform(-0.05, 0.05)
            submitter = keys[rng.randrange(len(keys))]["id"]
            jobs.append({"id": job_id, "status": "succeeded", "queue": "cpu", "track": track, "idea_code": "x",
                         "submitter_id": submitter, "request_sha256": "0" * 64, "runs_done": 40, "runs_total": 40,
                         "attempts": 1, "cancel_requested": False, "created_at": created, "report_id": rep_id,
                         "started_at": created, "finished_at": created + timedelta(seconds=30)})
            reports.append({"id": rep_id, "job_id": job_id, "track": track, "submitter_id": submitter,
                            "system_verdict": system, "practical_verdict": practical,
                            "practical_detail": None, "mechanism_ok": system == "worked",
                            "worked": system == "worked", "p_value": p, "delta_mean": delta,
                            "created_at": created, "body": report_json(track, system, practical, p, delta)})
            day = created.date()
            key = (day, track, system, practical)
            counts[key] = counts.get(key, 0) + 1
        with engine.begin() as conn:
            conn.execute(insert(Job), jobs)
            conn.execute(insert(Report), reports)
    rollup = [{"day": d, "week": week_of(d), "track": t, "system_verdict": s, "practical_verdict": p, "n": n}
              for (d, t, s, p), n in counts.items()]
    with engine.begin() as conn:
        conn.execute(insert(VerdictCount), rollup)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
    engine.dispose()


@contextmanager
def scratch_postgres(admin_url: str) -> Iterator[str]:
    """A fresh database, dropped afterwards."""
    admin = psycopg2.connect(admin_url, connect_timeout=3)
    admin.autocommit = True
    name = f"ideabench_bench_{uuid.uuid4().hex[:8]}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IDEABENCH_")}
    env.update(DATABASE_URL=settings.database_url, BROKER_URL=settings.broker_url,
               IDEABENCH_DATA_DIR=str(settings.data_dir), PYTHONPATH=str(ROOT), **extra)
    return env


def stop_process(proc: subprocess.Popen[bytes], sig: int, timeout_s: float = 15.0) -> None:
    """Send ``sig``; kill what has not ended ``timeout_s`` later."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextmanager
def api_server(settings: Settings, workers: int, cwd: Path) -> Iterator[str]:
    """uvicorn serving create_app on a free port; yields the base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port),
           "--workers", str(workers), "--log-level", "warning", "--no-access-log"]
    proc = subprocess.Popen(cmd, cwd=cwd, env=service_env(settings), stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        stop_process(proc, signal.SIGINT)


@contextmanager
def worker_process(settings: Settings, cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``ideabench worker`` (its log: ``cwd/worker.log``)."""
    with open(cwd / "worker.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "worker"], cwd=cwd,
                                env=service_env(settings), stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        stop_process(proc, signal.SIGQUIT)


def new_key(settings: Settings, role: str) -> str:
    from app.db import make_sessionmaker

    engine = make_engine(settings.database_url)
    with make_sessionmaker(engine)() as session:
        token = create_key(session, role, "benchmark").token
        session.commit()
    engine.dispose()
    return token


def time_gets(url: str, token: str, n: int, params_for: Callable[[random.Random], dict[str, Any]],
              path: str) -> dict[str, float]:
    """p50/p99 in ms of ``n`` sequential GETs (after a warm-up)."""
    rng = random.Random(2)
    headers = {"Authorization": f"Bearer {token}"}
    samples = []
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for _ in range(20):
            client.get(path, params=params_for(rng)).raise_for_status()
        for _ in range(n):
            params = params_for(rng)
            t0 = time.perf_counter()
            response = client.get(path, params=params)
            samples.append((time.perf_counter() - t0) * 1000)
            response.raise_for_status()
    return {"p50_ms": percentile(samples, 0.5), "p99_ms": percentile(samples, 0.99), "n": n}


def _post_loop(args: tuple[str, str, bytes, float, int]) -> tuple[int, int]:
    """One load-generator process: ``threads`` keep-alive connections POSTing until the deadline."""
    url, token, body, stop_at, threads = args
    host, port = url.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    counts = [0, 0]
    lock = threading.Lock()

    def loop() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        while time.time() < stop_at:
            conn.request("POST", "/v1/ideas", body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            with lock:
                counts[0 if response.status == 202 else 1] += 1
        conn.close()

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return counts[0], counts[1]


def post_throughput(url: str, token: str, seconds: float, concurrency: int) -> dict[str, float]:
    """Accepted submissions per second: ``concurrency`` keep-alive clients (plain http.client,
    spread over 4 processes so the load generator is not the bottleneck) for ``seconds``."""
    body = json.dumps({"track": "smoke", "code": get_card("smoke")["example_idea"]}).encode()
    processes = min(4, concurrency)
    start = time.time() + 1.0  # let every process get ready
    stop_at = start + seconds
    jobs = [(url, token, body, stop_at, concurrency // processes) for _ in range(processes)]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        results = pool.map(_post_loop, jobs)
    ok = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    return {"requests_per_s": ok / seconds, "accepted": ok, "errors": errors, "concurrency": concurrency}


def queue_to_start(url: str, token: str, samples: int, worker: subprocess.Popen[bytes]) -> dict[str, float]:
    """Seconds from a job's creation until a worker claimed it (idle worker, DB timestamps)."""
    headers = {"Authorization": f"Bearer {token}"}
    waits = []
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for i in range(samples + 1):
            job = client.post("/v1/ideas", json={"track": "smoke", "code": FAILING_IDEA}).json()
            deadline = time.monotonic() + 120
            while True:
                view = client.get(f"/v1/jobs/{job['job_id']}").json()
                if view["status"] != "queued":
                    break
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the worker did not start job {job['job_id']} (exit {worker.poll()})")
                time.sleep(0.01)
            started = datetime.fromisoformat(view["started_at"].replace("Z", "+00:00"))
            created = datetime.fromisoformat(view["created_at"].replace("Z", "+00:00"))
            if i > 0:  # the first job also pays for the worker's warm-up
                waits.append((started - created).total_seconds())
            client.post(f"/v1/jobs/{job['job_id']}/cancel")  # free the worker for the next sample
            while client.get(f"/v1/jobs/{job['job_id']}").json()["status"] == "running":
                time.sleep(0.1)
    return {"p50_s": percentile(waits, 0.5), "max_s": max(waits), "n": len(waits)}


def wait_worker_ready(url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(url + "/readyz/judging", timeout=5).status_code == 200:
            return
        time.sleep(0.5)
    raise RuntimeError("no worker became ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=1000, help="GETs per latency measurement")
    parser.add_argument("--post-seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--api-workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--latency-samples", type=int, default=8)
    parser.add_argument("--pg-admin-url", default=os.environ.get(
        "IDEABENCH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--redis-url", default=os.environ.get("IDEABENCH_TEST_REDIS_URL", "redis://127.0.0.1:6379/14"))
    args = parser.parse_args()
    results: dict[str, Any] = {"cpus": os.cpu_count(), "reports": args.reports}

    with tempfile.TemporaryDirectory() as tmp, scratch_postgres(args.pg_admin_url) as db_url:
        cwd = Path(tmp)
        import redis

        redis.Redis.from_url(args.redis_url).flushdb()
        settings = Settings(data_dir=cwd / "var", database_url=db_url, broker_url=args.redis_url)
        upgrade_head(settings)
        t0 = time.monotonic()
        fill(db_url, args.reports)
        results["fill_s"] = round(time.monotonic() - t0, 1)
        token = new_key(settings, "operator")
        verdicts = [(s, p) for s, p, _ in PAIRS]

        def filtered(rng: random.Random) -> dict[str, Any]:
            system, practical = rng.choice(verdicts)
            return {"system_verdict": system, "practical_verdict": practical, "track": rng.choice(TRACKS)}

        with api_server(settings, 1, cwd) as url:
            results["list_filtered"] = time_gets(url, token, args.requests, filtered, "/v1/reports")
            results["list_by_system_verdict"] = time_gets(
                url, token, args.requests, lambda r: {"system_verdict": r.choice(["worked", "partial", "failed"])},
                "/v1/reports")
            year_ago = (datetime.now(UTC) - timedelta(days=365)).date().isoformat()
            results["summary_day_30d"] = time_gets(url, token, args.requests // 2, lambda r: {},
                                                   "/v1/verdicts/summary")
            results["summary_week_26w"] = time_gets(url, token, args.requests // 2, lambda r: {"bucket": "week"},
                                                    "/v1/verdicts/summary")
            results["summary_week_track_year"] = time_gets(
                url, token, args.requests // 2,
                lambda r: {"bucket": "week", "track": r.choice(TRACKS), "since": year_ago}, "/v1/verdicts/summary")
            results["summary_day_year"] = time_gets(url, token, args.requests // 10, lambda r: {"since": year_ago},
                                                    "/v1/verdicts/summary")
        with api_server(settings, args.api_workers, cwd) as url:
            results["post_ideas"] = post_throughput(url, token, args.post_seconds, args.concurrency)
            results["post_ideas"]["api_workers"] = args.api_workers
        # Queue-to-start on Redis: drop the submitted backlog first.
        with api_server(settings, 1, cwd) as url:
            engine = make_engine(db_url)
            with engine.begin() as conn:
                conn.exec_driver_sql("UPDATE jobs SET status = 'cancelled' WHERE status = 'queued'")
            engine.dispose()
            redis.Redis.from_url(args.redis_url).flushdb()
            with worker_process(settings, cwd) as worker:
                wait_worker_ready(url)
                results["queue_to_start_redis"] = queue_to_start(url, token, args.latency_samples, worker)

    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        embedded = Settings(data_dir=cwd / "var")
        upgrade_head(embedded)
        token = new_key(embedded, "operator")
        with api_server(embedded, 1, cwd) as url, worker_process(embedded, cwd) as worker:
            wait_worker_ready(url)
            try:
                results["queue_to_start_embedded"] = queue_to_start(url, token, args.latency_samples, worker)
            except RuntimeError:
                print((cwd / "worker.log").read_text(errors="replace")[-3000:], file=sys.stderr)
                raise

    print(json.dumps(results, indent=2))
    print()
    print("| measurement | result |")
    print("|---|---|")
    for name in ("list_filtered", "list_by_system_verdict", "summary_day_30d", "summary_week_26w",
                 "summary_week_track_year", "summary_day_year"):
        r = results[name]
        print(f"| {name} (n={r['n']}) | p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms |")
    post = results["post_ideas"]
    print(f"| POST /v1/ideas ({post['concurrency']} clients, {post['api_workers']} API workers) | "
          f"{post['requests_per_s']:.0f} req/s ({post['errors']} errors) |")
    for name in ("queue_to_start_redis", "queue_to_start_embedded"):
        r = results[name]
        print(f"| {name} (n={r['n']}) | p50 {r['p50_s'] * 1000:.0f} ms, max {r['max_s'] * 1000:.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
