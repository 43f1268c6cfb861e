"""Connection budget (issue 28.10): N simulated worker loops against one Postgres, directly and
through PgBouncer in transaction pooling, with the service's own code for every statement.

Each simulated worker is what one worker process holds (``WorkerContext``: one engine of 4 + 4
connections) and does what its threads do, on the settings' real cadence:

- its loop (``WorkerLoop``): ``dispatch_once`` every ``dispatch_every_s``, a beat every 5 s,
  ``reconcile_once`` every ``reconcile_every_s``;
- its check thread: ``checks.service.claim_next`` every ``check_poll_s`` (and ``expire`` every 30 s);
- its job thread: takes a message off the broker (Redis), ``prove_secret``, ``claim_job``, a
  heartbeat every ``heartbeat_s`` and a progress write every 5 s for ``--job-s`` seconds, then ends
  the job (``finish_unsuccessful``: no report is made, nothing is judged).

Beside them, ``--api-processes`` webhook pollers (``deliver_due`` every ``webhook_every_s``, the API
tier's loop). A feeder commits ``--jobs-per-s`` new queued jobs. The simulated workers run as
threads of ``--processes`` processes (the 2 cores here cannot hold 100 interpreters); a thread
waits on the database as a process would.

Printed per mode, in one run: statements/s sent by the clients (SQLAlchemy's
``before_cursor_execute``), transactions/s Postgres committed (``pg_stat_database``), the most
client connections the workers held open, the most server connections Postgres had
(``pg_stat_activity``), errors, and p50/p99 of each step. Postgres here allows
``max_connections`` (100): directly, 100 workers need more than that; through PgBouncer they share
``--pool-size`` server connections.

    apt-get install pgbouncer        # scripts/system_deps.sh installs it
    .venv/bin/python benchmarks/connection_budget.py                     # 100 workers, 60 s per mode
    .venv/bin/python benchmarks/connection_budget.py --workers 20 --seconds 10 --modes pgbouncer
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty
from typing import Any

import psycopg2
import redis
from sqlalchemy import event

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db import db_now, make_engine, make_sessionmaker, utcnow  # noqa: E402
from app.ids import new_id  # noqa: E402
from app.jobs.models import Job, JobStatus  # noqa: E402
from app.migrate import upgrade_head  # noqa: E402
from app.settings import Settings  # noqa: E402
from benchmarks.api_speed import free_port, new_key, percentile, scratch_postgres, stop_process  # noqa: E402

ADMIN_URL = os.environ.get("IDEABENCH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BEAT_EVERY_S = 5.0  # WorkerLoop's default
PROGRESS_EVERY_S = 5.0
EXPIRE_EVERY_S = 30.0  # workers.checks


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if os.path.exists(p)), None)


@contextmanager
def pgbouncer(database_url: str, pool_size: int) -> Iterator[tuple[str, str]]:
    """PgBouncer in transaction pooling in front of ``database_url``'s database (trust auth, as
    Postgres here); yields (the database's URL through it, the admin console's URL)."""
    binary = pgbouncer_binary()
    if binary is None:
        raise SystemExit("pgbouncer is not installed: apt-get install pgbouncer (scripts/system_deps.sh)")
    head, dbname = database_url.rsplit("/", 1)
    user_host = head.split("://", 1)[1]
    user, host_port = user_host.split("@", 1)
    host, port = host_port.split(":")
    listen = free_port()
    with tempfile.TemporaryDirectory(prefix="pgbouncer-") as tmp:
        os.chmod(tmp, 0o755)
        ini, users = Path(tmp) / "pgbouncer.ini", Path(tmp) / "userlist.txt"
        users.write_text(f'"{user}" ""\n')
        # The same settings as deploy/k8s/pgbouncer.yaml and docker-compose.yml, less TLS and passwords.
        ini.write_text(f"""[databases]
{dbname} = host={host} port={port} dbname={dbname}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {users}
admin_users = {user}
pool_mode = transaction
max_client_conn = 4000
default_pool_size = {pool_size}
reserve_pool_size = 0
server_reset_query = DISCARD ALL
ignore_startup_parameters = extra_float_digits,options
""")
        for path in (ini, users):
            os.chmod(path, 0o644)
        cmd = [binary, str(ini)] + (["-u", "nobody"] if os.geteuid() == 0 else [])  # it refuses root
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    psycopg2.connect(f"postgresql://{user}@127.0.0.1:{listen}/{dbname}", connect_timeout=1).close()
                    break
                except psycopg2.OperationalError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
                        raise SystemExit(f"pgbouncer did not start: {err[-2000:]}") from None
                    time.sleep(0.1)
            yield (f"postgresql://{user}@127.0.0.1:{listen}/{dbname}",
                   f"postgresql://{user}@127.0.0.1:{listen}/pgbouncer")
        finally:
            stop_process(proc, signal.SIGINT)


class Meter:
    """Statements sent, step latencies and errors of one process's simulated workers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statements = 0
        self.steps: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.first_error: dict[str, str] = {}
        self.jobs_ended = 0

    def count(self, *_: Any) -> None:
        with self.lock:
            self.statements += 1

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - counted and shown: the benchmark's point
            with self.lock:
                self.errors[name] += 1
                self.first_error.setdefault(name, f"{type(exc).__name__}: {str(exc)[:300]}")
            return None
        with self.lock:
            self.steps[name].append(time.perf_counter() - started)
        return result


