"""Queries on ``api_keys``; never commits."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.keys.models import ApiKey


def add_key(session: Session, key: ApiKey) -> ApiKey:
    """Stage a new key."""
    session.add(key)
    return key


def find_active_by_hash(session: Session, token_sha256: str) -> ApiKey | None:
    """The unrevoked key whose token hashes to ``token_sha256``."""
    stmt = select(ApiKey).where(ApiKey.token_sha256 == token_sha256, ApiKey.revoked_at.is_(None))
    return session.scalars(stmt).first()


def get_key(session: Session, key_id: str) -> ApiKey | None:
    """A key by its id, revoked or not."""
    return session.get(ApiKey, key_id)


def list_keys(session: Session) -> list[ApiKey]:
    """All keys, oldest first."""
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)))


def count_keys(session: Session) -> int:
    """How many keys exist (revoked included)."""
    return int(session.scalar(select(func.count()).select_from(ApiKey)) or 0)
