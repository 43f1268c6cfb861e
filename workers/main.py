"""Start a worker process: the Celery consumer plus the reconciler thread."""

from __future__ import annotations

import os
import sys

from app.queue import is_sql_broker, prepare_broker
from app.settings import Settings


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


def run_worker(settings: Settings, queues: list[str] | None = None, concurrency: int = 1) -> int:
    """Run a worker until it is stopped; returns its exit status."""
    import workers.runner  # noqa: F401  (loads torch and the engine now, not on the first job)
    from app.logs import configure
    from workers.celery_app import make_celery
    from workers.context import WorkerContext
    from workers.reconciler import WorkerLoop
    from workers.webhooks import WebhookSender

    configure(settings.log_format)
    _tune_embedded_broker(settings)
    prepare_broker(settings.broker_url)
    queues = queues or [settings.worker_queue]
    celery, _holder = make_celery(settings)
    loop_ctx = WorkerContext.create(settings)
    loop = WorkerLoop(loop_ctx)
    loop.start()
    sender = WebhookSender(loop_ctx)
    sender.start()
    try:
        celery.worker_main(worker_argv(settings, queues, concurrency))
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else 1
    finally:
        loop.stop()
        sender.stop()
        loop_ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(run_worker(Settings()))
