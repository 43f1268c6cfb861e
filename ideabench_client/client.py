"""Sync and async clients of the ideabench REST API (httpx; the event stream through httpx-sse).

    from ideabench_client import Client

    with Client("http://127.0.0.1:8000", key) as bench:
        check = bench.check("smoke", open("idea.py").read())   # seconds, no job: passed or failed
        job = bench.submit("smoke", open("idea.py").read(), wait=True)
        report = bench.report(job.job_id)

Both clients retry 429 and 503 answers and dropped connections with exponential backoff,
honouring ``Retry-After``; every submission carries an Idempotency-Key (a new one unless
given), so a retried POST never makes a second job. An error answer is raised as a typed
exception (``ideabench_client.errors``) with the service's ``code`` and ``hint``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from httpx_sse import aconnect_sse, connect_sse
from standardwebhooks.webhooks import Webhook

from ideabench_client import config
from ideabench_client.errors import (
    IdeabenchError,
    InvalidRequest,
    JobFailed,
    RateLimited,
    Unavailable,
    error_for,
)

ENDED_UNSUCCESSFUL = frozenset({"errored", "failed", "cancelled"})  # "failed": servers before migration 0014
FINISHED = frozenset({"succeeded"}) | ENDED_UNSUCCESSFUL
CHECK_ENDED = frozenset({"passed", "failed"})
MAX_WAIT_S = 60.0  # the longest ``?wait=`` the service holds a request for
RETRY_STATUS = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER_S = 60.0


def _seg(value: str) -> str:
    """``value`` as one path segment: an id is never a path (``"../keys/me"`` would be another
    route; an MCP tool's argument can come from a prompt the agent read)."""
    return quote(str(value), safe="@")


@dataclass(frozen=True)
class Job:
    """A job as ``GET /v1/jobs/{id}`` answers it (``raw`` holds the whole answer)."""

    job_id: str
    status: str
    track: str
    stage: str | None = None
    runs_done: int = 0
    runs_total: int | None = None
    eta_s: float | None = None
    runs_at_most: int | None = None
    eta_max_s: float | None = None
    report_id: str | None = None
    error: dict[str, str] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Job:
        progress = body.get("progress") or {}
        return cls(job_id=body["job_id"], status=body["status"], track=body.get("track", ""),
                   stage=progress.get("stage"), runs_done=int(progress.get("runs_done") or 0),
                   runs_total=progress.get("runs_total"), eta_s=progress.get("eta_s"),
                   runs_at_most=progress.get("runs_at_most"), eta_max_s=progress.get("eta_max_s"),
                   report_id=body.get("report_id"), error=body.get("error"), raw=body)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def raise_for_error(self) -> Job:
        """This job, or ``JobFailed`` (with the job's error code and hint) if it did not succeed."""
        if self.status in ENDED_UNSUCCESSFUL:
            error = self.error or {}
            raise JobFailed(self, error.get("code", self.status), error.get("message", ""), error.get("hint", ""))
        return self


@dataclass(frozen=True)
class Check:
    """A check before the queue, as ``POST /v1/ideas/check`` and ``GET /v1/checks/{id}`` answer
    it (``raw`` holds the whole answer): ``passed`` (``result``: the configs, each arm's
    parameters, buffer words and FLOPs per example against the limits a job enforces, the
    execution path, the runs a job would make), ``failed`` (``error``: the code, message and
    hint a job would end with), or still ``pending`` / ``running``."""

    check_id: str
    status: str
    track: str
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Check:
        return cls(check_id=body["check_id"], status=body["status"], track=body.get("track", ""),
                   result=body.get("result"), error=body.get("error"), raw=body)

    @property
    def ended(self) -> bool:
        return self.status in CHECK_ENDED

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def raise_for_error(self) -> Check:
        """This check, or ``InvalidRequest`` with its error's code and hint if it failed (what
        submitting the idea would end with)."""
        if self.status == "failed":
            error = self.error or {}
            raise InvalidRequest(error.get("code", "check_failed"), error.get("message", ""),
                                 error.get("hint", ""), body=self.raw)
        return self


@dataclass(frozen=True)
class Event:
    """One event of a job's stream: ``queued``, ``stage``, ``run``, ``warning`` or ``end``."""

    id: int
    event: str
    data: dict[str, Any]


EventCallback = Callable[[Event], None]


STREAM_ROTATED_S = 1.0  # a stream closed cleanly after this long was rotated, not lost


def _passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _read_timeout(timeout: float, deadline: float | None) -> httpx.Timeout:
    """An event stream's timeouts: no read timeout without a deadline (the server pings every
    15 s and rotates long streams), else at most the time left, so a wait with a timeout ends
    on time even when nothing arrives."""
    if deadline is None:
        return httpx.Timeout(timeout, read=None)
    return httpx.Timeout(timeout, read=max(0.05, deadline - time.monotonic()))


def _submission(track: str, code: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"track": track, "code": code}
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


def _check_wait(deadline: float | None, most: float = MAX_WAIT_S) -> float:
    """The ``?wait=`` of the next call of a check: what is left before ``deadline``, at most ``most``."""
    if deadline is None:
        return most
    return max(0.0, min(most, deadline - time.monotonic()))


def _retry_delay(attempt: int, backoff: float, response: httpx.Response | None) -> float:
    """Seconds before retry ``attempt`` (0-based): ``Retry-After`` when given, else backoff."""
    if response is not None:
        after = response.headers.get("Retry-After")
        try:
            if after is not None:
                return min(max(float(after), 0.0), MAX_RETRY_AFTER_S)
        except ValueError:
            pass
    return float(backoff * (2**attempt) * (0.5 + random.random()))


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def _check(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise error_for(response.status_code, _body(response))
    return _body(response) if response.content else None


def _event(sse: Any) -> Event | None:
    """The job event of one parsed SSE message; None for a keep-alive.

    The server sends ``: ping`` comments while a job is quiet (every 15 s). After a comment,
    httpx-sse yields a message with empty data (carrying the last id it saw): that is no event
    of the job, and it is skipped, as is any message without data. Every event of the job has
    a JSON object as its data."""
    if not sse.data.strip():
        return None
    try:
        data = json.loads(sse.data)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise httpx.TransportError(f"the event stream sent a message that is not a JSON object: {sse.data[:80]!r}")
    return Event(id=int(sse.id) if sse.id not in (None, "") else -1, event=sse.event, data=data)


class _Base:
    def __init__(self, url: str | None, key: str | None, timeout: float, retries: int, backoff: float) -> None:
        self.url, self.key = config.resolve(url, key)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "ideabench-client/0.1"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        headers.update(extra or {})
        return headers

    def _final_error(self, response: httpx.Response | None, exc: Exception | None) -> IdeabenchError:
        if response is not None:
            return error_for(response.status_code, _body(response))
        return Unavailable("unreachable", f"{self.url} did not answer: {exc}",
                           "Check IDEABENCH_URL and that the service runs (`ideabench serve`).")


class Client(_Base):
    """The synchronous client. ``url`` / ``key`` default to ``IDEABENCH_URL`` / ``IDEABENCH_KEY``,
    then to the file ``ideabench login`` writes. ``http``: an httpx.Client to use instead;
    ``transport``: an httpx transport for the client's own httpx.Client."""

    def __init__(self, url: str | None = None, key: str | None = None, *, timeout: float = 30.0,
                 retries: int = 5, backoff: float = 0.5, http: httpx.Client | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(url, key, timeout, retries, backoff)
        self._http = http or httpx.Client(base_url=self.url, timeout=timeout, transport=transport)
        self._own = http is None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._http.close()

    def request(self, method: str, path: str, *, json_body: Any = None, params: dict[str, Any] | None = None,
                headers: dict[str, str] | None = None, timeout: float | None = None) -> Any:
        """One API call with retries; the decoded JSON answer, or a typed exception."""
        response: httpx.Response | None = None
        error: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(method, path, json=json_body, params=params,
                                              headers=self._headers(headers), timeout=timeout or self.timeout)
                error = None
                if response.status_code not in RETRY_STATUS:
                    return _check(response)
            except httpx.TransportError as exc:
                response, error = None, exc
            if attempt < self.retries:
                time.sleep(_retry_delay(attempt, self.backoff, response))
        raise self._final_error(response, error)

    def me(self) -> dict[str, Any]:
        """The calling key: id, role, the limits in force and the webhook secret."""
        return dict(self.request("GET", "/v1/keys/me"))

    # -- tracks -----------------------------------------------------------------
    def tracks(self) -> list[dict[str, Any]]:
        """Every track: name, title, task, metric, contract summary."""
        return list(self.request("GET", "/v1/tracks")["items"])

    def track(self, name: str) -> dict[str, Any]:
        """A track's card: spec, defaults, the idea contract and an example idea."""
        return dict(self.request("GET", f"/v1/tracks/{_seg(name)}"))

    # -- checks -----------------------------------------------------------------
    def check(self, track: str, code: str, *, baseline_code: str | None = None,
              hparams: dict[str, list[Any]] | None = None, mechanism: dict[str, Any] | None = None,
              wait: bool = True, timeout: float | None = None) -> Check:
        """Check an idea before submitting it, in seconds and without a job: the static checks
        (raised at once as ``InvalidRequest``, as a submission's), then the capture of both arms
        in the sandbox and what a job checks before it trains. With ``wait`` (the default) long-poll
        until the check ends (or ``timeout`` seconds) and return it ``passed`` or ``failed``;
        else return it as the service first answered. A third open check of a key is
        ``RateLimited`` (``too_many_checks``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        first = _check_wait(deadline, 30.0) if wait else 0.0
        body = _submission(track, code, baseline_code=baseline_code, hparams=hparams, mechanism=mechanism)
        found = Check.from_json(self.request("POST", "/v1/ideas/check", json_body=body, params={"wait": first},
                                             timeout=self.timeout + first))
        while wait and not found.ended and (deadline is None or time.monotonic() < deadline):
            found = self.get_check(found.check_id, wait=_check_wait(deadline))
        return found

    def get_check(self, check_id: str, *, wait: float | None = None) -> Check:
        """A check of this key; ``wait``: answer once it ends or after that many seconds (<= 60)."""
        params = {"wait": wait} if wait else None
        return Check.from_json(self.request("GET", f"/v1/checks/{_seg(check_id)}", params=params,
                                            timeout=self.timeout + (wait or 0)))

    # -- jobs -------------------------------------------------------------------
    def submit(self, track: str, code: str, *, baseline_code: str | None = None, name: str | None = None,
               hypothesis: str | None = None, hparams: dict[str, list[Any]] | None = None,
               mechanism: dict[str, Any] | None = None, n_seeds: int | None = None,
               callback_url: str | None = None, idempotency_key: str | None = None, wait: bool = False,
               on_event: EventCallback | None = None, timeout: float | None = None) -> Job:
        """Submit an idea; with ``wait`` follow its event stream (``on_event`` sees each event)
        until it ends and return the ended job, else return the queued job at once.
        ``callback_url``: a public URL the service POSTs a signed message to once the job has
        ended (check it with ``verify_webhook`` and the secret of ``me()``)."""
        body = _submission(track, code, baseline_code=baseline_code, name=name, hypothesis=hypothesis,
                           hparams=hparams, mechanism=mechanism, n_seeds=n_seeds, callback_url=callback_url)
        key = idempotency_key or f"client-{uuid.uuid4().hex}"
        job = Job.from_json(self.request("POST", "/v1/ideas", json_body=body, headers={"Idempotency-Key": key}))
        return self.wait(job.job_id, on_event=on_event, timeout=timeout) if wait else job

    def job(self, job_id: str, *, wait: float | None = None) -> Job:
        """The job's state; ``wait``: answer once it ends or after that many seconds (<= 60)."""
        params = {"wait": wait} if wait else None
        return Job.from_json(self.request("GET", f"/v1/jobs/{_seg(job_id)}", params=params,
                                          timeout=self.timeout + (wait or 0)))

    def events(self, job_id: str, *, last_event_id: int | None = None,
               deadline: float | None = None) -> Iterator[Event]:
        """The job's events until ``end``, reconnecting (``Last-Event-ID``) when the stream drops;
        with ``deadline`` (a ``time.monotonic()`` value) also stop once it passes, whether or not
        anything arrives (``_read_timeout``)."""
        failures = 0
        while not _passed(deadline):
            headers = self._headers({"Accept": "text/event-stream"})
            if last_event_id is not None:
                headers["Last-Event-ID"] = str(last_event_id)
            try:
                opened = time.monotonic()
                with connect_sse(self._http, "GET", f"/v1/jobs/{_seg(job_id)}/events", headers=headers,
                                 timeout=_read_timeout(self.timeout, deadline)) as source:
                    if source.response.status_code >= 400:
                        source.response.read()
                        if source.response.status_code not in RETRY_STATUS:
                            _check(source.response)
                        raise httpx.TransportError(f"HTTP {source.response.status_code}")
                    for sse in source.iter_sse():
                        event = _event(sse)
                        if event is None:  # a keep-alive
                            if _passed(deadline):
                                return
                            continue
                        failures = 0
                        last_event_id = event.id
                        yield event
                        if event.event == "end":
                            return
                if time.monotonic() - opened >= STREAM_ROTATED_S:
                    failures = 0  # the server ends long streams (stream_max_s): resume at once
                    continue
                raise httpx.TransportError("the stream closed before its end event")
            except httpx.TransportError:
                if _passed(deadline):  # the read timed out at the deadline (or the stream dropped past it)
                    return
                failures += 1
                if failures > self.retries:
                    raise Unavailable("stream_lost", f"the event stream of {job_id} kept dropping",
                                      f"Check the service; the job goes on: job({job_id!r}) still answers.") from None
                time.sleep(_retry_delay(failures - 1, self.backoff, None))

    def wait(self, job_id: str, *, on_event: EventCallback | None = None, timeout: float | None = None) -> Job:
        """Follow the job's events until it ends (or ``timeout`` seconds) and return the job."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for event in self.events(job_id, deadline=deadline):
            if on_event is not None:
                on_event(event)
            if event.event == "end" or _passed(deadline):
                break
        return self.job(job_id)

    def jobs(self, *, status: str | None = None, track: str | None = None, since: str | None = None,
             page_size: int = 100, limit: int | None = None) -> Iterator[Job]:
        """Your jobs (every job, for an operator), newest first, filtered by ``status`` (queued,
        running, succeeded, errored, cancelled), ``track`` and ``since`` (ISO 8601 with a zone),
        every page followed; ``limit``: stop after that many. An errored job carries its error."""
        for row in self._paged("/v1/jobs", {"status": status, "track": track, "since": since}, page_size, limit):
            yield Job.from_json(row)

    def cancel(self, job_id: str) -> Job:
        """Cancel a queued job, or ask the worker to stop a running one."""
        return Job.from_json(self.request("POST", f"/v1/jobs/{_seg(job_id)}/cancel"))

    # -- reports ----------------------------------------------------------------
    def report(self, job_id: str) -> dict[str, Any]:
        """The job's report row and its whole report JSON (``report``)."""
        return dict(self.request("GET", f"/v1/jobs/{_seg(job_id)}/report"))

    def reports(self, *, page_size: int = 100, limit: int | None = None, **filters: Any) -> Iterator[dict[str, Any]]:
        """Report rows matching ``filters`` (the listing's: track, system_verdict, family, ...),
        every page followed; ``limit``: stop after that many rows."""
        yield from self._paged("/v1/reports", filters, page_size, limit)

    def _paged(self, path: str, filters: dict[str, Any], page_size: int, limit: int | None
               ) -> Iterator[dict[str, Any]]:
        """The rows of a cursor-paged listing, every page followed, at most ``limit``."""
        params = {k: v for k, v in filters.items() if v is not None}
        seen = 0
        while True:
            page = self.request("GET", path, params={**params, "limit": page_size})
            for row in page["items"]:
                yield row
                seen += 1
                if limit is not None and seen >= limit:
                    return
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    def compare(self, baseline: list[float], idea: list[float], lower_is_better: bool = True) -> dict[str, Any]:
        """The exact paired comparison block of two lists of per-seed numbers."""
        return dict(self.request("POST", "/v1/compare", json_body={
            "baseline": baseline, "idea": idea, "lower_is_better": lower_is_better}))


class AsyncClient(_Base):
    """The asynchronous client: the same methods as ``Client``, awaitable."""

    def __init__(self, url: str | None = None, key: str | None = None, *, timeout: float = 30.0,
                 retries: int = 5, backoff: float = 0.5, http: httpx.AsyncClient | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(url, key, timeout, retries, backoff)
        self._http = http or httpx.AsyncClient(base_url=self.url, timeout=timeout, transport=transport)
        self._own = http is None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def request(self, method: str, path: str, *, json_body: Any = None, params: dict[str, Any] | None = None,
                      headers: dict[str, str] | None = None, timeout: float | None = None) -> Any:
        response: httpx.Response | None = None
        error: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(method, path, json=json_body, params=params,
                                                    headers=self._headers(headers), timeout=timeout or self.timeout)
                error = None
                if response.status_code not in RETRY_STATUS:
                    return _check(response)
            except httpx.TransportError as exc:
                response, error = None, exc
            if attempt < self.retries:
                await asyncio.sleep(_retry_delay(attempt, self.backoff, response))
        raise self._final_error(response, error)

    async def me(self) -> dict[str, Any]:
        return dict(await self.request("GET", "/v1/keys/me"))

    async def tracks(self) -> list[dict[str, Any]]:
        return list((await self.request("GET", "/v1/tracks"))["items"])

    async def track(self, name: str) -> dict[str, Any]:
        return dict(await self.request("GET", f"/v1/tracks/{_seg(name)}"))

    async def check(self, track: str, code: str, *, baseline_code: str | None = None,
                    hparams: dict[str, list[Any]] | None = None, mechanism: dict[str, Any] | None = None,
                    wait: bool = True, timeout: float | None = None) -> Check:
        deadline = None if timeout is None else time.monotonic() + timeout
        first = _check_wait(deadline, 30.0) if wait else 0.0
        body = _submission(track, code, baseline_code=baseline_code, hparams=hparams, mechanism=mechanism)
        found = Check.from_json(await self.request("POST", "/v1/ideas/check", json_body=body,
                                                   params={"wait": first}, timeout=self.timeout + first))
        while wait and not found.ended and (deadline is None or time.monotonic() < deadline):
            found = await self.get_check(found.check_id, wait=_check_wait(deadline))
        return found

    async def get_check(self, check_id: str, *, wait: float | None = None) -> Check:
        params = {"wait": wait} if wait else None
        return Check.from_json(await self.request("GET", f"/v1/checks/{_seg(check_id)}", params=params,
                                                  timeout=self.timeout + (wait or 0)))

    async def submit(self, track: str, code: str, *, baseline_code: str | None = None, name: str | None = None,
                     hypothesis: str | None = None, hparams: dict[str, list[Any]] | None = None,
                     mechanism: dict[str, Any] | None = None, n_seeds: int | None = None,
                     callback_url: str | None = None, idempotency_key: str | None = None, wait: bool = False,
                     on_event: EventCallback | None = None, timeout: float | None = None) -> Job:
        body = _submission(track, code, baseline_code=baseline_code, name=name, hypothesis=hypothesis,
                           hparams=hparams, mechanism=mechanism, n_seeds=n_seeds, callback_url=callback_url)
        key = idempotency_key or f"client-{uuid.uuid4().hex}"
        job = Job.from_json(await self.request("POST", "/v1/ideas", json_body=body,
                                               headers={"Idempotency-Key": key}))
        return await self.wait(job.job_id, on_event=on_event, timeout=timeout) if wait else job

    async def job(self, job_id: str, *, wait: float | None = None) -> Job:
        params = {"wait": wait} if wait else None
        return Job.from_json(await self.request("GET", f"/v1/jobs/{_seg(job_id)}", params=params,
                                                timeout=self.timeout + (wait or 0)))

    async def events(self, job_id: str, *, last_event_id: int | None = None,
                     deadline: float | None = None) -> AsyncIterator[Event]:
        failures = 0
        while not _passed(deadline):
            headers = self._headers({"Accept": "text/event-stream"})
            if last_event_id is not None:
                headers["Last-Event-ID"] = str(last_event_id)
            try:
                opened = time.monotonic()
                async with aconnect_sse(self._http, "GET", f"/v1/jobs/{_seg(job_id)}/events", headers=headers,
                                        timeout=_read_timeout(self.timeout, deadline)) as source:
                    if source.response.status_code >= 400:
                        await source.response.aread()
                        if source.response.status_code not in RETRY_STATUS:
                            _check(source.response)
                        raise httpx.TransportError(f"HTTP {source.response.status_code}")
                    async for sse in source.aiter_sse():
                        event = _event(sse)
                        if event is None:  # a keep-alive
                            if _passed(deadline):
                                return
                            continue
                        failures = 0
                        last_event_id = event.id
                        yield event
                        if event.event == "end":
                            return
                if time.monotonic() - opened >= STREAM_ROTATED_S:
                    failures = 0  # the server ends long streams (stream_max_s): resume at once
                    continue
                raise httpx.TransportError("the stream closed before its end event")
            except httpx.TransportError:
                if _passed(deadline):  # the read timed out at the deadline (or the stream dropped past it)
                    return
                failures += 1
                if failures > self.retries:
                    raise Unavailable("stream_lost", f"the event stream of {job_id} kept dropping",
                                      f"Check the service; the job goes on: job({job_id!r}) still answers.") from None
                await asyncio.sleep(_retry_delay(failures - 1, self.backoff, None))

    async def wait(self, job_id: str, *, on_event: EventCallback | None = None, timeout: float | None = None) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        async for event in self.events(job_id, deadline=deadline):
            if on_event is not None:
                on_event(event)
            if event.event == "end" or _passed(deadline):
                break
        return await self.job(job_id)

    async def jobs(self, *, status: str | None = None, track: str | None = None, since: str | None = None,
                   page_size: int = 100, limit: int | None = None) -> AsyncIterator[Job]:
        async for row in self._paged("/v1/jobs", {"status": status, "track": track, "since": since},
                                     page_size, limit):
            yield Job.from_json(row)

    async def cancel(self, job_id: str) -> Job:
        return Job.from_json(await self.request("POST", f"/v1/jobs/{_seg(job_id)}/cancel"))

    async def report(self, job_id: str) -> dict[str, Any]:
        return dict(await self.request("GET", f"/v1/jobs/{_seg(job_id)}/report"))

    async def reports(self, *, page_size: int = 100, limit: int | None = None,
                      **filters: Any) -> AsyncIterator[dict[str, Any]]:
        async for row in self._paged("/v1/reports", filters, page_size, limit):
            yield row

    async def _paged(self, path: str, filters: dict[str, Any], page_size: int, limit: int | None
                     ) -> AsyncIterator[dict[str, Any]]:
        params = {k: v for k, v in filters.items() if v is not None}
        seen = 0
        while True:
            page = await self.request("GET", path, params={**params, "limit": page_size})
            for row in page["items"]:
                yield row
                seen += 1
                if limit is not None and seen >= limit:
                    return
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    async def compare(self, baseline: list[float], idea: list[float], lower_is_better: bool = True) -> dict[str, Any]:
        return dict(await self.request("POST", "/v1/compare", json_body={
            "baseline": baseline, "idea": idea, "lower_is_better": lower_is_better}))


__all__ = ["AsyncClient", "Check", "Client", "Event", "IdeabenchError", "Job", "JobFailed", "RateLimited"]


def verify_webhook(secret: str, body: bytes | str, headers: Mapping[str, str]) -> dict[str, Any]:
    """The message of a webhook the service POSTed (``{"type", "timestamp", "data"}``), once its
    Standard Webhooks signature is checked against ``secret`` (``Client.me()["webhook_secret"]``)
    and its timestamp is within five minutes; raises ``standardwebhooks``' verification error
    otherwise. Deduplicate on the ``webhook-id`` header: a retry repeats it."""
    return dict(Webhook(secret).verify(body, dict(headers)))
