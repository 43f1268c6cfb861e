"""Initial schema: api_keys, jobs, reports, verdict_counts, worker_beats.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("revoked_at", _ts(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_api_keys_token_sha256")),
    )
    op.create_table(
        "worker_beats",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("queue", sa.String(length=16), nullable=False),
        sa.Column("device", sa.String(length=32), nullable=False),
        sa.Column("started_at", _ts(), nullable=False),
        sa.Column("seen_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_worker_beats")),
    )
    op.create_index(op.f("ix_worker_beats_seen_at"), "worker_beats", ["seen_at"])

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("queue", sa.String(length=16), nullable=False),
        sa.Column("track", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("hypothesis", sa.Text(), nullable=True),
        sa.Column("idea_code", sa.Text(), nullable=False),
        sa.Column("baseline_code", sa.Text(), nullable=True),
        sa.Column("n_seeds", sa.Integer(), nullable=True),
        sa.Column("hparams", _json(), nullable=True),
        sa.Column("mechanism", _json(), nullable=True),
        sa.Column("submitter_id", sa.String(length=32), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("stage", sa.String(length=32), nullable=True),
        sa.Column("runs_done", sa.Integer(), nullable=False),
        sa.Column("runs_total", sa.Integer(), nullable=True),
        sa.Column("eta_s", sa.Float(), nullable=True),
        sa.Column("progress_message", sa.String(length=500), nullable=True),
        sa.Column("worker_id", sa.String(length=200), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_until", _ts(), nullable=True),
        sa.Column("heartbeat_at", _ts(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("error_hint", sa.Text(), nullable=True),
        sa.Column("report_id", sa.String(length=32), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("enqueued_at", _ts(), nullable=True),
        sa.Column("started_at", _ts(), nullable=True),
        sa.Column("finished_at", _ts(), nullable=True),
        sa.ForeignKeyConstraint(["submitter_id"], ["api_keys.id"], name=op.f("fk_jobs_submitter_id_api_keys")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("submitter_id", "idempotency_key", name="uq_jobs_submitter_idempotency"),
    )
    op.create_index("ix_jobs_created", "jobs", ["created_at", "id"])
    op.create_index("ix_jobs_status_queue_created", "jobs", ["status", "queue", "created_at"])
    op.create_index("ix_jobs_submitter_created", "jobs", ["submitter_id", "created_at", "id"])
    op.create_index("ix_jobs_track_created", "jobs", ["track", "created_at", "id"])

    op.create_table(
        "reports",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("track", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("submitter_id", sa.String(length=32), nullable=False),
        sa.Column("system_verdict", sa.String(length=16), nullable=False),
        sa.Column("practical_verdict", sa.String(length=16), nullable=False),
        sa.Column("practical_detail", sa.String(length=16), nullable=True),
        sa.Column("mechanism_ok", sa.Boolean(), nullable=True),
        sa.Column("worked", sa.Boolean(), nullable=False),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("delta_mean", sa.Float(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("body", _json(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_reports_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reports")),
        sa.UniqueConstraint("job_id", name=op.f("uq_reports_job_id")),
    )
    op.create_index("ix_reports_created", "reports", ["created_at", "id"])
    op.create_index("ix_reports_track_created", "reports", ["track", "created_at", "id"])
    op.create_index("ix_reports_system_created", "reports", ["system_verdict", "created_at", "id"])
    op.create_index("ix_reports_practical_created", "reports", ["practical_verdict", "created_at", "id"])
    op.create_index("ix_reports_submitter_created", "reports", ["submitter_id", "created_at", "id"])
    op.create_index("ix_reports_p_value", "reports", ["p_value", "id"])
    op.create_index("ix_reports_delta", "reports", ["delta_mean", "id"])
    op.create_table(
        "verdict_counts",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("track", sa.String(length=64), nullable=False),
        sa.Column("system_verdict", sa.String(length=16), nullable=False),
        sa.Column("practical_verdict", sa.String(length=16), nullable=False),
        sa.Column("week", sa.Date(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("day", "track", "system_verdict", "practical_verdict", name=op.f("pk_verdict_counts")),
    )


def downgrade() -> None:
    op.drop_table("verdict_counts")
    op.drop_table("reports")
    op.drop_table("jobs")
    op.drop_table("worker_beats")
    op.drop_table("api_keys")
