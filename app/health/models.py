"""The ``worker_beats`` table: each worker process says it is alive here."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
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
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
