"""The ``custom_tracks`` table: every version of every registered track file, immutable.

A row's source, card and hash never change after insert; only the lifecycle
columns do (``validating -> active | rejected``, then possibly ``deprecated``), and an
operator's vouch (``vouched_at``): until an operator vouches for a version, no verdict on it
counts anywhere (its author chose the data, the split and the baseline; issue 25.8).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Boolean, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime, utcnow
from app.types import JsonType


class TrackStatus(StrEnum):
    """``validating -> active | rejected``; validation runs in a worker's sandbox."""

    VALIDATING = "validating"
    ACTIVE = "active"
    REJECTED = "rejected"


class CustomTrackRow(Base):
    """One version (``name@version``) of a registered track file."""

    __tablename__ = "custom_tracks"
    __table_args__ = (
        UniqueConstraint("name", "version", name="uq_custom_tracks_name_version"),
        Index("ix_custom_tracks_status_created", "status", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(80), primary_key=True)  # name@version
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(Text)
    file_name: Mapped[str | None] = mapped_column(String(200))
    card: Mapped[dict[str, Any]] = mapped_column(JsonType)
    domain: Mapped[str] = mapped_column(String(200))
    author: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), default=TrackStatus.VALIDATING.value)
    deprecated: Mapped[bool] = mapped_column(Boolean, default=False)
    validation: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    error_hint: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime())  # validation last sent to a worker
    validated_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    deprecated_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # An operator read this version's file and vouches that its data and baseline are fair:
    # only then do verdicts on it enter totals, q-values and discoveries.
    vouched_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    vouched_by: Mapped[str | None] = mapped_column(String(200))
    # the baseline's build validation captured and checked (bench.captured.pack_build; up to a few
    # MB): what every job trains as the baseline. Deferred: read only when a job or check needs it.
    baseline_build: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
