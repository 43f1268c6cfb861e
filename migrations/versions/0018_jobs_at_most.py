"""``jobs.runs_at_most`` and ``jobs.eta_max_s`` (issue 27.2): a running job's progress says the
most runs it may still make (an lr-grid edge, the baseline at the idea's lr, a confirmation of
one or two looks, while the protocol has not decided them) and the seconds left if it makes them
all, so an agent knows how long to wait at most before the confirmation starts.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("runs_at_most", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("eta_max_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("eta_max_s")
        batch.drop_column("runs_at_most")
