"""A report's stream (issues 25.4 and 28.1): the track version, seed epoch and device class it
was judged under, and whether its track evaluates public data, as columns read from its body.
q-values and discoveries are counted per (track, version, epoch, device class); reports on
public data enter none (a file can embed what they evaluate).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 1000


def stream_of(body: Any) -> dict[str, Any]:
    """The stream columns of a stored report body (a dict, or its JSON text)."""
    if isinstance(body, str):
        body = json.loads(body)
    bench = body.get("bench_report") if isinstance(body, dict) else None
    bench = bench if isinstance(bench, dict) else {}
    version, commitment = bench.get("track_version"), bench.get("seed_commitment")
    epoch = commitment.get("epoch") if isinstance(commitment, dict) else None
    device = str(bench.get("device") or "cpu").partition(":")[0][:16]
    return {"track_version": version if isinstance(version, int) else None,
            "seed_epoch": epoch if isinstance(epoch, int) else None,
            "device_class": device, "public_data": bench.get("public_data") is True}


def upgrade() -> None:
    op.add_column("reports", sa.Column("track_version", sa.Integer(), nullable=True))
    op.add_column("reports", sa.Column("seed_epoch", sa.Integer(), nullable=True))
    op.add_column("reports", sa.Column("device_class", sa.String(16), server_default="cpu", nullable=False))
    op.add_column("reports", sa.Column("public_data", sa.Boolean(), server_default=sa.false(), nullable=False))
    conn = op.get_bind()
    reports = sa.table("reports", sa.column("id", sa.String), sa.column("body", sa.JSON),
                       sa.column("track_version", sa.Integer), sa.column("seed_epoch", sa.Integer),
                       sa.column("device_class", sa.String), sa.column("public_data", sa.Boolean))
    last = ""
    while True:  # in batches by id, so a large table is not held in memory
        rows = conn.execute(sa.select(reports.c.id, reports.c.body).where(reports.c.id > last)
                            .order_by(reports.c.id).limit(BATCH)).all()
        if not rows:
            break
        for report_id, body in rows:
            conn.execute(reports.update().where(reports.c.id == report_id).values(**stream_of(body)))
        last = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("reports") as batch:
        for column in ("public_data", "device_class", "seed_epoch", "track_version"):
            batch.drop_column(column)
