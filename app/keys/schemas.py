"""Request and response bodies of the key routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.keys.models import ApiKey
from app.keys.roles import Role


class KeyCreate(BaseModel):
    """A new key's role and an optional label."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"role": "agent", "name": "research-agent-1"}]}
    )

    role: Role
    name: str | None = Field(default=None, max_length=200)


class KeyView(BaseModel):
    """A key as listed: never the secret."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "key_1a2b3c4d",
                    "name": "research-agent-1",
                    "role": "agent",
                    "created_at": "2025-05-01T12:00:00Z",
                    "revoked_at": None,
                }
            ]
        }
    )

    id: str
    name: str | None
    role: Role
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, key: ApiKey) -> KeyView:
        """From the table row."""
        return cls(
            id=key.id, name=key.name, role=Role(key.role), created_at=key.created_at, revoked_at=key.revoked_at
        )


class KeyCreated(KeyView):
    """A new key with its secret token: shown once, store it now."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "key_1a2b3c4d",
                    "name": "research-agent-1",
                    "role": "agent",
                    "created_at": "2025-05-01T12:00:00Z",
                    "revoked_at": None,
                    "token": "ib_1a2b3c4d_Jp4m0c9wQ3a1Zq8lJk2fVb7nR5tXy0hG6sD1eU4iO3w",
                }
            ]
        }
    )

    token: str


class KeyList(BaseModel):
    """All keys."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {"id": "key_0f1e2d3c", "name": "first operator key (ideabench serve)", "role": "operator",
                         "created_at": "2025-05-01T11:58:00Z", "revoked_at": None},
                        {"id": "key_1a2b3c4d", "name": "research-agent-1", "role": "agent",
                         "created_at": "2025-05-01T12:00:00Z", "revoked_at": None},
                    ]
                }
            ]
        }
    )

    items: list[KeyView]
