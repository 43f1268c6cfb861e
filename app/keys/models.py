"""The ``api_keys`` table: only a sha256 of each key is stored."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime, utcnow


class ApiKey(Base):
    """One API key: its visible id, role and the sha256 of the secret token."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Signs this key's webhooks (Standard Webhooks, ``whsec_<base64>``): a symmetric secret, so
    # it is stored as is; GET /v1/keys/me shows it to the key's holder.
    webhook_secret: Mapped[str | None] = mapped_column(String(64))
    # Operator overrides of the fair-use limits (None: the service's setting; 0: no cap).
    max_active_jobs: Mapped[int | None] = mapped_column(Integer)
    daily_job_quota: Mapped[int | None] = mapped_column(Integer)
