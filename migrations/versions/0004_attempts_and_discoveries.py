"""Attempt records and false-discovery accounting (issue 12): ``jobs.family``,
``reports.family`` / ``baseline`` / ``p_helps``, backfilled on stored rows.

- ``family``: the idea family of the job's code (``bench.family``, scheme ast-v1).
- ``baseline``: ``canonical``, or ``matched:`` and 16 hex digits of the matched baseline's
  sha256 (what the idea was compared against: q-values are also given per baseline).
- ``p_helps``: the one-sided exact p that the idea helps. Reports stored before the
  confirmation stage existed get their screening's, computed from the stored per-seed
  differences (``bench.stats``), exactly as the engine computes it now.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def baseline_label(baseline_code: str | None) -> str:
    """``canonical`` or ``matched:<sha256[:16]>`` (``app.reports.service`` uses the same rule)."""
    if baseline_code is None:
        return "canonical"
    return "matched:" + hashlib.sha256(baseline_code.encode()).hexdigest()[:16]


def _p_helps(body: dict[str, Any]) -> float | None:
    from bench.stats import paired_sign_flip_p

    bench = body.get("bench_report") or {}
    if isinstance(bench.get("p_helps"), int | float):
        return float(bench["p_helps"])
    diffs = (bench.get("comparison") or {}).get("per_seed_diffs")
    if not diffs:
        return None
    lower = not str(bench.get("metric_direction", "lower")).startswith("higher")
    p, _ = paired_sign_flip_p(diffs, alternative="less" if lower else "greater")
    return p


def upgrade() -> None:
    # Plain ALTERs (SQLite has ADD and DROP COLUMN natively): a batch copy of ``jobs`` would
    # drop a table that stored reports still reference.
    op.add_column("jobs", sa.Column("family", sa.String(length=40), nullable=True))
    op.create_index("ix_jobs_track_family_created", "jobs", ["track", "family", "created_at"])
    op.add_column("reports", sa.Column("family", sa.String(length=40), nullable=True))
    op.add_column("reports", sa.Column("baseline", sa.String(length=40), nullable=True))
    op.add_column("reports", sa.Column("p_helps", sa.Float(), nullable=True))
    op.create_index("ix_reports_family_created", "reports", ["family", "created_at", "id"])
    op.create_index("ix_reports_track_p_helps", "reports", ["track", "p_helps"])

    from bench.family import family_of

    bind = op.get_bind()
    jobs = sa.table("jobs", sa.column("id", sa.String()), sa.column("idea_code", sa.Text()),
                    sa.column("baseline_code", sa.Text()), sa.column("family", sa.String()))
    reports = sa.table("reports", sa.column("id", sa.String()), sa.column("job_id", sa.String()),
                       sa.column("body", _JSON), sa.column("family", sa.String()),
                       sa.column("baseline", sa.String()), sa.column("p_helps", sa.Float()))
    known: dict[str, tuple[str, str]] = {}
    for job_id, code, baseline_code in bind.execute(sa.select(jobs.c.id, jobs.c.idea_code, jobs.c.baseline_code)):
        family = family_of(code)
        known[job_id] = (family, baseline_label(baseline_code))
        bind.execute(jobs.update().where(jobs.c.id == job_id).values(family=family))
    for report_id, job_id, body in bind.execute(sa.select(reports.c.id, reports.c.job_id, reports.c.body)).all():
        family, baseline = known.get(job_id, (None, None))
        bind.execute(reports.update().where(reports.c.id == report_id).values(
            family=family, baseline=baseline, p_helps=_p_helps(body or {})))


def downgrade() -> None:
    op.drop_index("ix_reports_track_p_helps", table_name="reports")
    op.drop_index("ix_reports_family_created", table_name="reports")
    for column in ("p_helps", "baseline", "family"):
        op.drop_column("reports", column)
    op.drop_index("ix_jobs_track_family_created", table_name="jobs")
    op.drop_column("jobs", "family")
