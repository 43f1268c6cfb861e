"""Every error the API returns: an RFC 9457 problem (``application/problem+json``: ``type``,
``title``, ``status``, ``detail``, ``instance``) that keeps ``{"code", "message", "hint"}``
and the request's ``request_id``, with a fitting status; validation errors list each field
in ``errors``.

Codes of failed ideas come from ``bench.errors.ErrorCode``; the codes below are
the service's own (authentication, paging, lookups). ``install_error_handlers``
replaces FastAPI's default handlers so no answer ever has another shape.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from enum import StrEnum
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from bench.errors import BenchError, ErrorCode

log = logging.getLogger("ideabench.api")


class ApiCode(StrEnum):
    """The service's own error codes (stable)."""

    VALIDATION_ERROR = "validation_error"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    BAD_REQUEST = "bad_request"
    BAD_CURSOR = "bad_cursor"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    JOB_NOT_FOUND = "job_not_found"
    JOB_FINISHED = "job_finished"
    REPORT_NOT_FOUND = "report_not_found"
    REPORT_NOT_READY = "report_not_ready"
    KEY_NOT_FOUND = "key_not_found"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    INVALID_COMPARISON = "invalid_comparison"
    MISSING_API_KEY = "missing_api_key"
    INVALID_API_KEY = "invalid_api_key"
    FORBIDDEN_ROLE = "forbidden_role"
    NOT_OWNER = "not_owner"
    TOO_MANY_VALIDATIONS = "too_many_validations"
    TOO_MANY_CHECKS = "too_many_checks"
    CHECK_NOT_FOUND = "check_not_found"
    N_SEEDS_FIXED = "n_seeds_fixed"
    NO_GPU_WORKER = "no_gpu_worker"
    INVALID_CALLBACK_URL = "invalid_callback_url"
    RATE_LIMITED = "rate_limited"
    TOO_MANY_JOBS = "too_many_jobs"
    DAILY_QUOTA = "daily_quota"
    SIGN_IN_REQUIRED = "sign_in_required"
    CSRF_FAILED = "csrf_failed"
    NOT_READY = "not_ready"
    DATABASE_UNAVAILABLE = "database_unavailable"
    INTERNAL = "internal"


