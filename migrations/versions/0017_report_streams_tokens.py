"""``report_streams`` and ``reports.stream_seq`` (issue 28.9): each track's stream counts its
changes (``seq``, with a ``base`` token renewed by every change that is not a new report), and a
stored report keeps the change that stored it, so an API process keeps a track's q-values and
discovery counts between reads and adds new reports to them instead of recomputing everything
on every read (``app.reports.discoveries``). Every track with stored reports gets a row, and
their reports ``stream_seq`` 0 (older than any change); a report stored later without one (by a
worker still on the older code) keeps its track from being kept until the reconciler gives it one.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "report_streams",
        sa.Column("track", sa.String(length=64), primary_key=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("base", sa.String(length=32), nullable=False),
    )
    op.add_column("reports", sa.Column("stream_seq", sa.BigInteger(), nullable=True))
    op.execute(sa.text("UPDATE reports SET stream_seq = 0"))  # stored before any change
    op.create_index("ix_reports_track_stream_seq", "reports", ["track", "stream_seq"])
    op.create_index("ix_reports_stream_seq", "reports", ["stream_seq"])
    conn = op.get_bind()
    streams = sa.table("report_streams", sa.column("track", sa.String), sa.column("seq", sa.BigInteger),
                       sa.column("base", sa.String))
    tracks = [row[0] for row in conn.execute(sa.text("SELECT DISTINCT track FROM reports"))]
    if tracks:
        conn.execute(streams.insert(), [{"track": t, "seq": 1, "base": secrets.token_hex(16)} for t in tracks])


def downgrade() -> None:
    op.drop_index("ix_reports_stream_seq", table_name="reports")
    op.drop_index("ix_reports_track_stream_seq", table_name="reports")
    with op.batch_alter_table("reports") as batch:
        batch.drop_column("stream_seq")
    op.drop_table("report_streams")