def _job_id_of(message: bytes | str) -> str:
    """The job id in a Celery message (kombu's Redis transport: JSON, the body base64 JSON)."""
    body = json.loads(base64.b64decode(json.loads(message)["body"]))
    return str(body[0][0])


def _simulated_worker(settings: Settings, index: int, stop: threading.Event, meter: Meter, job_s: float,
                      redis_url: str, queue: str) -> list[threading.Thread]:
    """One worker process's threads (its loop, its check thread, its job thread)."""
    from app.checks import service as checks
    from workers import reconciler
    from workers.context import WorkerContext
    from workers.reconciler import WorkerLoop

    ctx = WorkerContext.create(settings)
    ctx.worker_id = f"bench-{os.getpid()}-{index}"
    event.listen(ctx.engine, "before_cursor_execute", meter.count)
    loop = WorkerLoop(ctx, sandbox="bench")

    def loop_thread() -> None:
        next_beat = next_reconcile = time.monotonic()
        while not stop.is_set():
            meter.step("dispatch", lambda: reconciler.dispatch_once(ctx))
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + BEAT_EVERY_S
                meter.step("beat", loop.beat)
            if time.monotonic() >= next_reconcile:
                next_reconcile = time.monotonic() + settings.reconcile_every_s
                meter.step("reconcile", lambda: reconciler.reconcile_once(ctx))
            stop.wait(settings.dispatch_every_s)

    def check_thread() -> None:
        expired = float("-inf")
        while not stop.is_set():
            if time.monotonic() - expired >= EXPIRE_EVERY_S:
                def expire() -> None:
                    with ctx.sessions() as session:
                        checks.expire(session, settings.check_pending_s, 2 * settings.check_timeout_s + 60)
                meter.step("check_expire", expire)
                expired = time.monotonic()

            def poll() -> None:
                with ctx.sessions() as session:
                    checks.claim_next(session, ctx.worker_id)
                    session.rollback()
            meter.step("check_poll", poll)
            stop.wait(settings.check_poll_s)

    def job_thread() -> None:
        broker = redis.Redis.from_url(redis_url)
        while not stop.is_set():
            popped = broker.blpop([queue], timeout=1)
            if popped is not None:
                _run_job(ctx, _job_id_of(popped[1]), stop, meter, job_s)
        broker.close()

    return [threading.Thread(target=fn, daemon=True) for fn in (loop_thread, check_thread, job_thread)]


def _in_session(ctx: Any, work: Callable[[Any], Any]) -> Callable[[], Any]:
    """``work(session)`` in one committed transaction of ``ctx``'s engine."""
    def run() -> Any:
        with ctx.sessions() as session:
            result = work(session)
            session.commit()
            return result
    return run


def _run_job(ctx: Any, job_id: str, stop: threading.Event, meter: Meter, job_s: float) -> None:
    """What ``workers.runner.execute_job`` asks of the database for one job: prove the secret,
    claim, heartbeat and progress while the job "runs" ``job_s`` seconds, end it."""
    from app.jobs import leases
    from workers.runner import prove_secret

    settings = ctx.settings
    meter.step("prove_secret", lambda: prove_secret(ctx))
    claim = meter.step("claim", _in_session(ctx, lambda s: leases.claim_job(
        s, job_id, ctx.worker_id, db_now(s), settings.lease_s)))
    if claim is None:
        return
    ends = time.monotonic() + job_s
    next_progress = time.monotonic() + PROGRESS_EVERY_S
    while time.monotonic() < ends and not stop.wait(settings.heartbeat_s):
        meter.step("heartbeat", _in_session(ctx, lambda s: leases.heartbeat(s, claim, db_now(s), settings.lease_s)))
        if time.monotonic() >= next_progress:
            next_progress = time.monotonic() + PROGRESS_EVERY_S
            meter.step("progress", _in_session(ctx, lambda s: leases.write_progress(
                s, claim, stage="screening", done=1, total=10, eta_s=30.0, message="benchmark")))
    meter.step("finish", _in_session(ctx, lambda s: leases.finish_unsuccessful(
        s, claim, JobStatus.ERRORED, {"code": "internal", "message": "benchmark", "hint": ""}, db_now(s))))
    with meter.lock:
        meter.jobs_ended += 1


