"""Webhooks (``jobs.callback_*``, ``webhook_attempts``, ``api_keys.webhook_secret``) and per-key
overrides of the fair-use limits (``api_keys.max_active_jobs``, ``api_keys.daily_job_quota``).

Existing keys get a fresh random webhook secret each.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("callback_url", sa.String(length=2000), nullable=True))
        batch.add_column(sa.Column("callback_state", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("callback_attempts", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("callback_next_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_jobs_callback_state_next", "jobs", ["callback_state", "callback_next_at"])
    op.create_table(
        "webhook_attempts",
        sa.Column("job_id", sa.String(length=32), sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("attempt", sa.Integer(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
    )
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("webhook_secret", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("max_active_jobs", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("daily_job_quota", sa.Integer(), nullable=True))
    keys = sa.table("api_keys", sa.column("id", sa.String), sa.column("webhook_secret", sa.String))
    bind = op.get_bind()
    for (key_id,) in bind.execute(sa.select(keys.c.id)).all():
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        bind.execute(keys.update().where(keys.c.id == key_id).values(webhook_secret=secret))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("daily_job_quota")
        batch.drop_column("max_active_jobs")
        batch.drop_column("webhook_secret")
    op.drop_table("webhook_attempts")
    op.drop_index("ix_jobs_callback_state_next", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("callback_next_at")
        batch.drop_column("callback_attempts")
        batch.drop_column("callback_state")
        batch.drop_column("callback_url")
