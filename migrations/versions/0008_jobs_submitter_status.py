"""An index on ``jobs (submitter_id, status)``: the fair-use count of a key's jobs in flight
reads only those, not the key's whole history (app/fair_use.py).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_jobs_submitter_status", "jobs", ["submitter_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_jobs_submitter_status", table_name="jobs")
