"""``report_streams``: one token per track, renewed in every transaction that stores, changes or
removes a report on it (issue 28.9), so an API process keeps a track's q-values and discovery
counts between reads instead of recomputing them from every report on every read
(``app.reports.discoveries``). Every track with stored reports gets a row; a track without one
is never cached.

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
        sa.Column("token", sa.String(length=32), nullable=False),
    )
    conn = op.get_bind()
    streams = sa.table("report_streams", sa.column("track", sa.String), sa.column("token", sa.String))
    tracks = [row[0] for row in conn.execute(sa.text("SELECT DISTINCT track FROM reports"))]
    if tracks:
        conn.execute(streams.insert(), [{"track": t, "token": secrets.token_hex(16)} for t in tracks])


def downgrade() -> None:
    op.drop_table("report_streams")
