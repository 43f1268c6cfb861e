"""One meaning for ``partial`` (PROTOCOL.md section 5, changed): a report with no mechanism
declared is ``worked`` when the idea helps, else ``failed``, never ``partial``.

A data migration: the stored reports with no mechanism (``mechanism_ok`` null) that the old
rule called ``partial`` become ``failed``, in their indexed column and in their JSON body
(``system_verdict`` and the summary's last sentence), and the verdict rollup is recounted
from the reports so ``/v1/verdicts/summary`` agrees with the listing. The old rule called
every such non-helping report ``partial``, so the downgrade restores it exactly.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
reports = sa.table(
    "reports",
    sa.column("id", sa.String()),
    sa.column("track", sa.String()),
    sa.column("system_verdict", sa.String()),
    sa.column("practical_verdict", sa.String()),
    sa.column("mechanism_ok", sa.Boolean()),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("body", _JSON),
)
verdict_counts = sa.table(
    "verdict_counts",
    sa.column("day", sa.Date()),
    sa.column("week", sa.Date()),
    sa.column("track", sa.String()),
    sa.column("system_verdict", sa.String()),
    sa.column("practical_verdict", sa.String()),
    sa.column("n", sa.Integer()),
)


def _relabel(body: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    body = dict(body)
    body["system_verdict"] = new
    summary = body.get("summary")
    if isinstance(summary, str) and summary.endswith(f"System verdict: {old}."):
        body["summary"] = summary[: -len(f"{old}.")] + f"{new}."
    return body


def _move(old: str, new: str) -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(reports.c.id, reports.c.body).where(
            reports.c.mechanism_ok.is_(None),
            reports.c.system_verdict == old,
            reports.c.practical_verdict != "helps",
        )
    ).all()
    for report_id, body in rows:
        bind.execute(
            reports.update().where(reports.c.id == report_id)
            .values(system_verdict=new, body=_relabel(body or {}, old, new))
        )
    _recount()


def _day(value: Any) -> dt.date:
    if isinstance(value, str):  # SQLite hands back text through a bare table()
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    return value.date()


def _recount() -> None:
    """Rebuild ``verdict_counts`` from the reports (the rollup the summary reads)."""
    bind = op.get_bind()
    counts: Counter[tuple[dt.date, str, str, str]] = Counter()
    for track, system, practical, created in bind.execute(
        sa.select(reports.c.track, reports.c.system_verdict, reports.c.practical_verdict, reports.c.created_at)
    ):
        counts[(_day(created), track, system, practical)] += 1
    bind.execute(verdict_counts.delete())
    if counts:
        bind.execute(verdict_counts.insert(), [
            {"day": day, "week": day - dt.timedelta(days=day.weekday()), "track": track,
             "system_verdict": system, "practical_verdict": practical, "n": n}
            for (day, track, system, practical), n in sorted(counts.items())
        ])


def upgrade() -> None:
    _move("partial", "failed")


def downgrade() -> None:
    _move("failed", "partial")
