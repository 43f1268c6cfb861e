"""Authentication dependencies: the caller behind ``Authorization: Bearer KEY``.

Routes declare who may call them with one of the ``Annotated`` aliases below,
e.g. ``caller: SubmitterDep``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.errors import ApiCode, ApiError
from app.keys import service
from app.keys.roles import Role

_bearer = HTTPBearer(auto_error=False, description="An ideabench API key: `ib_...`")
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


@dataclass(frozen=True)
class Caller:
    """The authenticated key: its id, role and overrides of the fair-use limits (None: the
    service's settings)."""

    key_id: str
    role: Role
    max_active_jobs: int | None = None
    daily_job_quota: int | None = None

    @property
    def is_operator(self) -> bool:
        return self.role is Role.OPERATOR


async def authenticate(request: Request, credentials: BearerDep) -> Caller:
    """The caller, or 401 ``missing_api_key`` / ``invalid_api_key``.

    Async: a recently seen key is answered from the cache without a thread hop;
    otherwise the lookup runs in the thread pool on its own short session.
    """
    if credentials is None or not credentials.credentials:
        raise ApiError(401, ApiCode.MISSING_API_KEY, "No API key: send 'Authorization: Bearer <key>'.")
    cache: service.KeyCache = request.app.state.key_cache
    token = credentials.credentials
    key = cache.cached(token)
    if key is None:
        key = await run_in_threadpool(cache.lookup, request.app.state.sessionmaker, token)
    if key is None:
        raise ApiError(401, ApiCode.INVALID_API_KEY, "The API key is unknown or revoked.")
    caller = Caller(key_id=key.id, role=Role(key.role), max_active_jobs=key.max_active_jobs,
                    daily_job_quota=key.daily_job_quota)
    if not caller.is_operator:
        await request.app.state.fair_use.check_rate(key.id)  # 429 rate_limited over the key's rate
    return caller


CallerDep = Annotated[Caller, Depends(authenticate)]


def require_role(*roles: Role) -> Callable[[Caller], Awaitable[Caller]]:
    """A dependency that admits only ``roles`` (403 ``forbidden_role`` otherwise)."""
    allowed = frozenset(roles)

    async def check(caller: CallerDep) -> Caller:
        if caller.role not in allowed:
            names = ", ".join(sorted(r.value for r in allowed))
            raise ApiError(
                403,
                ApiCode.FORBIDDEN_ROLE,
                f"A {caller.role.value} key may not call this route; it needs one of: {names}.",
            )
        return caller

    return check


ReaderDep = Annotated[Caller, Depends(require_role(Role.AGENT, Role.OPERATOR, Role.VIEWER))]
SubmitterDep = Annotated[Caller, Depends(require_role(Role.AGENT, Role.OPERATOR))]
OperatorDep = Annotated[Caller, Depends(require_role(Role.OPERATOR))]
