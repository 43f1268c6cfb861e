"""``X-Request-ID`` on every response: the caller's (when it is a sane token) or a new one.

Pure ASGI, outermost: the id is in ``request.state.request_id`` for the handlers (error
bodies carry it) and in a context variable for log lines.
"""

from __future__ import annotations

import contextvars
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "x-request-id"
_VALID = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")
current: contextvars.ContextVar[str | None] = contextvars.ContextVar("ideabench_request_id", default=None)


def request_id_of(scope: Scope) -> str | None:
    """The id a request was given (None outside a request)."""
    state = scope.get("state") or {}
    value = state.get("request_id") if isinstance(state, dict) else None
    return value if isinstance(value, str) else None


class RequestId:
    """Accept or make the request's id; echo it on the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.decode("latin-1").lower() == HEADER),
                     "")
        request_id = given if _VALID.match(given) else f"req_{uuid.uuid4().hex}"
        scope.setdefault("state", {})["request_id"] = request_id
        token = current.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current.reset(token)
