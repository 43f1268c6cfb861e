"""Submission load (issue 14): N submissions from C concurrent agents, each with its own
Idempotency-Key, half of them sent twice (a client that retried after a timeout), against the
API on Postgres + Redis; then a sustained phase of fresh submissions. Prints the count of jobs
made (it must equal N: no retry made a second job), the status codes (no 5xx), p50/p99
latency and the throughput, as a Markdown table and JSON. A benchmark, not a timed test.

The API publishes no message (it commits the job); a worker's dispatcher loop runs beside it
(``--no-dispatcher``: none) and sends each job, on the same cores, so its CPU is in the figures
(``dispatcher``). At the end the broker must hold exactly one message per job.

    .venv/bin/python benchmarks/load.py                      # 1,000 submissions, 50 agents, 2 API processes
    .venv/bin/python benchmarks/load.py --profile prof.out   # one API process under cProfile

The load generator is raw asyncio HTTP/1.1 on keep-alive connections (one process), so the
client's own CPU stays small next to the server's; all of it shares this machine's cores.
``machine_busy_share`` (from /proc/stat) is the whole machine's use during the sustained phase;
``cpu_ms_per_request`` splits it by process from /proc/PID/stat, which reads lower than top;
``cores_busy`` also shows each API process (``api process PID``), where an uneven spread of the
keep-alive connections over uvicorn's workers shows (docs/reliability.md, session 10).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db import make_engine  # noqa: E402
from app.jobs.models import Job  # noqa: E402
from app.migrate import upgrade_head  # noqa: E402
from app.settings import Settings  # noqa: E402
from bench.catalog import get_card  # noqa: E402
from benchmarks.api_speed import free_port, new_key, percentile, scratch_postgres, service_env  # noqa: E402


def _request(port: int, token: str, body: bytes, key: str) -> bytes:
    return (f"POST /v1/ideas HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nIdempotency-Key: {key}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return status, await reader.readexactly(length)


async def _agent(port: int, token: str, requests: list[tuple[str, bool]], body: bytes,
                 out: list[tuple[float, int, bool, bool]]) -> None:
    """One agent on one keep-alive connection: each (key, retried) sent once, or twice."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for key, retried in requests:
        for attempt in range(2 if retried else 1):
            start = time.perf_counter()
            writer.write(_request(port, token, body, key))
            status, answer = await _read_response(reader)
            replay = b'"idempotent_replay":true' in answer
            out.append((time.perf_counter() - start, status, attempt == 1, replay))
    writer.close()


async def _load(port: int, tokens: list[str], n: int, body: bytes, seed: int, retried: float = 0.5
                ) -> tuple[float, list[Any]]:
    rng = random.Random(seed)
    per_agent: list[list[tuple[str, bool]]] = [[] for _ in tokens]
    for i in range(n):
        per_agent[i % len(tokens)].append((f"load-{seed}-{i}", rng.random() < retried))
    out: list[tuple[float, int, bool, bool]] = []
    start = time.perf_counter()
    await asyncio.gather(*(_agent(port, t, reqs, body, out) for t, reqs in zip(tokens, per_agent, strict=True)))
    return time.perf_counter() - start, out


# A worker's loop without its Celery consumer: it sends the jobs the API committed (and beats,
# and reconciles), on this machine's cores like the API, so its CPU is in the figures.
DISPATCHER = ("from app.settings import Settings; from workers.context import WorkerContext; "
              "from workers.reconciler import WorkerLoop; WorkerLoop(WorkerContext.create(Settings())).run()")


