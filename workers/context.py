"""What a worker process holds: settings, its database engine, its identity, a sender."""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.db import make_engine, make_sessionmaker
from app.queue import JobQueue
from app.settings import Settings

if TYPE_CHECKING:
    from bench.options import HostOptions


@dataclass
class WorkerContext:
    """Per-process state of a worker (build it in the process that uses it)."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    worker_id: str
    queue: JobQueue

    @classmethod
    def create(cls, settings: Settings) -> WorkerContext:
        """A context for this process; the worker id is ``host:pid``."""
        # A worker needs few connections: the runner, its heartbeat, the reconciler.
        pool = {} if settings.embedded else {"pool_size": 4, "max_overflow": 4}
        engine = make_engine(settings.database_url, **pool)
        return cls(
            settings=settings,
            engine=engine,
            sessions=make_sessionmaker(engine),
            worker_id=f"{socket.gethostname()}:{os.getpid()}",
            queue=JobQueue(settings.broker_url),
        )

    def host_options(self) -> HostOptions:
        """This process's engine options from its settings, configured before they are used:
        every path that starts sandboxed children (a job, a check, a track's validation, also
        ``ideabench track register``'s in-process one) asks here, so none can run them under
        another policy or secret than the settings say."""
        from bench import options as engine_options

        options = self.settings.host_options()
        if engine_options.current() != options:
            engine_options.configure(options)
        return options

    def close(self) -> None:
        """Release connections."""
        self.queue.close()
        self.engine.dispose()


class ContextHolder:
    """One context per process, made on first use (after a prefork child forks)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._context: WorkerContext | None = None

    def get(self) -> WorkerContext:
        """This process's context."""
        with self._lock:
            if self._context is None or self._pid != os.getpid():
                self._context = WorkerContext.create(self.settings)
                self._pid = os.getpid()
            return self._context
