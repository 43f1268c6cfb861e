"""Job-end webhooks: the URL policy, the signed message and the delivery state.

A submission with ``callback_url`` makes a job whose ``callback_state`` is ``pending``. Once
the job has ended, by whichever path (worker, cancel, reconciler), an API process's sender
(``app.webhooks.sender``) claims the next attempt with a compare-and-set on
``callback_attempts``, POSTs the message and records the attempt in ``webhook_attempts``;
the job becomes ``delivered`` on a 2xx answer, ``failed`` on a refusal, a 410, or once the
retries (``webhook_retry_s``) are spent, and stays ``pending`` with the next time otherwise.
Several API processes may send at once: each attempt is claimed by exactly one.

The message follows Standard Webhooks (https://www.standardwebhooks.com): headers
``webhook-id`` (the same on every retry: deduplicate on it), ``webhook-timestamp`` and
``webhook-signature`` (``v1,`` and an HMAC-SHA256 by the ``standardwebhooks`` package, keyed
by the submitting key's secret: GET /v1/keys/me); the body is
``{"type": "job.succeeded", "timestamp": ..., "data": <the events stream's end event>}``.

The URL is an agent's, so it is not trusted: only http(s), no credentials in it, and unless
an operator sets ``webhook_allow_private``, no host that is or resolves to a loopback,
private, link-local or otherwise non-global address (a server-side request forgery would
reach the database or a cloud's metadata service). The address checked is the address
connected to (the request is pinned to it), so a name that re-resolves cannot slip past.
Redirects are not followed.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select, update
from sqlalchemy.orm import Session
from standardwebhooks.webhooks import Webhook

from app.jobs.events import end_data
from app.jobs.models import FINISHED, Job, WebhookAttempt
from app.jobs.schemas import JobCallback, WebhookDelivery
from app.keys.models import ApiKey

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
CLAIM_S = 120.0  # an attempt claimed by a sender that then died is retried after this
_BLOCKED_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa")


class CallbackRefused(ValueError):
    """A callback URL the policy refuses (the message says why)."""


def check_url(url: str, *, allow_private: bool) -> None:
    """The checks a submission's ``callback_url`` must pass before the job is made (names are
    resolved only at delivery, where the address is pinned)."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError as exc:  # "http://[::1": an unclosed IPv6 bracket
        raise CallbackRefused(f"callback_url is not a URL: {exc}.") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise CallbackRefused("callback_url must be an absolute http:// or https:// URL.")
    try:
        hostname.encode("idna")  # what the resolver will do with it ("a..b" has an empty label)
    except UnicodeError:
        raise CallbackRefused(f"callback_url's host {hostname[:80]!r} is not a valid host name.") from None
    if parts.username is not None or parts.password is not None:
        raise CallbackRefused("callback_url may not carry credentials; authenticate the webhook by its "
                              "signature instead.")
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise CallbackRefused(f"callback_url has a bad port: {exc}.") from None
    if allow_private:
        return
    host = hostname.rstrip(".").lower()
    if host == "localhost" or host.endswith(_BLOCKED_SUFFIXES):
        raise CallbackRefused(f"callback_url's host {host!r} is local to the service.")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return
    if not is_public(address):
        raise CallbackRefused(f"callback_url's address {host} is not a public address.")


_EMBEDDING_V4 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"),
                 ipaddress.ip_network("::/96"))  # NAT64 and IPv4-compatible: an IPv4 inside
_NOT_PUBLIC = (ipaddress.ip_network("192.0.0.0/24"), ipaddress.ip_network("fec0::/10"))


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether a webhook may connect to ``address``: a global address, none of the ranges
    ``is_global`` lets through (the IETF protocol block, deprecated site-local IPv6), and no
    IPv6 address that carries a non-public IPv4 one (mapped, 6to4, NAT64, IPv4-compatible)."""
    if not address.is_global or any(address in net for net in _NOT_PUBLIC if net.version == address.version):
        return False
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and any(address in net for net in _EMBEDDING_V4):
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            return is_public(inner)
    return True


def resolve(url: str, *, allow_private: bool) -> str:
    """The address to connect to for ``url``: its first, once every address its host resolves
    to is public (or ``allow_private``); raises ``CallbackRefused``."""
    check_url(url, allow_private=allow_private)
    parts = urlsplit(url)
    assert parts.hostname is not None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise CallbackRefused(f"callback_url's host does not resolve ({exc}).") from None
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    if not allow_private:
        bad = [str(a) for a in addresses if not is_public(a)]
        if bad:
            raise CallbackRefused(f"callback_url's host resolves to a non-public address ({bad[0]}).")
    return str(addresses[0])


def message(session: Session, job: Job) -> tuple[str, str]:
    """The webhook's id and body (JSON) for an ended job; the same on every attempt."""
    data = end_data(session, job)
    finished = job.finished_at.isoformat() if job.finished_at else None
    body = json.dumps({"type": f"job.{job.status}", "timestamp": finished, "data": data},
                      separators=(",", ":"), sort_keys=True)
    return f"msg_{job.id}", body


def sign(secret: str, msg_id: str, body: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body),
    }


