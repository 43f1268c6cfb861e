"""A job that ends with an error is ``errored``, no longer ``failed`` (issue 27.7): the word
``failed`` stays the idea's ``system_verdict`` alone. Stored rows move; ``?status=failed`` still
lists them for one version (``app.jobs.models.LEGACY``).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(sa.text("UPDATE jobs SET status = 'errored' WHERE status = 'failed'"))


def downgrade() -> None:
    op.execute(sa.text("UPDATE jobs SET status = 'failed' WHERE status = 'errored'"))
