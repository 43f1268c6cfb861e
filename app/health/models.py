"""The ``worker_beats`` table: each worker process says it is alive here."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime, utcnow


class WorkerBeat(Base):
    """The last sign of life of one worker process."""

    __tablename__ = "worker_beats"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    queue: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(32))
    # What the worker's sandbox check found at its start (bench.sandbox.SandboxCheck.describe):
    # "complete", "weak: missing ..." (judging, development only) or "refused: missing ...".
    sandbox: Mapped[str | None] = mapped_column(String(200))
    # The built-in tracks this worker cannot run, each with why (``bench.catalog.unavailable_reason``
    # of its own environment: cifar10's data is on the workers, not on the API's hosts). None: a
    # worker from before the column, which said nothing.
    unavailable: Mapped[dict[str, str] | None] = mapped_column(JSON)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