def _cpu_ticks(api_pid: int, dispatcher_pid: int | None = None) -> dict[str, int]:
    """CPU ticks so far of the API (the server and its children), the dispatcher, Postgres,
    Redis and this load generator, from /proc (Linux)."""
    parents: dict[int, int] = {}
    ticks: dict[int, tuple[str, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = (name, int(fields[11]) + int(fields[12]))

    def under(pid: int, root: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 1)
        return False

    out = {"api": 0, "dispatcher": 0, "postgres": 0, "redis": 0, "load generator": 0}
    for pid, (name, n) in ticks.items():
        if dispatcher_pid is not None and pid == dispatcher_pid:
            out["dispatcher"] += n
        elif under(pid, api_pid):
            out["api"] += n
            if parents[pid] == api_pid:  # one API process (uvicorn's workers are the server's children)
                out[f"api process {pid}"] = n
        elif name.startswith("postgres"):
            out["postgres"] += n
        elif name.startswith("redis"):
            out["redis"] += n
        elif pid == os.getpid():
            out["load generator"] += n
    return out


def _commits(engine: Any) -> int:
    """Transactions committed so far in the benchmark's database (pg_stat_database; the
    statistics collector's view lags by up to half a second, hence the wait)."""
    time.sleep(0.6)
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
        return int(conn.exec_driver_sql(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").scalar_one())


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _summary(elapsed: float, out: list[tuple[float, int, bool, bool]]) -> dict[str, Any]:
    latencies = [o[0] * 1000 for o in out]
    statuses: dict[int, int] = {}
    for _, status, _, _ in out:
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "requests": len(out), "seconds": round(elapsed, 2), "requests_per_s": round(len(out) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.5), 1), "p99_ms": round(percentile(latencies, 0.99), 1),
        "statuses": statuses, "retries": sum(o[2] for o in out),
        "retries_answered_as_replays": sum(o[2] and o[3] for o in out),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--sustained", type=int, default=3000, help="fresh submissions in the throughput phase")
    parser.add_argument("--api-workers", type=int, default=2)
    parser.add_argument("--pg-admin-url", default=os.environ.get("IDEABENCH_TEST_POSTGRES_URL",
                                                                 "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--profile", help="run one API process under py-spy (pip install py-spy) and write "
                        "its collapsed stacks (on-CPU samples, every thread) here")
    parser.add_argument("--async-commit", action="store_true", help="diagnostic: the API's Postgres sessions "
                        "with synchronous_commit=off (a commit then does not wait for the WAL flush)")
    parser.add_argument("--no-dispatcher", action="store_true", help="run no worker loop: the jobs stay "
                        "committed and unsent (the API publishes nothing since session 11)")
    parser.add_argument("--memory-rate-limit", action="store_true", help="count request rates in memory "
                        "(the embedded default) instead of in Redis (production, shared by the API processes)")
    args = parser.parse_args()
    body = json.dumps({"track": "smoke", "code": get_card("smoke")["example_idea"], "name": "load"}).encode()
    redis.Redis.from_url(args.redis_url).flushdb()
    with scratch_postgres(args.pg_admin_url) as database_url, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "var", database_url=database_url, broker_url=args.redis_url)
        upgrade_head(settings)
        tokens = [new_key(settings, "agent") for _ in range(args.agents)]
        port = free_port()
        # No worker drains the queue here: a cap no agent reaches, still counted on every submission.
        extra = {"IDEABENCH_MAX_ACTIVE_JOBS_PER_KEY": "1000000"}
        if not args.memory_rate_limit:
            extra["IDEABENCH_RATE_LIMIT_STORAGE"] = args.redis_url.rsplit("/", 1)[0] + "/12"
        env = service_env(settings, **extra)
        if args.async_commit:
            env["DATABASE_URL"] = database_url + "?options=-csynchronous_commit%3Doff"
        if args.profile:
            cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "--format", "raw", "-o", args.profile,
                   "--rate", "250", "--gil", "--nonblocking", "--", sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app",
                   "--port", str(port), "--log-level", "warning", "--no-access-log"]
        else:
            cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port),
                   "--workers", str(args.api_workers), "--log-level", "warning", "--no-access-log"]
        server = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL)
        dispatcher = None if args.no_dispatcher else subprocess.Popen(
            [sys.executable, "-c", DISPATCHER], cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dispatcher_pid = dispatcher.pid if dispatcher is not None else None
        try:
            import httpx

            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            asyncio.run(_load(port, tokens[:5], 100, body, seed=0))  # warm up: every process, every path
            engine = make_engine(database_url)
            with engine.connect() as conn:
                before = conn.execute(select(func.count()).select_from(Job)).scalar_one()
            elapsed, out = asyncio.run(_load(port, tokens, args.submissions, body, seed=1))
            with engine.connect() as conn:
                made = conn.execute(select(func.count()).select_from(Job)).scalar_one() - before
            idempotent = _summary(elapsed, out)
            idempotent["jobs_made"] = made
            ticks = _cpu_ticks(server.pid, dispatcher_pid)
            machine = _machine_ticks()
            commits = _commits(engine)
            # Fresh submissions only (each with its own Idempotency-Key, none retried).
            elapsed, out = asyncio.run(_load(port, tokens, args.sustained, body, seed=2, retried=0)) \
                if args.sustained else (1, [])
            sustained = _summary(elapsed, out)
            hz = os.sysconf("SC_CLK_TCK")
            after = _cpu_ticks(server.pid, dispatcher_pid)
            busy, total = (a - b for a, b in zip(_machine_ticks(), machine, strict=True))
            sustained["machine_busy_share"] = round(busy / max(1, total), 3)  # of all cores, any process
            sustained["cores_busy"] = {k: round((after[k] - ticks.get(k, 0)) / hz / elapsed, 2) for k in after}
            # Transactions committed in the database (every process: API, dispatcher) per fresh
            # submission: 1 or more when each submission commits alone, below 1 with group commit.
            sustained["commits_per_request"] = round((_commits(engine) - commits) / max(1, len(out)), 3)
            sustained["cpu_ms_per_request"] = {k: round(1000 * (after[k] - ticks[k]) / hz / max(1, len(out)), 2)
                                               for k in ticks if not k.startswith("api process")}
            with engine.connect() as conn:
                jobs_total = conn.execute(select(func.count()).select_from(Job)).scalar_one()
            broker = redis.Redis.from_url(args.redis_url)
            deadline = time.monotonic() + (0 if dispatcher is None else 60)
            while broker.llen("cpu") < jobs_total and time.monotonic() < deadline:
                time.sleep(0.25)  # the dispatcher sends what the last seconds committed
            time.sleep(0 if dispatcher is None else 1)  # (and nothing more: a second message would show)
            queued = broker.llen("cpu")
            engine.dispose()
        finally:
            if dispatcher is not None:
                dispatcher.send_signal(signal.SIGINT)
                try:
                    dispatcher.wait(15)
                except subprocess.TimeoutExpired:
                    dispatcher.kill()
            server.send_signal(signal.SIGINT)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
    results = {"idempotent": idempotent, "sustained": sustained, "api_workers": 1 if args.profile else
               args.api_workers, "agents": args.agents, "cpus": os.cpu_count(), "jobs_total": jobs_total,
               "broker_messages": queued}
    print("| phase | requests | req/s | p50 ms | p99 ms | statuses | jobs made |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {args.submissions} submissions, half retried | {idempotent['requests']} | "
          f"{idempotent['requests_per_s']} | {idempotent['p50_ms']} | {idempotent['p99_ms']} | "
          f"{idempotent['statuses']} | {made} |")
    print(f"| sustained fresh submissions | {sustained['requests']} | {sustained['requests_per_s']} | "
          f"{sustained['p50_ms']} | {sustained['p99_ms']} | {sustained['statuses']} | |")
    print("CPU ms per sustained request:", sustained.get("cpu_ms_per_request"), "machine busy:",
          sustained.get("machine_busy_share"), "commits per request:", sustained.get("commits_per_request"))
    print(f"jobs {jobs_total}, broker messages {queued}" + (" (no dispatcher ran)" if args.no_dispatcher else ""))
    print(json.dumps(results, indent=2))
    ok = made == args.submissions and all(s < 500 for s in idempotent["statuses"]) and \
        idempotent["retries"] == idempotent["retries_answered_as_replays"] and \
        (args.no_dispatcher or queued == jobs_total)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