def _webhook_poller(settings: Settings, stop: threading.Event, meter: Meter) -> threading.Thread:
    import httpx

    from app.webhooks.sender import deliver_due

    engine = make_engine(settings.database_url)  # an API process's engine (10 + 20)
    event.listen(engine, "before_cursor_execute", meter.count)
    sessions = make_sessionmaker(engine)

    def run() -> None:
        with httpx.Client(timeout=5, trust_env=False) as client:
            while not stop.is_set():
                meter.step("webhook_poll", lambda: deliver_due(settings, sessions, client))
                stop.wait(settings.webhook_every_s)
    return threading.Thread(target=run, daemon=True)


def _process(args: tuple[dict[str, Any], list[int], int, float, float, str, str, Any]) -> None:
    """One process: its share of the simulated workers (and of the webhook pollers)."""
    settings_kw, indices, pollers, seconds, job_s, redis_url, queue, results = args
    settings = Settings(**settings_kw)
    stop, meter = threading.Event(), Meter()
    threads: list[threading.Thread] = []
    for i in indices:
        threads += _simulated_worker(settings, i, stop, meter, job_s, redis_url, queue)
    threads += [_webhook_poller(settings, stop, meter) for _ in range(pollers)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    results.put({"statements": meter.statements, "steps": dict(meter.steps), "errors": dict(meter.errors),
                 "first_error": meter.first_error, "jobs_ended": meter.jobs_ended})


def _connections(admin: Any, dbname: str) -> int:
    with admin.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))
        return int(cur.fetchone()[0])


def _committed(admin: Any, dbname: str) -> int:
    with admin.cursor() as cur:
        cur.execute("SELECT pg_stat_get_db_xact_commit(oid) FROM pg_database WHERE datname = %s", (dbname,))
        return int(cur.fetchone()[0])


def _clients(console_url: str | None) -> int | None:
    """Client connections PgBouncer holds (its admin console's SHOW POOLS), None when direct."""
    if console_url is None:
        return None
    conn = psycopg2.connect(console_url, connect_timeout=2)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW POOLS")
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        return sum(int(r["cl_active"]) + int(r["cl_waiting"]) + int(r.get("cl_cancel_req", 0) or 0)
                   for r in rows if r["database"] != "pgbouncer")
    finally:
        conn.close()


def feed(url: str, submitter: str, queue: str, rate: float, stop: threading.Event, ready: threading.Event) -> None:
    """Commit ``rate`` new queued, unsent jobs a second (the API's part)."""
    engine = make_engine(url, pool_size=1, max_overflow=0)
    sessions = make_sessionmaker(engine)
    due = time.monotonic()
    ready.set()
    while not stop.is_set():
        with sessions() as session:  # its one connection, opened first: direct mode runs out of them
            session.add(Job(id=new_id("job"), status=JobStatus.QUEUED.value, queue=queue, track="smoke",
                            idea_code="def build_model(spec):\n    pass\n", submitter_id=submitter,
                            request_sha256="0" * 64, runs_done=0, attempts=0, cancel_requested=False,
                            created_at=utcnow()))
            session.commit()
        due += 1.0 / rate
        stop.wait(max(0.0, due - time.monotonic()))
    engine.dispose()


