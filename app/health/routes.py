"""Routes: liveness and readiness probes (no key needed)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from app.db import SessionDep
from app.deps import QueueDep, SettingsDep
from app.errors import ApiCode, ApiError, error_responses
from app.health import repository

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """A probe's answer."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"status": "ready", "checks": {
            "database": True, "broker": True, "worker": True, "sandbox": True},
            "sandboxes": {"host:4242": "complete"}}]}
    )

    status: str
    checks: dict[str, Any] = {}
    sandboxes: dict[str, str | None] | None = Field(default=None, description=(
        "What each worker seen recently found at its start: complete; weak: missing ... (judging "
        "under a development setting, reports not counted); refused: missing ... (judges nothing)."))


@router.get("/healthz", response_model=Health, response_model_exclude_none=True)
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


async def _reachable(session: SessionDep, queue: QueueDep) -> dict[str, Any]:
    checks: dict[str, Any] = {}
    try:
        checks["database"] = await run_in_threadpool(repository.database_ok, session)
    except Exception:
        checks["database"] = False
    checks["broker"] = await run_in_threadpool(queue.ping)
    failing = [name for name in ("database", "broker") if not checks[name]]
    if failing:
        raise ApiError(503, ApiCode.NOT_READY, f"Not ready: {', '.join(failing)} not reachable.",
                       headers={"Retry-After": "5"})
    return checks


@router.get("/readyz", response_model=Health, response_model_exclude_none=True, responses=error_responses(503))
async def readyz(session: SessionDep, queue: QueueDep) -> Health:
    """This API process is ready: its database and broker answer, so it can take and queue
    ideas (a load balancer's probe: the API's readiness does not hang on the workers'; whether a
    worker may judge is ``/readyz/judging``)."""
    return Health(status="ready", checks=await _reachable(session, queue))


@router.get("/readyz/judging", response_model=Health, responses=error_responses(503))
async def judging(session: SessionDep, queue: QueueDep, settings: SettingsDep) -> Health:
    """The service judges: the API is ready, a worker was seen recently, and one of those may
    judge (a worker without its sandbox layers, its device or the deployment's seed secret
    judges nothing: it fails closed). Jobs submitted meanwhile wait queued."""
    checks = await _reachable(session, queue)
    sandboxes = await run_in_threadpool(repository.sandboxes_seen, session, settings.worker_seen_s)
    checks["worker"] = bool(sandboxes)
    checks["sandbox"] = any(repository.judges(state) for state in sandboxes.values())
    if not checks["worker"]:
        raise ApiError(503, ApiCode.NOT_READY, "Not judging: no worker seen in the last "
                       f"{settings.worker_seen_s:g} s.", "An operator starts a worker (ideabench worker; "
                       "docs/deploy.md); submitted jobs wait queued meanwhile.", headers={"Retry-After": "5"})
    if not checks["sandbox"]:
        states = "; ".join(f"{worker}: {state or 'not recorded'}" for worker, state in sorted(sandboxes.items()))
        raise ApiError(503, ApiCode.NOT_READY, f"Not judging: no worker may judge ({states}).",
                       "An operator installs bubblewrap and libseccomp on the workers (scripts/system_deps.sh) "
                       "and gives each the deployment's seed secret (docs/deploy.md), then restarts them.",
                       headers={"Retry-After": "5"})
    return Health(status="judging", checks=checks, sandboxes=sandboxes)
