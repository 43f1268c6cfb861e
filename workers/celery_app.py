"""The workers' Celery app: built from the settings, with its two tasks registered.

acks_late + prefetch 1: a message is acknowledged only after its job ended, and
a worker process holds one message at a time. The database claim (not the
broker) guarantees a job runs once.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery, signals
from celery.exceptions import Reject

from app.queue import RUN_JOB_TASK, VALIDATE_TRACK_TASK, celery_base_config, is_sql_broker
from app.settings import Settings
from workers.context import ContextHolder

DRAINING = threading.Event()


@signals.worker_shutting_down.connect
def _drain(**_: Any) -> None:
    """A warm shutdown (SIGTERM, SIGINT: a deploy, ``docker stop``, a pod's termination) lets the
    running job finish and starts no other (issue 28.4). Celery's own check is not enough: its
    blocking loop (the embedded SQL broker, the solo pool) reads one more message after the
    signal and would run it inline, so each task refuses itself while draining, and its message
    goes back to the queue for another worker."""
    DRAINING.set()


def _refuse_while_draining() -> None:
    if DRAINING.is_set():
        raise Reject("this worker is draining; another takes the job", requeue=True)


def worker_config(settings: Settings) -> dict[str, Any]:
    """Celery settings of a worker process."""
    config = celery_base_config(settings.broker_url)
    config.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_concurrency=1,
        # Enforced by the prefork pool; the judge enforces job_timeout_s itself.
        task_soft_time_limit=settings.job_timeout_s + 300,
        task_time_limit=settings.job_timeout_s + 600,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        task_default_queue=settings.worker_queue,
    )
    if is_sql_broker(settings.broker_url):
        # kombu's SQL transport has no fanout exchange, which remote control needs.
        config["worker_enable_remote_control"] = False
    return config


def make_celery(settings: Settings) -> tuple[Celery, ContextHolder]:
    """A Celery app with ``ideabench.run_job`` and ``ideabench.validate_track``, and its context holder."""
    from bench import options

    options.configure(settings.host_options())  # the sandbox's policy and the default options
    celery = Celery("ideabench")
    celery.conf.update(worker_config(settings))
    holder = ContextHolder(settings)

    @celery.task(name=RUN_JOB_TASK, ignore_result=True)
    def run_job(job_id: str) -> str:
        """Claim and judge one job (a no-op when someone else holds it)."""
        _refuse_while_draining()
        from workers.runner import execute_job  # torch loads here, in the worker only

        return execute_job(holder.get(), job_id).value

    @celery.task(name=VALIDATE_TRACK_TASK, ignore_result=True)
    def validate_track(track_id: str) -> str:
        """Validate one registered custom track in the sandbox (a no-op once validated)."""
        _refuse_while_draining()
        from workers.tracks import execute_validation

        return execute_validation(holder.get(), track_id)

    return celery, holder
