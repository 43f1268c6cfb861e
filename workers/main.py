"""Start a worker process: the Celery consumer plus the reconciler thread."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from app.queue import is_sql_broker, prepare_broker
from app.settings import Settings

if TYPE_CHECKING:
    from bench.sandbox import SandboxCheck

log = logging.getLogger("ideabench.worker")
EX_CONFIG = 78  # sysexits.h: a configuration error (here, a sandbox that cannot run)


def check_sandbox() -> SandboxCheck:
    """Start one sandboxed child and say what it lacks (bench.sandbox.check)."""
    from bench import sandbox

    workdir = Path(tempfile.mkdtemp(prefix="ideabench-sandbox-check-"))
    try:
        return sandbox.check(workdir / "child")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_for_stop() -> None:
    """Block until SIGTERM or SIGINT (a worker that judges nothing still beats meanwhile)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass


def _tune_embedded_broker(settings: Settings) -> None:
    """Poll the SQLite broker every ``broker_poll_s`` (kombu's default is 1 s).

    kombu's SQL transport hands every transport option to ``create_engine``, so
    the interval cannot travel as an option; it is a class attribute instead.
    """
    if is_sql_broker(settings.broker_url):
        from kombu.transport import sqlalchemy as kombu_sql

        kombu_sql.Transport.polling_interval = settings.broker_poll_s


def worker_argv(settings: Settings, queues: list[str], concurrency: int) -> list[str]:
    """The ``celery worker`` arguments for one ideabench worker."""
    pool = settings.worker_pool if concurrency == 1 else "prefork"
    return [
        "worker",
        f"--pool={pool}",
        f"--concurrency={concurrency}",
        f"--queues={','.join(queues)}",
        f"--hostname=ideabench-{queues[0]}-{os.getpid()}@%h",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def check_device(device: str, concurrency: int = 1) -> str | None:
    """None when this worker's ``device`` exists and this torch build can use it; else why not
    (issue 28.5: a worker with IDEABENCH_DEVICE=cuda:0 on the CPU wheel consumed the gpu queue
    and failed every job). One job per GPU: jobs sharing a device would share its memory and
    time, so their speed, and a cached baseline's, would depend on what else ran."""
    if not device.startswith("cuda"):
        return None
    if concurrency != 1:
        return (f"--concurrency {concurrency} on {device}: a GPU worker judges one job at a time; start one "
                "worker process per GPU (IDEABENCH_DEVICE=cuda:N)")
    import torch

    if not torch.cuda.is_available():
        return f"device {device} asked, but this torch build ({torch.__version__}) sees no CUDA device"
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        return f"device {device} asked, but only {torch.cuda.device_count()} CUDA devices exist here"
    return None


def run_worker(settings: Settings, queues: list[str] | None = None, concurrency: int = 1) -> int:
    """Run a worker until it is stopped; returns its exit status."""
    import workers.runner  # loads torch and the engine now, not on the first job
    from app.logs import configure
    from bench import options as engine_options
    from workers.celery_app import make_celery
    from workers.checks import CheckRunner
    from workers.context import WorkerContext
    from workers.metrics import serve as serve_metrics
    from workers.reconciler import WorkerLoop

    configure(settings.log_format)
    engine_options.configure(settings.host_options())  # before the sandbox's check: its policy
    _tune_embedded_broker(settings)
    prepare_broker(settings.broker_url)
    queues = queues or [settings.worker_queue]
    found = check_sandbox()
    loop_ctx = WorkerContext.create(settings)
    secret_problem = check_device(settings.device, concurrency) or workers.runner.prove_secret(loop_ctx)
    state = found.describe() if secret_problem is None else f"refused: {secret_problem}"
    loop = WorkerLoop(loop_ctx, sandbox=state[:200])
    loop.start()
    metrics = serve_metrics(settings.worker_metrics_port, settings.worker_metrics_addr)
    if metrics is not None:
        metrics.judging.set(1 if secret_problem is None and found.judges else 0)
    if secret_problem is not None:  # its device missing, or another seed secret: it judges nothing
        log.error("this worker judges nothing: %s. Give it a device it has (IDEABENCH_DEVICE) and the "
                  "deployment's IDEABENCH_SEED_SECRET and IDEABENCH_SEED_EPOCH, or one shared data directory "
                  "(docs/deploy.md).", secret_problem)
    elif not found.judges:  # fail closed: say so at start and in /readyz/judging, take no job
        log.error("this worker judges nothing: its sandbox lacks %s. Install bubblewrap and libseccomp "
                  "(scripts/system_deps.sh; docs/deploy.md), or on a development machine only set "
                  "IDEABENCH_ALLOW_WEAK_SANDBOX=1.", ", ".join(found.missing))
    if secret_problem is not None or not found.judges:
        try:
            _wait_for_stop()
        finally:
            loop.stop()
            loop_ctx.close()
        return EX_CONFIG
    if found.missing:
        log.warning("weak sandbox (a development setting): judging without %s; reports say so and count "
                    "in no totals", ", ".join(found.missing))
    celery, _holder = make_celery(settings)
    checks = CheckRunner(loop_ctx)  # checks before the queue, answered while jobs are judged
    checks.start()
    try:
        celery.worker_main(worker_argv(settings, queues, concurrency))
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else 1
    finally:
        checks.stop()
        loop.stop()
        loop_ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(run_worker(Settings()))
