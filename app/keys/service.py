"""Key creation, lookup and revocation.

A token is ``ib_<id>_<secret>``: the id part is the key's visible id (shown in
listings and job records); the secret is 32 random bytes. Only sha256(token) is
stored, so a leaked database does not leak usable keys.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from app.db import utcnow
from app.keys import repository
from app.keys.models import ApiKey
from app.keys.roles import Role

TOKEN_PREFIX = "ib_"


@dataclass(frozen=True)
class NewKey:
    """A created key and its secret token (shown once)."""

    key: ApiKey
    token: str


def hash_token(token: str) -> str:
    """sha256 hex of the whole token."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_webhook_secret() -> str:
    """A Standard Webhooks signing secret: ``whsec_`` and 24 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def create_key(session: Session, role: Role | str, name: str | None = None) -> NewKey:
    """Stage a new key of ``role``; the caller commits."""
    key_id = "key_" + secrets.token_hex(4)
    token = f"{TOKEN_PREFIX}{key_id[4:]}_{secrets.token_urlsafe(32)}"
    key = ApiKey(id=key_id, name=name, role=Role(role).value, token_sha256=hash_token(token),
                 webhook_secret=new_webhook_secret())
    repository.add_key(session, key)
    return NewKey(key=key, token=token)


def revoke_key(session: Session, key_id: str) -> ApiKey | None:
    """Mark a key revoked (idempotent); None when it does not exist."""
    key = repository.get_key(session, key_id)
    if key is not None and key.revoked_at is None:
        key.revoked_at = utcnow()
    return key


@dataclass(frozen=True)
class KnownKey:
    """What authentication needs of a key, detached from any session."""

    id: str
    role: str
    max_active_jobs: int | None = None  # the key's overrides of the fair-use limits
    daily_job_quota: int | None = None


class KeyCache:
    """Recently authenticated keys by token hash, for ``ttl_s`` seconds.

    Saves a database round trip per request. A key revoked through the API is
    dropped at once in that process; elsewhere (the CLI, other API processes)
    revocation takes effect within ``ttl_s``.
    """

    def __init__(self, ttl_s: float = 5.0, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, KnownKey]] = {}
        self._lock = threading.Lock()

    def cached(self, token: str) -> KnownKey | None:
        """The key for ``token`` if it was checked within ``ttl_s``; no database access."""
        if len(token) > 200:
            return None
        with self._lock:
            hit = self._entries.get(hash_token(token))
        if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        return None

    def lookup(self, sessions: sessionmaker[Session], token: str) -> KnownKey | None:
        """The active key for ``token`` from the database (then cached), or None."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return None
        digest = hash_token(token)
        with sessions() as session:
            key = repository.find_active_by_hash(session, digest)
            known = None if key is None else KnownKey(id=key.id, role=key.role, max_active_jobs=key.max_active_jobs,
                                                      daily_job_quota=key.daily_job_quota)
        if known is not None:
            with self._lock:
                if len(self._entries) >= self.max_entries:
                    self._entries.clear()
                self._entries[digest] = (time.monotonic(), known)
        return known

    def clear(self) -> None:
        """Forget every cached key (after a revocation)."""
        with self._lock:
            self._entries.clear()
