"""Job-end webhooks: the URL policy at submission and at delivery, the Standard Webhooks
signature, retries with backoff, deliveries on the job, one sender per attempt."""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from app.db import utcnow
from app.jobs.models import Job
from app.keys.service import create_key
from app.main import create_app
from app.migrate import upgrade_head
from app.settings import Settings
from app.webhooks import service
from app.webhooks.sender import deliver_due
from tests.app.test_api_errors import EXAMPLE
from tests.conftest import RecordingQueue, bearer


class Receiver:
    """A real HTTP server on loopback that answers with the next of ``codes`` (then 200)."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.received: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.codes.pop(0) if receiver.codes else 200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def service_parts(tmp_path: Any) -> Iterator[tuple[Any, Any, dict[str, str]]]:
    settings = Settings(data_dir=tmp_path / "var", broker_url="memory://", webhook_allow_private=True,
                        webhook_retry_s=[0.0, 0.0], send_webhooks=False)
    upgrade_head(settings)
    app = create_app(settings)
    app.state.queue = RecordingQueue()
    with app.state.sessionmaker() as session:
        tokens = {r: create_key(session, r, r).token for r in ("agent", "operator", "viewer")}
        session.commit()
    # the API's sender thread is off (send_webhooks=False): each test makes its passes itself
    ctx = SimpleNamespace(settings=settings, sessions=app.state.sessionmaker)
    yield app, ctx, tokens


def _submit(client: TestClient, token: str, url: str) -> Any:
    return client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE, "callback_url": url},
                       headers=bearer(token))


@pytest.mark.parametrize("url", [
    "ftp://example.com/hook", "example.com/hook", "http://127.0.0.1:8000/hook", "http://localhost/hook",
    "http://api.localhost/x", "http://10.1.2.3/hook", "http://192.168.0.1/", "http://[::1]:9/",
    "http://169.254.169.254/latest/meta-data/", "http://0.0.0.0/", "http://user:pw@example.com/hook",
    "http://metadata.google.internal/", "http://example.com:99999/",
    # red team: a 500 on a URL urlsplit cannot read; an empty IDNA label (it stopped every
    # webhook pass at delivery); IPv6 forms that carry an inside IPv4 address; other non-public blocks
    "http://[::1", "https://[", "http://a..b/", "http://[64:ff9b::a9fe:a9fe]/", "http://[2002:a9fe:a9fe::]/",
    "http://[::127.0.0.1]/", "http://[fec0::1]/", "http://192.0.0.8/", "http://[::ffff:10.0.0.1]/",
])
def test_submission_refuses_callback_urls_that_are_not_public_http(tmp_path: Any, url: str) -> None:
    settings = Settings(data_dir=tmp_path / "var", broker_url="memory://")
    upgrade_head(settings)
    app = create_app(settings)
    with app.state.sessionmaker() as session:
        token = create_key(session, "agent").token
        session.commit()
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = _submit(client, token, url)
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "invalid_callback_url" and answer.json()["hint"]
        assert client.get("/v1/jobs", headers=bearer(token)).json()["items"] == []  # nothing made
        accepted = _submit(client, token, "https://hooks.example.com/ideabench")
        assert accepted.status_code == 202
        assert accepted.json()["callback"] == {"url": "https://hooks.example.com/ideabench", "state": "pending",
                                               "attempts": 0, "next_attempt_at": None, "deliveries": None}


def test_a_job_end_is_posted_signed_once_and_shown_on_the_job(
    service_parts: tuple[Any, Any, dict[str, str]], receiver: Receiver,
) -> None:
    app, ctx, tokens = service_parts
    with TestClient(app, raise_server_exceptions=False) as client, httpx.Client() as http:
        job = _submit(client, tokens["agent"], receiver.url).json()
        assert deliver_due(ctx.settings, ctx.sessions, http) == 0  # not ended yet: nothing is sent
        client.post(f"/v1/jobs/{job['job_id']}/cancel", headers=bearer(tokens["agent"]))
        assert deliver_due(ctx.settings, ctx.sessions, http) == 1
        assert deliver_due(ctx.settings, ctx.sessions, http) == 0  # delivered: never again
        secret = client.get("/v1/keys/me", headers=bearer(tokens["agent"])).json()["webhook_secret"]
        view = client.get(f"/v1/jobs/{job['job_id']}", headers=bearer(tokens["agent"])).json()
    assert len(receiver.received) == 1
    headers, body = receiver.received[0]
    payload = Webhook(secret).verify(body, headers)
    assert payload["type"] == "job.cancelled" and payload["data"]["job_id"] == job["job_id"]
    assert payload["data"]["error"]["code"] == "cancelled"
    assert headers["webhook-id"] == f"msg_{job['job_id']}" and headers["content-type"] == "application/json"
    other = create_key_secret(app)
    with pytest.raises(WebhookVerificationError):  # another key's secret does not verify it
        Webhook(other).verify(body, headers)
    callback = view["callback"]
    assert callback["state"] == "delivered" and callback["attempts"] == 1
    assert [(d["attempt"], d["status_code"], d["error"]) for d in callback["deliveries"]] == [(1, 200, None)]


def create_key_secret(app: Any) -> str:
    with app.state.sessionmaker() as session:
        key = create_key(session, "agent").key
        session.commit()
        return str(key.webhook_secret)


def test_failures_are_retried_with_the_same_id_then_given_up(
    service_parts: tuple[Any, Any, dict[str, str]], receiver: Receiver,
) -> None:
    app, ctx, tokens = service_parts  # webhook_retry_s=[0, 0]: three attempts in all
    receiver.codes = [500, 503]
    with TestClient(app, raise_server_exceptions=False) as client, httpx.Client() as http:
        first = _submit(client, tokens["agent"], receiver.url).json()["job_id"]
        client.post(f"/v1/jobs/{first}/cancel", headers=bearer(tokens["agent"]))
        assert [deliver_due(ctx.settings, ctx.sessions, http) for _ in range(4)] == [1, 1, 1, 0]
        view = client.get(f"/v1/jobs/{first}", headers=bearer(tokens["agent"])).json()["callback"]
        assert view["state"] == "delivered"
        assert [d["status_code"] for d in view["deliveries"]] == [500, 503, 200]
        assert len({h["webhook-id"] for h, _ in receiver.received}) == 1  # one message, three tries
        receiver.codes = [500, 500, 500, 500]
        second = _submit(client, tokens["agent"], receiver.url).json()["job_id"]
        client.post(f"/v1/jobs/{second}/cancel", headers=bearer(tokens["agent"]))
        assert [deliver_due(ctx.settings, ctx.sessions, http) for _ in range(4)] == [1, 1, 1, 0]
        view = client.get(f"/v1/jobs/{second}", headers=bearer(tokens["agent"])).json()["callback"]
        assert view["state"] == "failed" and view["attempts"] == 3 and view["next_attempt_at"] is None
        receiver.codes = [410]  # the receiver says: gone, stop
        third = _submit(client, tokens["agent"], receiver.url).json()["job_id"]
        client.post(f"/v1/jobs/{third}/cancel", headers=bearer(tokens["agent"]))
        assert [deliver_due(ctx.settings, ctx.sessions, http) for _ in range(2)] == [1, 0]
        assert client.get(f"/v1/jobs/{third}", headers=bearer(tokens["agent"])).json()["callback"]["state"] == "failed"


def test_an_attempt_is_claimed_by_one_sender(service_parts: tuple[Any, Any, dict[str, str]],
                                            receiver: Receiver) -> None:
    app, ctx, tokens = service_parts
    with TestClient(app, raise_server_exceptions=False) as client:
        job = _submit(client, tokens["agent"], receiver.url).json()["job_id"]
        client.post(f"/v1/jobs/{job}/cancel", headers=bearer(tokens["agent"]))
    with ctx.sessions() as a, ctx.sessions() as b:
        first = service.claim_due(a, utcnow())
        a.commit()
        second = service.claim_due(b, utcnow())
        b.commit()
    assert [d.attempt for d in first] == [1] and second == []


def _ended_job_with_url(app: Any, client: TestClient, tokens: dict[str, str], url: str) -> str:
    """A job whose callback_url was accepted when the policy allowed it (now it does not)."""
    job = _submit(client, tokens["agent"], "https://hooks.example.com/x").json()["job_id"]
    client.post(f"/v1/jobs/{job}/cancel", headers=bearer(tokens["agent"]))
    with app.state.sessionmaker() as session:
        session.execute(update(Job).where(Job.id == job).values(callback_url=url))
        session.commit()
    return job


def test_delivery_rechecks_the_address_it_connects_to(
    service_parts: tuple[Any, Any, dict[str, str]], receiver: Receiver,
) -> None:
    app, ctx, tokens = service_parts
    ctx.settings = ctx.settings.model_copy(update={"webhook_allow_private": False})
    names = [receiver.url]  # a loopback literal, stored before the policy was on
    host = socket.gethostname()  # a name (not a literal) that resolves to this machine
    if all(not ipaddress.ip_address(i[4][0]).is_global for i in socket.getaddrinfo(host, None)):
        names.append(receiver.url.replace("127.0.0.1", host))
    with TestClient(app) as client, httpx.Client() as http:
        jobs = [_ended_job_with_url(app, client, tokens, url) for url in names]
        assert deliver_due(ctx.settings, ctx.sessions, http) == len(jobs)
        assert receiver.received == []
        for job in jobs:
            callback = client.get(f"/v1/jobs/{job}", headers=bearer(tokens["agent"])).json()["callback"]
            assert callback["state"] == "failed"
            assert "not a public address" in callback["deliveries"][0]["error"] or \
                "non-public" in callback["deliveries"][0]["error"]


def test_the_message_body_is_the_end_event(service_parts: tuple[Any, Any, dict[str, str]],
                                           receiver: Receiver) -> None:
    app, ctx, tokens = service_parts
    with TestClient(app) as client, httpx.Client() as http:
        job = _submit(client, tokens["agent"], receiver.url).json()["job_id"]
        client.post(f"/v1/jobs/{job}/cancel", headers=bearer(tokens["agent"]))
        deliver_due(ctx.settings, ctx.sessions, http)
        with client.stream("GET", f"/v1/jobs/{job}/events", headers=bearer(tokens["agent"])) as stream:
            lines = [line for line in stream.iter_lines() if line.startswith("data:")]
    end = json.loads(lines[-1][5:])
    assert json.loads(receiver.received[0][1])["data"] == end


def test_one_bad_webhook_does_not_stop_the_others_and_a_dripping_receiver_is_cut_off(
    service_parts: tuple[Any, Any, dict[str, str]], receiver: Receiver,
) -> None:
    """Red team: a callback URL whose host the resolver cannot encode (stored before the check
    refused it) raised out of the webhook pass, so every webhook claimed with it stayed
    undelivered; and a receiver that sent one byte every few seconds held the sender a minute."""
    app, ctx, tokens = service_parts
    ctx.settings = ctx.settings.model_copy(update={"webhook_timeout_s": 1.0})
    drip = socket.socket()
    drip.bind(("127.0.0.1", 0))
    drip.listen(4)

    def dribble() -> None:
        conn, _ = drip.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
        for _ in range(12):
            time.sleep(0.5)
            try:
                conn.sendall(b"x")
            except OSError:
                break
        conn.close()

    threading.Thread(target=dribble, daemon=True).start()
    dripping = f"http://127.0.0.1:{drip.getsockname()[1]}/hook"
    with TestClient(app) as client, httpx.Client(timeout=httpx.Timeout(1.0)) as http:
        jobs = [_ended_job_with_url(app, client, tokens, url) for url in ("http://a..b/", dripping, receiver.url)]
        assert deliver_due(ctx.settings, ctx.sessions, http) == 3
        assert len(receiver.received) == 1  # the good one was delivered in the same pass
        states = [client.get(f"/v1/jobs/{j}", headers=bearer(tokens["agent"])).json()["callback"] for j in jobs]
    assert states[0]["state"] == "failed" and "refused" in states[0]["deliveries"][0]["error"]
    assert "within 1 s" in states[1]["deliveries"][0]["error"]
    assert states[1]["deliveries"][0]["duration_ms"] < 5000  # cut off at its deadline, not held for the 6 s drip
    assert states[2]["state"] == "delivered"
    drip.close()


def test_the_api_process_sends_the_webhooks(tmp_path: Any, receiver: Receiver) -> None:
    """Issue 28.8: the sender is a thread of each API process (the tier with egress), started and
    stopped with the app; workers, which run submitted code, reach only the database and broker."""
    settings = Settings(data_dir=tmp_path / "var", broker_url="memory://", webhook_allow_private=True,
                        webhook_every_s=0.1)
    upgrade_head(settings)
    app = create_app(settings)
    app.state.queue = RecordingQueue()
    with app.state.sessionmaker() as session:
        token = create_key(session, "agent").token
        session.commit()
    with TestClient(app, raise_server_exceptions=False) as client:
        job = _submit(client, token, receiver.url).json()
        client.post(f"/v1/jobs/{job['job_id']}/cancel", headers=bearer(token))
        deadline = time.monotonic() + 10
        while not receiver.received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(receiver.received) == 1
        assert json.loads(receiver.received[0][1])["data"]["job_id"] == job["job_id"]
    assert not any(t.name == "ideabench-webhooks" and t.is_alive() for t in threading.enumerate())
    import workers.main

    assert "webhook" not in Path(workers.main.__file__).read_text().lower()