def run_mode(mode: str, db_url: str, settings: Settings, args: argparse.Namespace, submitter: str) -> dict[str, Any]:
    """One mode (``direct`` or ``pgbouncer``) for ``args.seconds``; its figures."""
    dbname = db_url.rsplit("/", 1)[1]
    broker_queue = "b" + new_id("q")[-8:]
    rds = redis.Redis.from_url(args.redis_url)
    with (pgbouncer(db_url, args.pool_size) if mode == "pgbouncer" else _direct(db_url)) as (url, console):
        settings_kw = {"database_url": url, "broker_url": args.redis_url, "data_dir": str(settings.data_dir)}
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        shares = [list(range(p, args.workers, args.processes)) for p in range(args.processes)]
        pollers = [args.api_processes // args.processes + (p < args.api_processes % args.processes)
                   for p in range(args.processes)]
        admin = psycopg2.connect(ADMIN_URL, connect_timeout=3)
        admin.autocommit = True
        stop, ready = threading.Event(), threading.Event()
        feeder = threading.Thread(target=feed, args=(db_url, submitter, broker_queue, args.jobs_per_s, stop, ready),
                                  daemon=True)
        feeder.start()
        ready.wait(10)
        procs = [ctx.Process(target=_process, args=((settings_kw, shares[p], pollers[p], args.seconds, args.job_s,
                                                     args.redis_url, broker_queue, results),)) for p in range(args.processes)]
        for proc in procs:
            proc.start()
        time.sleep(min(5.0, args.seconds / 4))  # the processes import and connect
        committed0, started = _committed(admin, dbname), time.monotonic()
        server_max, client_max = 0, 0
        committed1, ended = committed0, started
        while any(p.is_alive() for p in procs) and time.monotonic() - started < args.seconds + 60:
            try:
                server_max = max(server_max, _connections(admin, dbname))
                client_max = max(client_max, _clients(console) or 0)
            except psycopg2.Error:  # PgBouncer's console refused (its clients are full): next sample
                pass
            time.sleep(0.5)
            if time.monotonic() - started > args.seconds - 5 and not stop.is_set():  # before the processes stop
                committed1, ended = _committed(admin, dbname), time.monotonic()
                stop.set()
        if not stop.is_set():  # the processes ended early
            committed1, ended = _committed(admin, dbname), time.monotonic()
            stop.set()
        gathered = []
        for _ in procs:
            try:
                gathered.append(results.get(timeout=90))
            except Empty:  # a process died: its figures are missing, said below
                break
        for proc in procs:
            proc.join(timeout=30)
        feeder.join(timeout=10)
        admin.close()
    rds.delete(broker_queue)
    rds.close()
    steps: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    first_error: dict[str, str] = {}
    for part in gathered:
        for name, values in part["steps"].items():
            steps[name] += values
        for name, n in part["errors"].items():
            errors[name] += n
        for name, text in part["first_error"].items():
            first_error.setdefault(name, text)
    window = max(ended - started, 1e-6)
    return {
        "mode": mode, "processes_reported": f"{len(gathered)}/{len(procs)}", "workers": args.workers, "api_processes": args.api_processes,
        "statements_per_s": round(sum(p["statements"] for p in gathered) / args.seconds, 1),
        "transactions_per_s": round((committed1 - committed0) / window, 1),
        "jobs_ended": sum(p["jobs_ended"] for p in gathered),
        "client_connections_max": client_max if mode == "pgbouncer" else server_max,
        "server_connections_max": server_max,
        "errors": dict(errors), "first_error": first_error,
        "steps_ms": {name: {"n": len(v), "p50": round(percentile(v, 0.5) * 1000, 2),
                            "p99": round(percentile(v, 0.99) * 1000, 2)} for name, v in sorted(steps.items())},
    }


@contextmanager
def _direct(db_url: str) -> Iterator[tuple[str, None]]:
    yield db_url, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--processes", type=int, default=4, help="processes the simulated workers share")
    parser.add_argument("--api-processes", type=int, default=4, help="webhook pollers (one per API process)")
    parser.add_argument("--seconds", type=float, default=60.0, help="per mode")
    parser.add_argument("--jobs-per-s", type=float, default=2.0)
    parser.add_argument("--job-s", type=float, default=20.0, help="how long a simulated job holds its claim")
    parser.add_argument("--pool-size", type=int, default=20, help="PgBouncer's default_pool_size")
    parser.add_argument("--modes", default="direct,pgbouncer")
    parser.add_argument("--redis-url", default=os.environ.get("IDEABENCH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    rows = []
    with scratch_postgres(ADMIN_URL) as db_url, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "var", database_url=db_url, broker_url=args.redis_url)
        upgrade_head(settings)
        submitter = "key_" + new_key(settings, "agent").split("_")[1]  # a token is ib_<id hex>_<secret>
        for mode in args.modes.split(","):
            rows.append(run_mode(mode, db_url, settings, args, submitter))
    print("| mode | workers | statements/s | transactions/s | jobs ended | client conns (max) | "
          "server conns (max) | errors | heartbeat p50/p99 ms | claim p50/p99 ms | dispatch p50/p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["steps_ms"]

        def pp(name: str, s: dict[str, Any] = s) -> str:
            return f"{s[name]['p50']} / {s[name]['p99']}" if name in s else "-"
        print(f"| {r['mode']} | {r['workers']} | {r['statements_per_s']} | {r['transactions_per_s']} | "
              f"{r['jobs_ended']} | {r['client_connections_max']} | {r['server_connections_max']} | "
              f"{sum(r['errors'].values())} | {pp('heartbeat')} | {pp('claim')} | {pp('dispatch')} |")
    text = json.dumps(rows, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