HINTS: dict[str, str] = {
    ApiCode.VALIDATION_ERROR: "Fix the named field; GET /docs shows every request schema with an example.",
    ApiCode.PAYLOAD_TOO_LARGE: "Send a smaller body: one idea file under 64 KiB.",
    ApiCode.BAD_REQUEST: "Check the request's headers and body.",
    ApiCode.BAD_CURSOR: "Pass back next_cursor exactly as a previous page returned it, with the same sort.",
    ApiCode.NOT_FOUND: "See GET /docs for the API's routes (they live under /v1).",
    ApiCode.METHOD_NOT_ALLOWED: "See GET /docs for the methods each route accepts.",
    ApiCode.JOB_NOT_FOUND: "List your jobs with GET /v1/jobs.",
    ApiCode.NO_GPU_WORKER: "Submit without device (or with device cpu), or ask an operator to start a GPU worker "
    "(docs/deploy.md).",
    ApiCode.JOB_FINISHED: "The job already ended; nothing to cancel.",
    ApiCode.REPORT_NOT_FOUND: "List reports with GET /v1/reports.",
    ApiCode.REPORT_NOT_READY: "Poll GET /v1/jobs/{job_id} until its status is succeeded.",
    ApiCode.KEY_NOT_FOUND: "List keys with GET /v1/keys.",
    ApiCode.IDEMPOTENCY_CONFLICT: "Use a new Idempotency-Key for a different submission.",
    ApiCode.INVALID_COMPARISON: "Send two equally long lists of finite numbers, at least 2 pairs.",
    ApiCode.MISSING_API_KEY: "Send the header 'Authorization: Bearer <key>'; an operator creates keys "
    "with `ideabench keys create --role agent`.",
    ApiCode.INVALID_API_KEY: "The key is unknown or revoked; ask an operator for a valid one.",
    ApiCode.SIGN_IN_REQUIRED: "Open /dashboard/login and sign in with a viewer, agent or operator key.",
    ApiCode.CSRF_FAILED: "Reload the dashboard page and submit its form again.",
    ApiCode.FORBIDDEN_ROLE: "Use a key whose role allows this route (see docs/api.md, Roles).",
    ApiCode.NOT_OWNER: "Only the author of a resource (or an operator) may change it.",
    ApiCode.TOO_MANY_VALIDATIONS: "Wait until one of your tracks leaves status validating (poll "
    "GET /v1/tracks?kind=custom&status=validating), then register again.",
    ApiCode.TOO_MANY_CHECKS: "Wait for your open checks to end (GET /v1/checks/{check_id}?wait=30), then "
    "check again.",
    ApiCode.CHECK_NOT_FOUND: "Use the check_id a POST /v1/ideas/check answered with (checks are kept per key).",
    ApiCode.N_SEEDS_FIXED: "Leave n_seeds unset: it is fixed per track (GET /v1/tracks/{name}, "
    "defaults.n_seeds), so a re-roll cannot change the test; only an operator may set it.",
    ApiCode.INVALID_CALLBACK_URL: "Give a public http(s) URL without credentials (no localhost or private "
    "addresses), or leave callback_url out and wait with GET /v1/jobs/{job_id}?wait=60.",
    ApiCode.RATE_LIMITED: "Slow down: wait the seconds in Retry-After, then retry (the Python client "
    "does this for you).",
    ApiCode.TOO_MANY_JOBS: "Wait for some of your jobs to end (GET /v1/jobs?status=queued), then submit again.",
    ApiCode.DAILY_QUOTA: "Your key's jobs for today (UTC) are used up: retry after Retry-After, or ask an "
    "operator for a higher quota.",
    ApiCode.DATABASE_UNAVAILABLE: "The database was briefly unreachable and nothing was changed; retry after "
    "Retry-After (with the same Idempotency-Key for a submission; the Python client does this).",
    ApiCode.NOT_READY: "Start the database, the broker and a worker (`ideabench worker`).",
    ApiCode.INTERNAL: "This is a bug in ideabench; retry later and report it if it persists.",
}

# Engine codes that are not about the request body: the state of a track.
BENCH_STATUS = {
    ErrorCode.TRACK_NOT_READY: 409,
    ErrorCode.TRACK_DEPRECATED: 409,
    ErrorCode.TRACK_UNAVAILABLE: 409,
    ErrorCode.TRACK_NAME_TAKEN: 409,
    ErrorCode.MATCHED_BASELINE_UNSUPPORTED: 422,
}

_STATUS_CODES = {
    400: ApiCode.BAD_REQUEST,
    401: ApiCode.MISSING_API_KEY,
    403: ApiCode.FORBIDDEN_ROLE,
    404: ApiCode.NOT_FOUND,
    405: ApiCode.METHOD_NOT_ALLOWED,
    413: ApiCode.PAYLOAD_TOO_LARGE,
}


class FieldError(BaseModel):
    """One invalid field of a request (``validation_error``)."""

    field: str
    message: str
    type: str = ""


