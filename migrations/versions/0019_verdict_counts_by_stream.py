"""``verdict_counts`` by stream (issue 28.1): the rollup's key gains the report's track version,
seed epoch and device class (0, 0 and ``cpu`` where a report did not say), so the summary can
keep one stream apart (other data, other secret seeds or another device are other experiments)
and still add them up by default. The rollup is derived data: it is rebuilt from the reports
that count in it (counted, against the track's own baseline; ``count_verdict``).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STREAM = ("track_version", "seed_epoch", "device_class")
REPORTS = sa.table("reports", sa.column("track", sa.String), sa.column("track_version", sa.Integer),
                   sa.column("seed_epoch", sa.Integer), sa.column("device_class", sa.String),
                   sa.column("system_verdict", sa.String), sa.column("practical_verdict", sa.String),
                   sa.column("counted", sa.Boolean), sa.column("baseline", sa.String),
                   sa.column("created_at", sa.DateTime(timezone=True)))


def _day(value: dt.datetime | str) -> dt.date:
    """The UTC day of a stored ``created_at`` (SQLite keeps naive UTC, Postgres an aware time)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return (value.astimezone(dt.UTC) if value.tzinfo else value).date()


def _create(by_stream: bool) -> sa.Table:
    stream = [sa.Column("track_version", sa.Integer(), nullable=False),
              sa.Column("seed_epoch", sa.Integer(), nullable=False),
              sa.Column("device_class", sa.String(length=16), nullable=False)] if by_stream else []
    key = ["day", "track", *(STREAM if by_stream else ()), "system_verdict", "practical_verdict"]
    return op.create_table(
        "verdict_counts",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("track", sa.String(length=64), nullable=False),
        *stream,
        sa.Column("system_verdict", sa.String(length=16), nullable=False),
        sa.Column("practical_verdict", sa.String(length=16), nullable=False),
        sa.Column("week", sa.Date(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(*key, name=op.f("pk_verdict_counts")),
    )


def _rebuild(by_stream: bool) -> None:
    op.drop_table("verdict_counts")
    table = _create(by_stream)
    bind = op.get_bind()
    counts: Counter[tuple[Any, ...]] = Counter()
    canonical = sa.or_(REPORTS.c.baseline.is_(None), REPORTS.c.baseline == "canonical")
    stmt = sa.select(REPORTS.c.created_at, REPORTS.c.track, REPORTS.c.track_version, REPORTS.c.seed_epoch,
                     REPORTS.c.device_class, REPORTS.c.system_verdict, REPORTS.c.practical_verdict).where(
        REPORTS.c.counted.is_(True), canonical)
    for created, track, version, epoch, device, system, practical in bind.execute(stmt):
        stream = (version or 0, epoch or 0, device or "cpu") if by_stream else ()
        counts[(_day(created), track, *stream, system, practical)] += 1
    names = ["day", "track", *(STREAM if by_stream else ()), "system_verdict", "practical_verdict"]
    rows = [{**dict(zip(names, key, strict=True)), "week": key[0] - dt.timedelta(days=key[0].weekday()), "n": n}
            for key, n in sorted(counts.items(), key=lambda item: repr(item[0]))]
    for start in range(0, len(rows), 5000):
        bind.execute(table.insert(), rows[start:start + 5000])


def upgrade() -> None:
    _rebuild(by_stream=True)


def downgrade() -> None:
    _rebuild(by_stream=False)
