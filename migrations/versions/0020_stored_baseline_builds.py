"""A custom track keeps its validated baseline build (issue 25, session 22): ``custom_tracks``
gains ``baseline_build``, the graphs and tensors validation captured and checked
(``bench.captured.pack_build``). A job trains that build as the baseline of every seed and
never runs the track file's ``build_baseline`` to build one; the build is validation's in any
seed epoch, so a rotation no longer stops the track's verdicts from counting.

Tracks validated before this revision have none (their author's code builds the baseline at
validation's seed, as before). A downgrade drops the column.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("custom_tracks") as batch:
        batch.add_column(sa.Column("baseline_build", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("custom_tracks") as batch:
        batch.drop_column("baseline_build")
