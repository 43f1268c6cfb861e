"""Checks before the queue (issue 27.5): ``idea_checks``, one row per POST /v1/ideas/check, taken
by a worker's check thread and answered once.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "idea_checks",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("submitter_id", sa.String(32), nullable=False),
        sa.Column("track", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("submission", _json(), nullable=False),
        sa.Column("result", _json(), nullable=True),
        sa.Column("error", _json(), nullable=True),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_idea_checks_status_created", "idea_checks", ["status", "created_at"])
    op.create_index("ix_idea_checks_submitter_status", "idea_checks", ["submitter_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_idea_checks_submitter_status", table_name="idea_checks")
    op.drop_index("ix_idea_checks_status_created", table_name="idea_checks")
    op.drop_table("idea_checks")
