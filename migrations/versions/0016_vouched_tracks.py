"""A verdict on a custom track counts only once an operator vouches for the track's version
(issue 25.8): its author chose the data, the split and the baseline, and the second red team
signalled a baseline through the data itself (``tests/security/hostile/data_signal_track.py``).
``custom_tracks`` gains ``vouched_at`` / ``vouched_by``; stored reports on custom tracks leave the
totals (``counted`` false, their day's ``verdict_counts`` taken down) until their track is vouched
for (``app.reports.service.recount_track``).

A downgrade drops the two columns and leaves those reports uncounted (the safe side: it cannot
tell which of them counted before).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _day(value: dt.datetime | str) -> dt.date:
    """The UTC day of a stored ``created_at`` (SQLite keeps naive UTC, Postgres an aware time)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return (value.astimezone(dt.UTC) if value.tzinfo else value).date()


def upgrade() -> None:
    with op.batch_alter_table("custom_tracks") as batch:
        batch.add_column(sa.Column("vouched_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("vouched_by", sa.String(length=200), nullable=True))
    conn = op.get_bind()
    reports = sa.table("reports", sa.column("id", sa.String), sa.column("track", sa.String),
                       sa.column("custom_track", sa.Boolean), sa.column("counted", sa.Boolean),
                       sa.column("baseline", sa.String), sa.column("system_verdict", sa.String),
                       sa.column("practical_verdict", sa.String), sa.column("created_at", sa.DateTime(timezone=True)))
    counts = sa.table("verdict_counts", sa.column("day", sa.Date), sa.column("track", sa.String),
                      sa.column("system_verdict", sa.String), sa.column("practical_verdict", sa.String),
                      sa.column("n", sa.Integer))
    counted = sa.and_(reports.c.custom_track.is_(True), reports.c.counted.is_(True))
    rows = conn.execute(sa.select(reports.c.track, reports.c.baseline, reports.c.system_verdict,
                                  reports.c.practical_verdict, reports.c.created_at).where(counted)).all()
    for track, baseline, system, practical, created in rows:
        if (baseline or "canonical") != "canonical":
            continue  # never in the totals (app.reports.repository.count_verdict)
        key = sa.and_(counts.c.day == _day(created), counts.c.track == track,
                      counts.c.system_verdict == system, counts.c.practical_verdict == practical)
        conn.execute(counts.update().where(key).values(n=counts.c.n - 1))
    conn.execute(counts.delete().where(counts.c.n <= 0))
    conn.execute(reports.update().where(counted).values(counted=False))


def downgrade() -> None:
    with op.batch_alter_table("custom_tracks") as batch:
        batch.drop_column("vouched_by")
        batch.drop_column("vouched_at")
