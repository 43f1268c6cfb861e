"""Routes: liveness and readiness probes (no key needed)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict

from app.db import SessionDep, utcnow
from app.deps import QueueDep, SettingsDep
from app.errors import ApiCode, ApiError, error_responses
from app.health import repository

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """A probe's answer."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"status": "ready", "checks": {"database": True, "broker": True,
                                                                        "worker": True}}]}
    )

    status: str
    checks: dict[str, Any] = {}


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses=error_responses(503))
async def readyz(session: SessionDep, queue: QueueDep, settings: SettingsDep) -> Health:
    """Ready: the database and the broker answer, and a worker was seen recently."""
    checks: dict[str, Any] = {}
    try:
        checks["database"] = await run_in_threadpool(repository.database_ok, session)
        seen = await run_in_threadpool(repository.last_worker_seen, session)
    except Exception:
        checks["database"], seen = False, None
    checks["broker"] = await run_in_threadpool(queue.ping)
    checks["worker"] = seen is not None and utcnow() - seen < timedelta(seconds=settings.worker_seen_s)
    failing = sorted(name for name, ok in checks.items() if not ok)
    if failing:
        raise ApiError(503, ApiCode.NOT_READY, f"Not ready: {', '.join(failing)} not reachable.",
                       headers={"Retry-After": "5"})
    return Health(status="ready", checks=checks)
