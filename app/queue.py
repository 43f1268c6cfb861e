"""The API's light Celery client: it sends jobs by task *name* and knows only the broker.

The API never imports ``workers`` (or torch). The database is the source of
truth; a message that fails to send leaves the job ``queued`` and the worker's
reconciler sends it again.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

log = logging.getLogger("ideabench.queue")

RUN_JOB_TASK = "ideabench.run_job"
VALIDATE_TRACK_TASK = "ideabench.validate_track"
QUEUES = ("cpu", "gpu")


def broker_transport_options(broker_url: str) -> dict[str, Any]:
    """Transport options by broker: a busy timeout for the embedded SQLite broker."""
    if broker_url.startswith(("sqla+sqlite", "sqlalchemy+sqlite")):
        from pathlib import Path

        # SQLite cannot create the file's directory (./var) itself.
        Path(broker_url.split(":///", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
        # Passed to create_engine by kombu's SQLAlchemy transport.
        return {"connect_args": {"timeout": 30.0, "check_same_thread": False}}
    if broker_url.startswith(("redis", "rediss")):
        # Long jobs must not be redelivered while still running; the lease and
        # the reconciler, not the broker, decide when a job is lost.
        return {"visibility_timeout": 6 * 3600}
    return {}


def celery_base_config(broker_url: str) -> dict[str, Any]:
    """The Celery settings shared by the API client and the workers."""
    return {
        "broker_url": broker_url,
        "broker_transport_options": broker_transport_options(broker_url),
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": 3.0,
        "task_default_queue": "cpu",
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_ignore_result": True,
        "task_publish_retry_policy": {
            "max_retries": 2,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
    }


def is_sql_broker(broker_url: str) -> bool:
    """True for kombu's SQLAlchemy transport (the embedded SQLite broker)."""
    return broker_url.startswith(("sqla+", "sqlalchemy+"))


def prepare_broker(broker_url: str, attempts: int = 3) -> None:
    """Create the broker's tables and queues once, before API and worker race to do it.

    kombu's SQL transport creates its tables and queue rows lazily from every
    process; two processes doing it at the same moment collide on a unique
    constraint. Other brokers need nothing.
    """
    if not is_sql_broker(broker_url):
        return
    from kombu import Connection, Exchange, Queue

    for attempt in range(attempts):
        try:
            with Connection(broker_url, transport_options=broker_transport_options(broker_url)) as conn:
                channel = conn.default_channel
                for name in QUEUES:
                    Queue(name, Exchange(name, type="direct"), routing_key=name)(channel).declare()
            return
        except Exception:
            if attempt == attempts - 1:
                raise
            log.info("broker preparation collided with another process; retrying")


class JobQueue:
    """Send ``ideabench.run_job(job_id)`` (and track validations) to a queue; check the broker."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self._celery = Celery("ideabench-api", set_as_current=False)
        self._celery.conf.update(celery_base_config(broker_url))

    def enqueue(self, job_id: str, queue: str) -> bool:
        """Send the job; False (logged) when the broker refused, leaving it to the reconciler."""
        return self._send(RUN_JOB_TASK, job_id, queue)

    def enqueue_track(self, track_id: str, queue: str) -> bool:
        """Send a custom track's validation; False (logged) when the broker refused."""
        return self._send(VALIDATE_TRACK_TASK, track_id, queue)

    def _send(self, task: str, arg: str, queue: str) -> bool:
        try:
            self._celery.send_task(task, args=[arg], queue=queue)
        except Exception:  # any broker failure: the row stays pending in the DB
            log.warning("could not send %s(%s) on %s; the reconciler will retry", task, arg, queue,
                        exc_info=True)
            return False
        return True

    def depth(self, queue: str) -> int | None:
        """Messages waiting in ``queue`` on the broker (kombu's queue declaration: Redis' list
        lengths, the SQL broker's rows); None when the broker does not say."""
        try:
            with self._celery.connection_for_read() as conn:
                conn.ensure_connection(max_retries=1, timeout=3)
                with conn.channel() as channel:
                    return int(channel.queue_declare(queue=queue, durable=True, auto_delete=False).message_count)
        except Exception:
            log.warning("could not read the depth of queue %s", queue, exc_info=True)
            return None

    def ping(self) -> bool:
        """True when the broker accepts a connection within a few seconds."""
        try:
            with self._celery.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=3)
        except Exception:
            return False
        return True

    def close(self) -> None:
        """Release broker connections."""
        self._celery.close()
