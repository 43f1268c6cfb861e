"""A partial index on the jobs not sent yet (``status = 'queued' AND enqueued_at IS NULL``):
the workers' dispatcher finds them without reading the other queued jobs. The API no longer
publishes a job's message; it commits the job, and a worker sends it (workers/reconciler.py).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNSENT = sa.text("status = 'queued' AND enqueued_at IS NULL")


def upgrade() -> None:
    op.create_index("ix_jobs_unsent", "jobs", ["created_at"], postgresql_where=_UNSENT, sqlite_where=_UNSENT)


def downgrade() -> None:
    op.drop_index("ix_jobs_unsent", table_name="jobs")
