"""MCP's wait_for_job against a scripted client, through the SDK's own client in memory: what it
notifies when a wait is called again on a job that has gone on (the stream replays every event
from the job's start)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from mcp import Client

from ideabench_client import Job
from ideabench_client.client import Event
from ideabench_client.mcp_server import build_server

TOTAL = 10


class _Scripted:
    """A job at ``done`` of ``TOTAL`` runs whose stream replays its stage and its ``done`` runs,
    then ends (succeeded)."""

    def __init__(self, done: int) -> None:
        self.done = done

    async def job(self, job_id: str, wait: Any = None) -> Job:
        status = "succeeded" if self.done == TOTAL else "running"
        return Job.from_json({"job_id": job_id, "status": status, "track": "smoke", "error": None,
                              "progress": {"stage": "sweep", "runs_done": self.done, "runs_total": TOTAL}})

    async def events(self, job_id: str, **_: Any) -> AsyncIterator[Event]:
        yield Event(0, "stage", {"stage": "sweep", "runs_done": 0, "runs_total": TOTAL})
        for n in range(1, TOTAL + 1):
            yield Event(n, "run", {"stage": "sweep", "runs_done": n, "runs_total": TOTAL})
        self.done = TOTAL
        yield Event(TOTAL + 1, "end", {"status": "succeeded"})

    async def aclose(self) -> None:
        return None


def _notified(done_at_call: int) -> list[float]:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async def session() -> None:
        server = build_server(lambda ctx: _Scripted(done_at_call), log_level="ERROR")  # type: ignore[arg-type,return-value]
        async with Client(server) as client:
            result = await client.call_tool("wait_for_job", {"job_id": "job_1"}, progress_callback=on_progress)
            assert not result.is_error and result.structured_content["status"] == "succeeded"

    asyncio.run(session())
    return seen


def test_a_wait_called_again_starts_where_the_job_stands() -> None:
    """A first wait that timed out sent runs 1..k; the next one sent them all again (a client saw 229
    notifications for a 122-run job). Now it sends where the job stands, then what comes after."""
    assert _notified(0) == [0.0, *range(1, TOTAL + 1), TOTAL]  # the stage, each run, the end
    again = _notified(6)
    assert again == [6.0, 7.0, 8.0, 9.0, 10.0, 10.0], again
    assert again == sorted(again)  # never back
