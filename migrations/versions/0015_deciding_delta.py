"""A report's listed ``delta_mean`` is the deciding stage's (issue 27.7): the confirmation's when
one ran (it decided the verdict, and the report page shows it), else the screening's; the new
``delta_stage`` column says which. Before, the listing showed the screening's delta beside a
verdict the confirmation decided. The screening's delta stays in the body.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 1000


def deciding_delta(body: Any) -> tuple[float | None, str]:
    """(delta_mean, stage) of a stored report body (a dict, or its JSON text)."""
    if isinstance(body, str):
        body = json.loads(body)
    bench = body.get("bench_report") if isinstance(body, dict) else None
    bench = bench if isinstance(bench, dict) else {}
    stage, block = "screening", bench
    confirmation = bench.get("confirmation")
    if bench.get("decided_by") == "confirmation" and isinstance(confirmation, dict):
        stage, block = "confirmation", confirmation
    comparison = block.get("comparison")
    delta = comparison.get("delta_mean") if isinstance(comparison, dict) else None
    finite = isinstance(delta, int | float) and math.isfinite(delta)
    return (float(delta) if finite else None), stage


def upgrade() -> None:
    op.add_column("reports", sa.Column("delta_stage", sa.String(16), nullable=True))
    conn = op.get_bind()
    reports = sa.table("reports", sa.column("id", sa.String), sa.column("body", sa.JSON),
                       sa.column("delta_mean", sa.Float), sa.column("delta_stage", sa.String))
    last = ""
    while True:  # in batches by id, so a large table is not held in memory
        rows = conn.execute(sa.select(reports.c.id, reports.c.body).where(reports.c.id > last)
                            .order_by(reports.c.id).limit(BATCH)).all()
        if not rows:
            break
        for report_id, body in rows:
            delta, stage = deciding_delta(body)
            values: dict[str, Any] = {"delta_stage": stage}
            if stage == "confirmation":
                values["delta_mean"] = delta
            conn.execute(reports.update().where(reports.c.id == report_id).values(**values))
        last = rows[-1][0]


def downgrade() -> None:
    conn = op.get_bind()
    reports = sa.table("reports", sa.column("id", sa.String), sa.column("body", sa.JSON),
                       sa.column("delta_mean", sa.Float), sa.column("delta_stage", sa.String))
    rows = conn.execute(sa.select(reports.c.id, reports.c.body).where(reports.c.delta_stage == "confirmation")).all()
    for report_id, body in rows:  # back to the screening's delta
        bench = (json.loads(body) if isinstance(body, str) else body).get("bench_report") or {}
        delta = (bench.get("comparison") or {}).get("delta_mean")
        conn.execute(reports.update().where(reports.c.id == report_id).values(delta_mean=delta))
    with op.batch_alter_table("reports") as batch:
        batch.drop_column("delta_stage")
