"""One seed secret per deployment, proven (issue 28.1): ``seed_epochs`` records each epoch's
commitment as the first worker judging under it saw it; a worker whose secret differs, or
whose epoch a newer one replaced, judges nothing.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "seed_epochs",
        sa.Column("epoch", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("scheme", sa.String(40), nullable=False),
        sa.Column("commitment", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("epoch", name=op.f("pk_seed_epochs")),
    )


def downgrade() -> None:
    op.drop_table("seed_epochs")