@dataclass(frozen=True)
class Due:
    """One claimed attempt at a job's webhook."""

    job_id: str
    attempt: int
    url: str
    secret: str
    msg_id: str
    body: str


def claim_due(session: Session, now: datetime, limit: int = 20) -> list[Due]:
    """Claim the next attempt of up to ``limit`` ended jobs whose webhook is due; the caller commits."""
    jobs = session.scalars(
        select(Job).where(
            Job.callback_state == PENDING,
            Job.status.in_([s.value for s in FINISHED]),
            (Job.callback_next_at.is_(None)) | (Job.callback_next_at <= now),
        ).order_by(Job.finished_at).limit(limit)
    ).all()
    due: list[Due] = []
    for job in jobs:
        attempt = job.callback_attempts + 1  # (read before the update refreshes the object)
        claimed = session.execute(
            update(Job)
            .where(Job.id == job.id, Job.callback_state == PENDING, Job.callback_attempts == attempt - 1)
            .values(callback_attempts=attempt, callback_next_at=now + timedelta(seconds=CLAIM_S))
        ).rowcount  # type: ignore[attr-defined]
        if claimed != 1 or job.callback_url is None:
            continue
        secret = session.scalar(select(ApiKey.webhook_secret).where(ApiKey.id == job.submitter_id))
        if secret is None:
            continue
        msg_id, body = message(session, job)
        due.append(Due(job.id, attempt, job.callback_url, secret, msg_id, body))
    return due


@dataclass(frozen=True)
class Sent:
    """The outcome of one attempt."""

    status_code: int | None
    error: str | None
    duration_ms: int
    final: bool  # no retry: delivered, or refused for good


def send(client: httpx.Client, due: Due, *, allow_private: bool, now: datetime, deadline_s: float = 10.0) -> Sent:
    """POST one attempt, pinned to the address the policy checked, within ``deadline_s`` in all."""
    start = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - start) * 1000)

    try:
        address = resolve(due.url, allow_private=allow_private)
        url = httpx.URL(due.url)
    except Exception as exc:  # noqa: BLE001 - a URL that cannot be resolved or parsed never will be
        return Sent(None, f"refused: {exc}"[:500], took(), final=True)
    host = url.host
    headers = {"content-type": "application/json", "user-agent": "ideabench-webhooks/1", "host": url.netloc.decode(),
               **sign(due.secret, due.msg_id, due.body, now)}
    deadline = start + deadline_s
    try:
        # A whole attempt has a deadline, not only each read: a receiver that drips one byte
        # every few seconds held the sender (and every webhook behind it) for a minute.
        with client.stream("POST", url.copy_with(host=address), content=due.body.encode(), headers=headers,
                           extensions={"sni_hostname": host}) as answer:
            received = 0
            for chunk in answer.iter_raw():  # as it arrives (a chunk size would wait to fill it)
                received += len(chunk)
                if received > 65536:  # the status is what counts: read no more of a large body
                    break
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"no complete answer within {deadline_s:g} s")
    except httpx.HTTPError as exc:
        return Sent(None, f"{type(exc).__name__}: {exc}"[:500], took(), final=False)
    if time.monotonic() > deadline:
        return Sent(None, f"ReadTimeout: no complete answer within {deadline_s:g} s", took(), final=False)
    ok = 200 <= answer.status_code < 300
    return Sent(answer.status_code, None if ok else f"HTTP {answer.status_code}", took(),
                final=ok or answer.status_code == 410)


def record(session: Session, due: Due, sent: Sent, now: datetime, retry_s: list[float]) -> str:
    """Store the attempt and the job's next webhook state; the caller commits."""
    session.add(WebhookAttempt(job_id=due.job_id, attempt=due.attempt, at=now, status_code=sent.status_code,
                               error=sent.error, duration_ms=sent.duration_ms))
    delivered = sent.error is None
    if delivered:
        state, next_at = DELIVERED, None
    elif sent.final or due.attempt > len(retry_s):
        state, next_at = FAILED, None
    else:
        state, next_at = PENDING, now + timedelta(seconds=retry_s[due.attempt - 1])
    session.execute(
        update(Job).where(Job.id == due.job_id, Job.callback_attempts == due.attempt)
        .values(callback_state=state, callback_next_at=next_at)
    )
    return state


def attempts_of(session: Session, job_id: str) -> list[WebhookAttempt]:
    """A job's webhook attempts, first first."""
    return list(session.scalars(select(WebhookAttempt).where(WebhookAttempt.job_id == job_id)
                                .order_by(WebhookAttempt.attempt)))


def view(job: Job, attempts: list[WebhookAttempt] | None) -> JobCallback | None:
    """The job view's ``callback`` block (None without a callback_url)."""
    if job.callback_url is None:
        return None
    return JobCallback(
        url=job.callback_url,
        state=job.callback_state,  # type: ignore[arg-type]
        attempts=job.callback_attempts,
        next_attempt_at=job.callback_next_at if job.callback_state == PENDING else None,
        deliveries=None if attempts is None else [
            WebhookDelivery(attempt=a.attempt, at=a.at, status_code=a.status_code, error=a.error,
                            duration_ms=a.duration_ms) for a in attempts
        ],
    )