class ErrorBody(BaseModel):
    """The body of every error answer: an RFC 9457 problem with ``code``, ``message``, ``hint``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "/v1/docs/errors#invalid_code",
                    "title": "Unprocessable Entity",
                    "status": 422,
                    "detail": "The idea file does not compile: invalid syntax (line 3).",
                    "instance": "/v1/ideas",
                    "code": "invalid_code",
                    "message": "The idea file does not compile: invalid syntax (line 3).",
                    "hint": "Fix the Python error shown in the message.",
                    "request_id": "req_4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a99",
                }
            ]
        }
    )

    type: str = Field(default="about:blank", description="This code's entry in GET /v1/docs/errors.")
    title: str = ""
    status: int = 0
    detail: str = Field(default="", description="The same as message.")
    instance: str | None = Field(default=None, description="The request's path.")
    code: str
    message: str
    hint: str
    request_id: str | None = Field(default=None, description="The request's X-Request-ID.")
    errors: list[FieldError] | None = Field(default=None, description="validation_error: each invalid field.")


class ApiError(Exception):
    """An error answer: HTTP status plus code, message and hint."""

    def __init__(self, status: int, code: str, message: str, hint: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = str(code)
        self.message = message
        self.hint = hint if hint is not None else HINTS.get(self.code, "")
        self.headers = headers or {}

    @classmethod
    def from_bench(cls, exc: BenchError, status: int | None = None) -> ApiError:
        """The answer for an engine error: 422 unless ``status`` (or the code's own status) says otherwise."""
        status = status if status is not None else BENCH_STATUS.get(exc.code, 422)
        return cls(status, exc.code.value, exc.message, exc.hint)

    def response(self, request: Request | None = None, errors: list[dict[str, str]] | None = None) -> JSONResponse:
        """The answer: an RFC 9457 problem (``application/problem+json``) that keeps our
        ``code``, ``message`` and ``hint``, with the request's path and id when known."""
        body = problem(self.status, self.code, self.message, self.hint, request)
        if errors:
            body["errors"] = errors
        headers = {**({"WWW-Authenticate": "Bearer"} if self.status == 401 else {}), **self.headers} or None
        return JSONResponse(body, status_code=self.status, headers=headers, media_type=PROBLEM_JSON)


PROBLEM_JSON = "application/problem+json"


def problem(status: int, code: str, message: str, hint: str, request: Request | None = None) -> dict[str, Any]:
    """An RFC 9457 problem body: ``type`` (this code's entry in the error docs), ``title``,
    ``status``, ``detail``, ``instance``, plus ``code``, ``message``, ``hint``, ``request_id``."""
    body: dict[str, Any] = {
        "type": f"/v1/docs/errors#{code}", "title": _title(status), "status": status, "detail": message,
        "code": code, "message": message, "hint": hint,
    }
    if request is not None:
        body["instance"] = request.url.path
        request_id = getattr(request.state, "request_id", None)
        if request_id:
            body["request_id"] = request_id
    return body


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def error_response(status: int, code: str, message: str, hint: str | None = None,
                   request: Request | None = None) -> JSONResponse:
    """An error answer without raising."""
    return ApiError(status, code, message, hint).response(request)


def _describe_validation(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg', 'invalid')}" if loc else str(err.get("msg")))
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return exc.response(request)


async def _bench_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BenchError)
    return ApiError.from_bench(exc).response(request)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    fields = [{"field": ".".join(str(p) for p in err.get("loc", ())), "message": str(err.get("msg", "invalid")),
               "type": str(err.get("type", ""))} for err in exc.errors()[:50]]
    return ApiError(422, ApiCode.VALIDATION_ERROR, _describe_validation(exc)).response(request, fields)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _STATUS_CODES.get(exc.status_code, ApiCode.BAD_REQUEST)
    message = str(exc.detail) if exc.detail else "Request failed."
    if exc.status_code == 404:
        message = "No such route."
    response = error_response(exc.status_code, code, message, request=request)
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    if exc.status_code == 405:  # Starlette names the first route's methods; a path may have several
        response.headers["Allow"] = ", ".join(_methods_of(request))
    return response


def _methods_of(request: Request) -> list[str]:
    """The methods this path's resource accepts (RFC 9110's ``Allow``), from the OpenAPI
    schema's paths and the app's plain routes (``/mcp``, the docs): a literal path (``/v1/keys/me``)
    is its own resource, even where a template (``/v1/keys/{key_id}``) would match it too."""
    app = request.app
    table: tuple[dict[str, set[str]], list[tuple[re.Pattern[str], set[str]]]] | None = \
        getattr(app.state, "allow_table", None)
    if table is None:
        literal: dict[str, set[str]] = {}
        templated: list[tuple[re.Pattern[str], set[str]]] = []
        paths = {path: {m.upper() for m in ops} for path, ops in app.openapi().get("paths", {}).items()}
        for route in app.router.routes:
            if getattr(route, "methods", None) and isinstance(getattr(route, "path", None), str):
                paths.setdefault(route.path, set()).update(route.methods)
        for path, methods in paths.items():
            if "{" in path:
                templated.append((re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(path)) + "$"),
                                  methods))
            else:
                literal[path] = methods
        table = app.state.allow_table = (literal, templated)
    literal, templated = table
    path = request.url.path
    methods = literal.get(path) or set().union(*(m for pattern, m in templated if pattern.match(path)))
    return sorted(methods - {"HEAD"})


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s (request %s)", request.method, request.url.path,
                  getattr(request.state, "request_id", "-"), exc_info=exc)
    response = error_response(500, ApiCode.INTERNAL, "An internal error occurred.", request=request)
    request_id = getattr(request.state, "request_id", None)
    if request_id:  # a 500 is answered outside the middleware stack: the id is added here
        response.headers["X-Request-ID"] = request_id
    return response


