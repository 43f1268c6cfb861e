"""Queries on ``worker_beats``; never commits."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from app.db import db_now
from app.health.models import WorkerBeat


def database_ok(session: Session) -> bool:
    """True when ``SELECT 1`` answers."""
    return session.execute(text("SELECT 1")).scalar() == 1


def sandboxes_seen(session: Session, within_s: float) -> dict[str, str | None]:
    """What the sandbox check of each worker seen in the last ``within_s`` seconds (by the
    database's clock, which the beats are written by) found (None: not recorded)."""
    since = db_now(session) - timedelta(seconds=within_s)
    rows = session.execute(select(WorkerBeat.id, WorkerBeat.sandbox).where(WorkerBeat.seen_at >= since))
    return {worker_id: sandbox for worker_id, sandbox in rows}


def prune_beats(session: Session, before: datetime) -> int:
    """Delete the beats of workers last seen before ``before``; how many."""
    result = session.execute(delete(WorkerBeat).where(WorkerBeat.seen_at < before))
    return int(result.rowcount)  # type: ignore[attr-defined]


def queue_served(session: Session, queue: str, within_s: float) -> bool:
    """Whether a worker consuming ``queue`` that may judge (its beat's sandbox check) was seen in
    the last ``within_s`` seconds."""
    since = db_now(session) - timedelta(seconds=within_s)
    rows = session.execute(select(WorkerBeat.sandbox).where(WorkerBeat.queue == queue, WorkerBeat.seen_at >= since))
    return any(judges(state) for (state,) in rows)


def judges(sandbox: str | None) -> bool:
    """Whether a worker whose beat says ``sandbox`` may judge: a complete sandbox, or a weak one a
    development setting allows (``bench.sandbox.SandboxCheck.describe``)."""
    return sandbox is not None and (sandbox == "complete" or sandbox.startswith("weak:"))


def record_beat(session: Session, worker_id: str, queue: str, device: str, now: datetime, *,
                sandbox: str, unavailable: dict[str, str] | None = None) -> None:
    """Say this worker is alive (update, or insert the first time), with what its sandbox check
    found (``bench.sandbox.SandboxCheck.describe``) and the built-in tracks it cannot run."""
    result = session.execute(update(WorkerBeat).where(WorkerBeat.id == worker_id).values(
        seen_at=now, sandbox=sandbox, unavailable=unavailable))
    if int(result.rowcount) == 0:  # type: ignore[attr-defined]
        session.add(WorkerBeat(id=worker_id, queue=queue, device=device, started_at=now, seen_at=now,
                               sandbox=sandbox, unavailable=unavailable))


def tracks_unavailable(session: Session, within_s: float, queue: str | None = None) -> list[dict[str, str]] | None:
    """What each worker that may judge, seen in the last ``within_s`` seconds (on ``queue``, or on
    any), said it cannot run: one ``{track: why}`` each. None where no such worker said anything
    (none is alive, or each predates the column): the caller then asks its own environment."""
    since = db_now(session) - timedelta(seconds=within_s)
    query = select(WorkerBeat.sandbox, WorkerBeat.unavailable).where(WorkerBeat.seen_at >= since)
    if queue is not None:
        query = query.where(WorkerBeat.queue == queue)
    said = [dict(unavailable) for state, unavailable in session.execute(query)
            if judges(state) and isinstance(unavailable, dict)]
    return said or None
