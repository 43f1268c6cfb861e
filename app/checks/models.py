"""The ``idea_checks`` table: one check of an idea before the queue, and what a worker found."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime, utcnow
from app.types import JsonType


class CheckStatus(StrEnum):
    PENDING = "pending"  # waiting for a worker's check thread
    RUNNING = "running"
    PASSED = "passed"  # a job would start training
    FAILED = "failed"  # a job would end with ``error``

    @property
    def ended(self) -> bool:
        return self in (CheckStatus.PASSED, CheckStatus.FAILED)


class IdeaCheck(Base):
    """One check: the submission (no name, no callback: it makes no job), and its answer."""

    __tablename__ = "idea_checks"
    __table_args__ = (
        Index("ix_idea_checks_status_created", "status", "created_at"),
        Index("ix_idea_checks_submitter_status", "submitter_id", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    submitter_id: Mapped[str] = mapped_column(String(32))
    track: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default=CheckStatus.PENDING.value)
    submission: Mapped[dict[str, Any]] = mapped_column(JsonType)  # code, baseline_code, hparams, mechanism
    result: Mapped[dict[str, Any] | None] = mapped_column(JsonType)  # bench.judge.check_answer
    error: Mapped[dict[str, Any] | None] = mapped_column(JsonType)  # code, message, hint
    worker: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
