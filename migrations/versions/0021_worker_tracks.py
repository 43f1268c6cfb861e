"""``worker_beats.unavailable`` (issue 27.3): each worker says which built-in tracks it cannot
run and why (its own environment: cifar10's data lies on the workers), so the API lists a track
available where a live worker can run it, not where the API's own host holds its data.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-08
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("worker_beats", sa.Column("unavailable", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("worker_beats") as batch:
        batch.drop_column("unavailable")
