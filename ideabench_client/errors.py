"""Errors of the ideabench API as typed exceptions, each with the service's ``code`` and ``hint``."""

from __future__ import annotations

from typing import Any


class IdeabenchError(Exception):
    """An error answer of the API (or a job that ended without a report).

    ``code`` is the service's stable machine-readable code (e.g. ``invalid_code``,
    ``n_seeds_fixed``, ``job_not_found``), ``hint`` says what to do about it.
    """

    def __init__(self, code: str, message: str, hint: str = "", status: int | None = None,
                 body: Any = None) -> None:
        super().__init__(f"{code}: {message}" + (f" (hint: {hint})" if hint else ""))
        self.code = code
        self.message = message
        self.hint = hint
        self.status = status
        self.body = body


class AuthError(IdeabenchError):
    """401 or 403: a missing, unknown or revoked key, or a role that may not do this."""


class NotFound(IdeabenchError):
    """404: no such job, report or track (or not one this key may see)."""


class Conflict(IdeabenchError):
    """409: e.g. a report that is not ready, or an Idempotency-Key reused for another body."""


class InvalidRequest(IdeabenchError):
    """422 (or 413): the submission was refused before queuing; ``code`` says why."""


class RateLimited(IdeabenchError):
    """429: too many requests or jobs; retried by the client until its retries run out."""


class Unavailable(IdeabenchError):
    """503 (or an unreachable service): retried by the client until its retries run out."""


class JobFailed(IdeabenchError):
    """A job that ended ``errored`` (``failed`` on servers before it was renamed) or ``cancelled``:
    ``code`` is the job's error code."""

    def __init__(self, job: Any, code: str, message: str, hint: str = "") -> None:
        super().__init__(code, message, hint)
        self.job = job


_BY_STATUS: dict[int, type[IdeabenchError]] = {
    401: AuthError, 403: AuthError, 404: NotFound, 409: Conflict, 413: InvalidRequest,
    422: InvalidRequest, 429: RateLimited, 503: Unavailable,
}


def error_for(status: int, body: Any) -> IdeabenchError:
    """The typed exception of an error answer (``{code, message, hint}``, RFC 9457 or not)."""
    body_map = body if isinstance(body, dict) else {}
    code = str(body_map.get("code") or f"http_{status}")
    message = str(body_map.get("message") or body_map.get("detail") or body or f"HTTP {status}")
    hint = str(body_map.get("hint") or "")
    return _BY_STATUS.get(status, IdeabenchError)(code, message, hint, status, body)
