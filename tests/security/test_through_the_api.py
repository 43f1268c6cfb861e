"""The hostile files of ``hostile/`` through the REST API with a real Celery worker: each
fails with its code or gets no win, nothing of the worker leaks, and the worker goes on to
judge the next, honest job.

Each file's own rule is tested at the engine (``test_parent_boundary``); here, what only a real
worker shows: its environment and its database stay out of every answer. Files whose failure
says nothing of the worker (a wrong eval shape, a divergence) are left to the engine's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import bearer
from tests.workers.test_end_to_end import (  # noqa: F401 - the fixture
    ENVIRON_IDEA,
    EXAMPLE,
    NETWORK_IDEA,
    make_key,
    poll_job,
    stack,
)

HOSTILE = Path(__file__).parent / "hostile"
ENDED = {"succeeded", "errored", "cancelled"}


def submit(client: Any, token: str, code: str, n_seeds: int = 2) -> str:
    response = client.post("/v1/ideas", json={"track": "smoke", "code": code, "n_seeds": n_seeds},
                           headers=bearer(token))
    assert response.status_code in (200, 201, 202), response.text
    return str(response.json()["job_id"])


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["embedded"], indirect=True)
def test_hostile_files_through_the_api_with_a_real_worker(stack: Any) -> None:  # noqa: F811
    app, client, _agent, log = stack
    token = make_key(app, "operator")  # n_seeds=2 (short jobs) is an operator's override
    # no child may unlink its log or make a link or FIFO (seccomp's allowlist: sandbox_violation);
    # a child forked from its job's fork server cannot open the track packages (Landlock)
    expected: dict[str, tuple[str, ...] | None] = {
        "forge_baseline_events.py": ("sandbox_violation",),
        "log_link.py": ("sandbox_violation",),
        "log_fifo.py": ("sandbox_violation",),
        "import_tracks.py": ("invalid_code", "sandbox_violation"),
        "reconstruct_smoke_labels.py": ("not_capturable",),
    }
    sources = {name: (HOSTILE / name).read_text() for name in expected}
    # the database's port, and the environment of pid 1 and of the process (tests.workers)
    expected |= {"network": ("sandbox_violation",), "environ": None}
    sources |= {"network": NETWORK_IDEA, "environ": ENVIRON_IDEA}
    for name, code in expected.items():
        job = poll_job(client, token, submit(client, token, sources[name]), ENDED, 180, log)
        assert job["status"] == "errored" and job["error"]["code"] in (code or (job["error"]["code"],)), (name, job)
        message = job["error"]["message"]
        assert not any(leak in message for leak in ("DATABASE_URL", "BROKER_URL", "sqlite")), (name, message)
        assert name != "network" or "network" in message, message
    good = poll_job(client, token, submit(client, token, EXAMPLE), ENDED, 180, log)
    assert good["status"] == "succeeded", good
    report = client.get(f"/v1/jobs/{good['job_id']}/report", headers=bearer(token)).json()["report"]
    assert report["bench_report"]["seed_commitment"]["epoch"] == 1
    assert report["bench_report"]["parameter_parity"]["counted_by"] == "bench"
