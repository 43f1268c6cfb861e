"""Container health check of a worker: exit 0 when a worker on this host beat recently.

``python -m workers.healthcheck`` (used by docker-compose.yml).
"""

from __future__ import annotations

import socket
import sys
from datetime import timedelta

from sqlalchemy import func, select

from app.db import db_now, make_engine, make_sessionmaker
from app.health.models import WorkerBeat
from app.settings import Settings


def main() -> int:
    """0 when this host's worker said it was alive within ``worker_seen_s``."""
    settings = Settings()
    engine = make_engine(settings.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            seen = session.scalar(
                select(func.max(WorkerBeat.seen_at)).where(WorkerBeat.id.like(f"{socket.gethostname()}:%"))
            )
            now = db_now(session)  # the clock the beat was written by
    finally:
        engine.dispose()
    healthy = seen is not None and now - seen < timedelta(seconds=settings.worker_seen_s)
    print("healthy" if healthy else f"unhealthy: last beat {seen}")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
