"""The MCP face mounted on the API at ``/mcp`` (streamable HTTP, stateless, JSON answers).

Each tool call goes through ``ideabench_client.AsyncClient`` into this same app in-process
(an ``httpx.ASGITransport``), with the caller's own bearer key: the MCP face can do exactly
what that key may do through REST, and nothing else. Requests without a valid key are
refused with 401 before the MCP layer sees them. DNS-rebinding protection is off: the API
authenticates every call with a bearer key, never with cookies or the client's address.
"""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from app.errors import HINTS, ApiCode

INTERNAL_URL = "http://ideabench.internal"
PATH = "/mcp"


def _bearer(headers: Any) -> str | None:
    value = str((headers or {}).get("authorization", ""))
    return value[7:].strip() or None if value.lower().startswith("bearer ") else None


class _Gate:
    """An ASGI app (a class, so Starlette routes to it as one): the key check, then MCP."""

    def __init__(self, app: FastAPI, inner: Any) -> None:
        self.app, self.inner = app, inner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        token = _bearer(headers)
        cache = self.app.state.key_cache
        key = None
        if token:
            key = cache.cached(token) or await run_in_threadpool(cache.lookup, self.app.state.sessionmaker, token)
        if key is None:
            code = ApiCode.INVALID_API_KEY if token else ApiCode.MISSING_API_KEY
            response = JSONResponse(
                {"code": code.value, "message": "The MCP endpoint needs 'Authorization: Bearer <key>' "
                 "with a valid ideabench key.", "hint": HINTS[code]},
                status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        await self.inner(scope, receive, send)


def install_mcp(app: FastAPI) -> Any:
    """Route ``/mcp`` to the MCP server; returns it (the lifespan runs its session manager)."""
    from ideabench_client import AsyncClient
    from ideabench_client.mcp_server import build_server

    def client_for(ctx: Any) -> AsyncClient:
        return AsyncClient(INTERNAL_URL, _bearer(ctx.headers), retries=0,
                           transport=httpx.ASGITransport(app=app))

    server = build_server(client_for)
    inner = server.streamable_http_app(
        streamable_http_path=PATH, stateless_http=True, json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    app.router.routes.append(Route(PATH, endpoint=_Gate(app, inner), methods=["GET", "POST", "DELETE"],
                                   include_in_schema=False))
    return server
