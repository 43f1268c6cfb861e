"""Dashboard sign-in: an API key once, then a signed session cookie.

The cookie (``itsdangerous``, HMAC-SHA1 over a timestamped payload) holds the key's id and a
random CSRF token, never the key itself; it is ``HttpOnly``, ``SameSite=Lax`` (a link from
elsewhere opens a page signed in; no cross-site POST carries it), ``Secure`` over https, and
lasts ``dashboard_session_s``. Each page checks that the key still exists and
is not revoked, and takes its role from the database (a revoked key's session ends at once).

Every state-changing form (cancel, sign-out) carries the session's CSRF token in a hidden
field, compared in constant time; POSTs whose ``Origin`` names another site are refused too.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from app.errors import ApiCode, ApiError
from app.keys import repository as keys_repository
from app.keys.deps import Caller
from app.keys.roles import Role
from app.keys.service import KnownKey
from app.settings import Settings

COOKIE = "ideabench_session"
SECRET_FILE = "session_secret"
JOB_ROLES = frozenset({Role.AGENT, Role.OPERATOR})


def session_secret(settings: Settings) -> str:
    """The configured secret, else the data dir's ``session_secret`` (made on first use, 0600).
    Written whole to a temporary file and linked into place, so processes starting at once
    agree on one secret and none reads a half-written file."""
    configured = settings.session_secret.get_secret_value()
    if configured:
        return configured
    path = Path(settings.data_dir) / SECRET_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # atomic; fails when another process linked its own first
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


@dataclass(frozen=True)
class Viewer:
    """A signed-in dashboard user: the key behind the session and the session's CSRF token."""

    caller: Caller
    csrf: str

    @property
    def is_operator(self) -> bool:
        return self.caller.is_operator

    @property
    def sees_jobs(self) -> bool:
        """Agent and operator keys (``GET /v1/jobs`` is theirs); a viewer key reads reports only."""
        return self.caller.role in JOB_ROLES


class Sessions:
    """Issues and reads session cookies for one app."""

    def __init__(self, settings: Settings) -> None:
        self.max_age = settings.dashboard_session_s
        self.serializer = URLSafeTimedSerializer(session_secret(settings), salt="ideabench.dashboard.session")

    def issue(self, response: Response, key: KnownKey, secure: bool) -> None:
        """Set the cookie of a new session for ``key``."""
        value = self.serializer.dumps({"k": key.id, "c": secrets.token_urlsafe(24)})
        response.set_cookie(COOKIE, value, max_age=self.max_age, httponly=True, samesite="lax",
                            secure=secure, path="/dashboard")

    @staticmethod
    def clear(response: Response) -> None:
        response.delete_cookie(COOKIE, path="/dashboard", httponly=True, samesite="lax")

    def read(self, value: str) -> tuple[str, str] | None:
        """(key id, csrf token) of a valid, unexpired cookie, else None."""
        try:
            data = self.serializer.loads(value, max_age=self.max_age)
        except BadSignature:  # (SignatureExpired is one)
            return None
        if not isinstance(data, dict) or not isinstance(data.get("k"), str) or not isinstance(data.get("c"), str):
            return None
        return data["k"], data["c"]


def _active_key(request: Request, key_id: str) -> Caller | None:
    with request.app.state.sessionmaker() as session:
        key = keys_repository.get_key(session, key_id)
        if key is None or key.revoked_at is not None:
            return None
        return Caller(key_id=key.id, role=Role(key.role))


def sign_in_required() -> ApiError:
    return ApiError(401, ApiCode.SIGN_IN_REQUIRED, "Sign in with an API key to see the dashboard.")


async def current_viewer(request: Request) -> Viewer:
    """The signed-in user, or 401 ``sign_in_required`` (the dashboard answers it with a redirect
    to the sign-in page)."""
    sessions: Sessions = request.app.state.dashboard_sessions
    cookie = request.cookies.get(COOKIE)
    found = sessions.read(cookie) if cookie else None
    if found is None:
        raise sign_in_required()
    caller = await run_in_threadpool(_active_key, request, found[0])
    if caller is None:
        raise sign_in_required()
    if not caller.is_operator:  # the key's request rate counts its pages too, as the API's requests
        await request.app.state.fair_use.check_rate(caller.key_id)
    return Viewer(caller, found[1])


async def current_operator(viewer: Annotated[Viewer, Depends(current_viewer)]) -> Viewer:
    """The signed-in user if an operator, else 403 ``forbidden_role``."""
    if not viewer.is_operator:
        raise ApiError(403, ApiCode.FORBIDDEN_ROLE, "The operator page is for operator keys only.",
                       "Sign in with an operator key.")
    return viewer


async def current_submitter(viewer: Annotated[Viewer, Depends(current_viewer)]) -> Viewer:
    """The signed-in user if an agent or operator (who may read jobs, as in the API), else 403
    ``forbidden_role``."""
    if not viewer.sees_jobs:
        raise ApiError(403, ApiCode.FORBIDDEN_ROLE, "The job pages are for agent and operator keys.",
                       "Sign in with an agent or operator key; a viewer key reads the reports.")
    return viewer


def origin_of(request: Request) -> tuple[str, str]:
    """(scheme, host) browsers reach this service at: ``public_origin`` when set (behind a
    proxy), else the request's own."""
    public = request.app.state.settings.public_origin
    if public:
        parts = urlsplit(public)
        return parts.scheme, parts.netloc
    return request.url.scheme, request.url.netloc


def same_origin(request: Request) -> bool:
    """False when the request's ``Origin`` (or, lacking it, ``Referer``) names another site."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if not claimed or claimed == "null":
        return claimed != "null"
    parts = urlsplit(claimed)
    return (parts.scheme, parts.netloc) == origin_of(request)


def check_csrf(request: Request, viewer: Viewer, token: str) -> None:
    """403 ``csrf_failed`` unless ``token`` is the session's and the request comes from this site."""
    if not (same_origin(request) and hmac.compare_digest(token.encode(), viewer.csrf.encode())):
        raise ApiError(403, ApiCode.CSRF_FAILED, "The form's security token is missing or stale.")


ViewerDep = Annotated[Viewer, Depends(current_viewer)]
OperatorViewerDep = Annotated[Viewer, Depends(current_operator)]
SubmitterViewerDep = Annotated[Viewer, Depends(current_submitter)]
