"""Issue 27.9: the CLI's exit codes for every state a job shows, and a reader that leaves early
(``ideabench reports | head``) with Python's buffered stdout, as users run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.errors import ErrorCode
from cli import client as cli_client
from cli.main import main
from ideabench_client import Job

ROOT = Path(__file__).resolve().parents[2]


class _FakeClient:
    status = "running"

    def __init__(self, url: Any, key: Any) -> None:
        pass

    def __enter__(self) -> _FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def job(self, job_id: str, wait: Any = None) -> Job:
        error = {"code": "timeout", "message": "m", "hint": "h"} if self.status == "errored" else None
        return Job.from_json({"job_id": job_id, "status": self.status, "track": "smoke", "error": error})

    def cancel(self, job_id: str) -> Job:
        """As the service answers a cancel: a queued job cancelled at once, a running one still
        running (its worker is asked to stop it)."""
        status = "cancelled" if self.status == "queued" else self.status
        return Job.from_json({"job_id": job_id, "status": status, "track": "smoke", "error": None,
                              "cancel_requested": True})


@pytest.mark.parametrize(("status", "said"), [("queued", "cancelled"), ("running", "cancel requested")])
def test_cancel_says_what_happens_to_the_job(monkeypatch: pytest.MonkeyPatch, status: str, said: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 27.9: cancel printed the job's old state; a running job's line now says the worker was
    asked to stop it, and how to wait for that."""
    monkeypatch.setattr(_FakeClient, "status", status)
    monkeypatch.setattr(cli_client, "Client", _FakeClient)
    assert main(["cancel", "job_1", "--url", "http://x", "--key", "k"]) == 0
    out = capsys.readouterr().out
    assert said in out
    assert ("ideabench status job_1 --wait" in out) == (status == "running")


@pytest.mark.parametrize(("status", "code"), [("queued", 4), ("running", 4), ("succeeded", 0), ("errored", 3),
                                              ("cancelled", 3), ("failed", 3)])
def test_status_exits_with_what_the_job_is(monkeypatch: pytest.MonkeyPatch, status: str, code: int,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """0 judged, 3 ended without a report, 4 not ended yet: ``status J --wait 60 && report J``
    never reads a job that is still running (it exited 0 before)."""
    monkeypatch.setattr(_FakeClient, "status", status)
    monkeypatch.setattr(cli_client, "Client", _FakeClient)
    assert main(["status", "job_1", "--wait", "1", "--url", "http://x", "--key", "k"]) == code
    assert status in capsys.readouterr().out


READER_LEFT = """
import sys
from cli import client as cli_client
from cli.main import main

class Fake:
    def __init__(self, *a): pass
    def __enter__(self): return self
    def __exit__(self, *exc): return None
    def reports(self, **kw):
        for i in range(ROWS):
            yield {"report_id": f"rep_{i}", "track": "smoke", "system_verdict": "worked",
                   "practical_verdict": "helps", "p_value": 0.01, "q_value": 0.02, "name": "x"}

cli_client.Client = Fake
sys.stdin.read()  # wait until the reader has gone
sys.exit(main(["reports", "--url", "http://x", "--key", "k"]))
"""


@pytest.mark.parametrize("rows", [5, 5000])
def test_a_reader_that_leaves_early_ends_the_verb_quietly(rows: int) -> None:
    """Short output sits in stdout's buffer until exit; it used to fail there, outside every
    handler: "Exception ignored ... BrokenPipeError" on stderr and exit 120. Long output fails
    while printing. Both end quietly with 0 now."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(ROOT)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (`head`) has already left
    proc = subprocess.Popen([sys.executable, "-c", READER_LEFT.replace("ROWS", str(rows))], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    _, err = proc.communicate(b"", timeout=60)
    assert (proc.returncode, err.decode()) == (0, "")


def test_each_face_names_its_own_calls_in_a_hint() -> None:
    """Issue 27.4: the CLI and MCP passed the service's hints through, so an agent on MCP was told
    "List your jobs with GET /v1/jobs.". A face with words for a code uses them; one without passes
    the service's hint; a report of a job that ended without one says so on both faces."""
    from app.errors import HINTS
    from ideabench_client.hints import HINTS as FACE_HINTS
    from ideabench_client.hints import for_face

    for face, table in FACE_HINTS.items():
        assert all("/v1/" not in hint for hint in table.values()), face
    from bench.errors import DEFAULT_HINTS

    # every hint of the service, and of the engine (a job's or a check's error), that names a route
    rest_route_hints = {str(code.value if hasattr(code, "value") else code)
                        for code, hint in [*HINTS.items(), *DEFAULT_HINTS.items()] if "/v1/" in hint}
    assert {"unknown_track", "missing_build_model", "compute_parity", "capture_timeout"} <= rest_route_hints
    for face in ("cli", "mcp"):  # ... has this face's words
        assert rest_route_hints - set(FACE_HINTS[face]) == set(), face
    # in a job's error too (status, jobs, get_job, wait_for_job, list_jobs, a check's error)
    from ideabench_client.hints import with_face_hints

    job = {"job_id": "job_1", "status": "errored",
           "error": {"code": "capture_timeout", "message": "m", "hint": DEFAULT_HINTS[ErrorCode.CAPTURE_TIMEOUT]}}
    assert "describe_track" in with_face_hints("mcp", job)["error"]["hint"]
    assert "ideabench track NAME" in with_face_hints("cli", job)["error"]["hint"] and job["error"]["hint"].count("/v1/")
    assert with_face_hints("mcp", {"job_id": "job_2", "status": "queued", "error": None})["error"] is None
    assert for_face("mcp", "job_not_found", "No job with id 'x'.", "List your jobs with GET /v1/jobs.") == \
        "Call list_jobs and pass a job_id it answered."
    assert for_face("cli", "daily_quota", "m", "service hint") == "service hint"
    running = for_face("mcp", "report_not_ready", "Job job_1 is running; it has no report yet.", "h")
    ended = for_face("mcp", "report_not_ready", "Job job_1 is cancelled; it has no report.", "h")
    assert "wait_for_job" in running and "get_job" in ended and "ended without a report" in ended
    assert "ideabench status" in for_face("cli", "report_not_ready", "Job j is errored (timeout: t); it has no report.", "h")
