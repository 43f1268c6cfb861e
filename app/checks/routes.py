"""Routes: check an idea before the queue, read a check."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from app.checks import service
from app.checks.models import CheckStatus
from app.checks.schemas import CheckView, IdeaCheckRequest
from app.errors import error_responses
from app.keys.deps import SubmitterDep

router = APIRouter(tags=["checks"], responses=error_responses(401, 403, 429))

Wait = Annotated[float, Query(ge=0, le=60, description=(
    "Seconds to wait for the check to end before answering (it usually takes a few)."))]


async def _answer(request: Request, response: Response, caller: SubmitterDep, check_id: str, wait: float
                  ) -> CheckView:
    sessions = request.app.state.sessionmaker
    # no answer held longer than the service's long-poll limit (as GET /v1/jobs/{id}?wait=)
    deadline = time.monotonic() + min(wait, request.app.state.settings.long_poll_max_s)

    def read() -> CheckView:
        with sessions() as session:
            return service.view(service.get(session, caller, check_id))

    while True:
        found = await run_in_threadpool(read)
        if CheckStatus(found.status).ended or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.2)
    response.status_code = 200 if CheckStatus(found.status).ended else 202
    response.headers["Location"] = found.links.self
    return found


@router.post("/v1/ideas/check", response_model=CheckView, status_code=200,
             responses={202: {"model": CheckView, "description": "Not ended within `wait`: poll its link."},
                        **error_responses(409, 413, 422)})
async def check_idea(body: IdeaCheckRequest, caller: SubmitterDep, request: Request, response: Response,
                     wait: Wait = 30.0) -> CheckView:
    """Check an idea before submitting it: the static checks at once (422 with the error a
    submission would get), then a worker captures both arms in the sandbox and checks what a job
    checks before it trains (the op allowlist, configs, parameter, buffer and compute parity,
    output shapes, the mechanism's probe), with no training, in seconds. 200 with ``passed`` (and
    what it found) or ``failed`` (and the error a job would end with); 202 while it runs.
    Nothing of a job's seeds is used; a check makes no job."""
    settings = request.app.state.settings

    def create() -> str:
        with request.app.state.sessionmaker() as session:
            row = service.create(session, caller, body, settings)
            session.commit()
            return row.id

    check_id = await run_in_threadpool(create)
    return await _answer(request, response, caller, check_id, wait)


@router.get("/v1/checks/{check_id}", response_model=CheckView,
            responses={202: {"model": CheckView, "description": "Still pending or running."},
                       **error_responses(404)})
async def get_check(check_id: str, caller: SubmitterDep, request: Request, response: Response,
                    wait: Wait = 0.0) -> CheckView:
    """One check of this key; ``?wait=N`` long-polls until it ends."""
    return await _answer(request, response, caller, check_id, wait)
