"""The sandbox fails closed (issue 25): ``worker_beats.sandbox`` says what each worker's
sandbox check found at its start (``/readyz`` reads it), and ``reports.counted`` is false for a
report judged under a weak sandbox (a development setting), which enters no totals or q-values.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("worker_beats", sa.Column("sandbox", sa.String(200), nullable=True))
    op.add_column("reports", sa.Column("counted", sa.Boolean(), server_default=sa.true(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("reports") as batch:
        batch.drop_column("counted")
    with op.batch_alter_table("worker_beats") as batch:
        batch.drop_column("sandbox")
