"""The ``seed_epochs`` table: each seed epoch's commitment, as the first worker judging under it
recorded it (bench.seeding.SeedSecret.commitment; never the key)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class SeedEpoch(Base):
    """One seed epoch of the deployment: its scheme and commitment, when it was first seen and
    when a newer epoch retired it."""

    __tablename__ = "seed_epochs"

    epoch: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    scheme: Mapped[str] = mapped_column(String(40))
    commitment: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