def database_lost(exc: BaseException) -> bool:
    """A lost or refused database connection, or no free one in the pool (a 503 to retry),
    rather than a bad statement or row."""
    return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError) or (
        isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated)


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    """A lost or refused database connection (a restart, a failover, a killed backend), or none
    free in the pool within its timeout, is a 503 to retry, not a 500: the transaction was
    rolled back, and the pool drops the dead connection. Any other database error is a bug: a 500."""
    if not database_lost(exc):
        return await _internal_error(request, exc)
    log.warning("database unavailable on %s %s (request %s): %s", request.method, request.url.path,
                getattr(request.state, "request_id", "-"), type(exc).__name__)
    response = ApiError(503, ApiCode.DATABASE_UNAVAILABLE, "The database is unreachable right now.",
                        headers={"Retry-After": "1"}).response(request)
    request_id = getattr(request.state, "request_id", None)
    if request_id:
        response.headers["X-Request-ID"] = request_id
    return response


PAGE_PREFIX = "/dashboard"


def _paged(handler: Callable[[Request, Exception], Awaitable[Response]]
           ) -> Callable[[Request, Exception], Awaitable[Response]]:
    """``handler``, whose answer under ``/dashboard`` becomes the dashboard's error page (the same
    status, code, message and hint, as HTML) when the app has one (``app.state.error_page``)."""

    async def handle(request: Request, exc: Exception) -> Response:
        response = await handler(request, exc)
        render = getattr(request.app.state, "error_page", None)
        if render is None or not request.url.path.startswith(PAGE_PREFIX) or not isinstance(response, JSONResponse):
            return response
        page: Response = render(request, response.status_code, json.loads(bytes(response.body)))
        for name in ("Retry-After", "Allow", "X-Request-ID"):
            if name in response.headers:
                page.headers[name] = response.headers[name]
        return page

    return handle


def install_error_handlers(app: FastAPI) -> None:
    """Replace FastAPI's default handlers with ones that answer ``ErrorBody`` (a page under
    ``/dashboard``)."""
    app.add_exception_handler(ApiError, _paged(_api_error))
    app.add_exception_handler(BenchError, _paged(_bench_error))
    app.add_exception_handler(RequestValidationError, _paged(_validation_error))
    app.add_exception_handler(StarletteHTTPException, _paged(_http_error))
    app.add_exception_handler(sa_exc.DBAPIError, _paged(_database_error))
    app.add_exception_handler(sa_exc.TimeoutError, _paged(_database_error))  # the pool had no connection
    app.add_exception_handler(Exception, _paged(_internal_error))


def error_responses(*statuses: int) -> dict[int | str, dict[str, object]]:
    """OpenAPI ``responses`` entries documenting ``ErrorBody`` for ``statuses``."""
    descriptions = {
        400: "Bad request (e.g. bad_cursor)",
        401: "missing_api_key or invalid_api_key",
        403: "forbidden_role",
        404: "Not found (job_not_found, report_not_found, check_not_found, unknown_track, ...)",
        409: "Conflict (job_finished, report_not_ready, idempotency_conflict)",
        413: "payload_too_large",
        429: "Too many requests (rate_limited, too_many_jobs, daily_quota, too_many_validations, "
        "too_many_checks); "
        "see Retry-After",
        422: "validation_error or an idea error (invalid_code, missing_build_model, unknown_track, ...)",
        503: "not_ready or database_unavailable; see Retry-After",
    }
    return {s: {"model": ErrorBody, "description": descriptions.get(s, "Error")} for s in statuses}
