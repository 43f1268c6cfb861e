"""Queries on ``worker_beats``; never commits."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from app.health.models import WorkerBeat


def database_ok(session: Session) -> bool:
    """True when ``SELECT 1`` answers."""
    return session.execute(text("SELECT 1")).scalar() == 1


def last_worker_seen(session: Session) -> datetime | None:
    """When any worker last said it was alive."""
    return session.scalar(select(func.max(WorkerBeat.seen_at)))


def record_beat(session: Session, worker_id: str, queue: str, device: str, now: datetime) -> None:
    """Say this worker is alive (update, or insert the first time)."""
    result = session.execute(update(WorkerBeat).where(WorkerBeat.id == worker_id).values(seen_at=now))
    if int(result.rowcount) == 0:  # type: ignore[attr-defined]
        session.add(WorkerBeat(id=worker_id, queue=queue, device=device, started_at=now, seen_at=now))
