"""Reject request bodies over a byte limit with 413, before any parsing.

Checks ``Content-Length`` first, then counts the streamed bytes (chunked bodies
have no length): the body is buffered up to the limit and replayed to the app.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    """Pure ASGI middleware: 413 ``payload_too_large`` for bodies over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in {"GET", "HEAD", "OPTIONS", "DELETE"}:
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is None:
            await _reject(scope, send, 400, "bad_request", "Content-Length is not a valid integer.")
            return
        if length > self.max_bytes:
            await _reject_too_large(scope, send, length, self.max_bytes)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _reject_too_large(scope, send, size, self.max_bytes)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _content_length(scope: Scope) -> int | None:
    """The declared length; 0 when absent, None when malformed."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None
            return length if length >= 0 else None
    return 0


async def _reject_too_large(scope: Scope, send: Send, size: int, limit: int) -> None:
    await _reject(
        scope,
        send,
        413,
        "payload_too_large",
        f"The request body is {size} bytes or more; the limit is {limit}.",
        "Send a smaller body: one idea file under 64 KiB.",
    )


async def _reject(scope: Scope, send: Send, status: int, code: str, message: str, hint: str = "") -> None:
    from app.errors import problem
    from app.request_id import request_id_of

    body = {**problem(status, code, message, hint), "instance": scope.get("path")}
    if request_id_of(scope):
        body["request_id"] = request_id_of(scope)
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
