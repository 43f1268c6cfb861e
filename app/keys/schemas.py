"""Request and response bodies of the key routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from app.keys.models import ApiKey
from app.keys.roles import Role
from app.settings import Settings


class KeyCreate(BaseModel):
    """A new key's role and an optional label."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"role": "agent", "name": "research-agent-1"}]}
    )

    role: Role
    name: str | None = Field(default=None, max_length=200)


class EffectiveLimits(BaseModel):
    """The limits in force for a key (null: no cap)."""

    rate_limit: str = Field(description="Requests per key, e.g. 3000/minute (operators are exempt).")
    max_active_jobs: int | None = Field(description="Jobs queued or running at once (null: no cap).")
    daily_job_quota: int | None = Field(description="Jobs per UTC day (null: no quota).")

    @classmethod
    def of(cls, rate_limit: str, max_active_jobs: int, daily_job_quota: int) -> EffectiveLimits:
        """From the settings' and keys' numbers, where 0 means no cap (issue 27.9: an agent read
        ``daily_job_quota: 0`` as "none allowed")."""
        return cls(rate_limit=rate_limit, max_active_jobs=max_active_jobs or None,
                   daily_job_quota=daily_job_quota or None)

    @classmethod
    def for_key(cls, key: ApiKey, settings: Settings) -> EffectiveLimits:
        """The limits in force for ``key``: its overrides, else the service's settings; an
        operator's submissions meet no cap (app/jobs/intake.py), so both are null for it."""
        if key.role == Role.OPERATOR.value:
            return cls.of(settings.rate_limit, 0, 0)
        return cls.of(
            settings.rate_limit,
            settings.max_active_jobs_per_key if key.max_active_jobs is None else key.max_active_jobs,
            settings.daily_job_quota_per_key if key.daily_job_quota is None else key.daily_job_quota,
        )




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
                    "max_active_jobs": None,
                    "daily_job_quota": 200,
                    "limits": {"rate_limit": "3000/minute", "max_active_jobs": 50, "daily_job_quota": 200},
                }
            ]
        }
    )

    id: str
    name: str | None
    role: Role
    created_at: datetime
    revoked_at: datetime | None
    max_active_jobs: int | None = Field(default=None, description="This key's cap on jobs queued or running "
                                        "(None: the service's setting; 0: no cap).")
    daily_job_quota: int | None = Field(default=None, description="This key's jobs per UTC day (None: the "
                                        "service's setting; 0: no quota).")
    limits: EffectiveLimits = Field(description="The limits in force for this key, its overrides and the "
                                    "service's settings together (null: no cap).")

    @classmethod
    def of(cls, key: ApiKey, settings: Settings) -> KeyView:
        """From the table row."""
        return cls(
            id=key.id, name=key.name, role=Role(key.role), created_at=key.created_at, revoked_at=key.revoked_at,
            max_active_jobs=key.max_active_jobs, daily_job_quota=key.daily_job_quota,
            limits=EffectiveLimits.for_key(key, settings),
        )


class KeyLimitsUpdate(BaseModel):
    """An operator's overrides of one key's fair-use limits; a field sent as null goes back to the
    service's setting, a field left out is unchanged, 0 lifts the cap."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"daily_job_quota": 200}, {"max_active_jobs": None}]}
    )

    max_active_jobs: StrictInt | None = Field(default=None, ge=0, le=100_000)
    daily_job_quota: StrictInt | None = Field(default=None, ge=0, le=10_000_000)


class KeySelf(BaseModel):
    """The calling key: who it is, its limits and the secret that signs its webhooks."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "key_1a2b3c4d", "name": "research-agent-1", "role": "agent",
                    "limits": {"rate_limit": "3000/minute", "max_active_jobs": 50, "daily_job_quota": None},
                    "webhook_secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                }
            ]
        }
    )

    id: str
    name: str | None
    role: Role
    limits: EffectiveLimits
    webhook_secret: str = Field(description="Verify this key's webhooks with it (Standard Webhooks: "
                                "webhook-id, webhook-timestamp and webhook-signature headers; any "
                                "standardwebhooks library's Webhook(secret).verify(body, headers)).")


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
