"""Proving a worker's seed secret against the database's record of the deployment's epochs.

Every worker of a deployment must judge under one secret (PROTOCOL.md 2.5): a worker whose
key differs (its own ``seed_secret.json`` on a local volume, a mistyped
``IDEABENCH_SEED_SECRET``) would draw other splits and task constants while its reports say
the same epoch. The first worker to judge under an epoch records its commitment here; every
worker proves its own against it at start and before each job, and one that differs, or
whose epoch a newer one has replaced, judges nothing (issue 28.1)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db import db_now
from app.seeds.models import SeedEpoch


def prove(session: Session, block: dict[str, Any]) -> str | None:
    """None when ``block`` (``SeedSecret.report_block()``: scheme, epoch, commitment) is the
    deployment's current epoch; else why this worker must not judge. Records an epoch seen
    for the first time (retiring older ones); the caller commits."""
    epoch, commitment, scheme = int(block["epoch"]), str(block["commitment"]), str(block["scheme"])
    row = session.get(SeedEpoch, epoch)
    if row is None:
        now = db_now(session)
        try:
            with session.begin_nested():  # two workers starting at once: one row wins
                session.add(SeedEpoch(epoch=epoch, scheme=scheme, commitment=commitment, created_at=now))
        except IntegrityError:
            pass
        row = session.get(SeedEpoch, epoch, populate_existing=True)
        assert row is not None
        if row.commitment == commitment:
            session.execute(update(SeedEpoch).where(SeedEpoch.epoch < epoch, SeedEpoch.retired_at.is_(None))
                            .values(retired_at=now))
    if row.commitment != commitment or row.scheme != scheme:
        return (f"this worker's seed secret is not the deployment's for epoch {epoch} (recorded commitment "
                f"{row.commitment[:12]}..., this worker's {commitment[:12]}...): it would judge on other data")
    newest = session.scalar(select(func.max(SeedEpoch.epoch)))
    if newest is not None and newest > epoch:
        return f"this worker's seed epoch {epoch} was replaced by epoch {newest}"
    return None
