"""Custom tracks: the custom_tracks table and reports.custom_track.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "custom_tracks",
        sa.Column("id", sa.String(length=80), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("file_name", sa.String(length=200), nullable=True),
        sa.Column("card", _json(), nullable=False),
        sa.Column("domain", sa.String(length=200), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("deprecated", sa.Boolean(), nullable=False),
        sa.Column("validation", _json(), nullable=True),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("error_hint", sa.Text(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("sent_at", _ts(), nullable=True),
        sa.Column("validated_at", _ts(), nullable=True),
        sa.Column("deprecated_at", _ts(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_custom_tracks")),
        sa.UniqueConstraint("name", "version", name="uq_custom_tracks_name_version"),
    )
    op.create_index("ix_custom_tracks_status_created", "custom_tracks", ["status", "created_at"])
    with op.batch_alter_table("reports") as batch_op:
        batch_op.add_column(sa.Column("custom_track", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.create_index("ix_reports_custom_created", ["custom_track", "created_at", "id"])


def downgrade() -> None:
    with op.batch_alter_table("reports") as batch_op:
        batch_op.drop_index("ix_reports_custom_created")
        batch_op.drop_column("custom_track")
    op.drop_index("ix_custom_tracks_status_created", table_name="custom_tracks")
    op.drop_table("custom_tracks")
