"""Plain factory functions for jobs and reports in a test database."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from app.db import utcnow
from app.ids import new_id
from app.jobs.models import Job, JobStatus
from app.reports.models import Report
from app.reports.repository import count_verdict
from app.reports.service import build_report_row

PAIRS = {
    ("worked", "helps"): 1,
    ("partial", "helps"): 0,
    ("partial", "inconclusive"): 1,
    ("failed", "inconclusive"): 0,
    ("failed", "harms"): 0,
}


def report_body(
    system: str = "worked",
    practical: str = "helps",
    *,
    mechanism_ok: int | None = 1,
    p_value: float = 0.0078125,
    delta: float = -0.01,
    track: str = "smoke",
    p_helps: float | None = None,
) -> dict[str, Any]:
    """A report JSON shaped like bench.report.Report (PROTOCOL.md)."""
    verdict = {"helps": "idea better (significant)", "harms": "idea worse (significant)"}.get(
        practical, "no significant win"
    )
    return {
        "worked": system == "worked",
        "summary": f"A test report: {system}/{practical}.",
        "metrics": {"baseline_mse": 0.31, "idea_mse": 0.31 + delta},
        "system_verdict": system,
        "practical_verdict": practical,
        "practical_detail": "underpowered" if practical == "inconclusive" else None,
        "mechanism_ok": mechanism_ok,
        "system_judged": True,
        "bench_report": {
            "bench_version": 1,
            "track": track,
            "model": "test",
            "metric_direction": "lower",
            "n_seeds": 8,
            "p_helps": p_helps,
            "baseline": {"mean": 0.31},
            "idea": {"mean": 0.31 + delta},
            "comparison": {
                "delta_mean": delta,
                "idea_wins": 8 if delta < 0 else 0,
                "n_pairs": 8,
                "p_value": p_value,
                "verdict": verdict,
            },
        },
    }


def insert_job(session: Session, submitter_id: str, **overrides: Any) -> Job:
    """Stage a job (queued by default)."""
    now = overrides.pop("created_at", None) or utcnow()
    values: dict[str, Any] = {
        "id": new_id("job"),
        "status": JobStatus.QUEUED.value,
        "queue": "cpu",
        "track": "smoke",
        "idea_code": "def build_model(spec):\n    pass\n",
        "submitter_id": submitter_id,
        "request_sha256": "0" * 64,
        "runs_done": 0,
        "attempts": 0,
        "cancel_requested": False,
        "created_at": now,
        "enqueued_at": now,
    }
    values.update(overrides)
    job = Job(**values)
    session.add(job)
    session.flush()
    return job


def insert_report(
    session: Session, submitter_id: str, body: dict[str, Any] | None = None,
    created_at: dt.datetime | None = None, track: str = "smoke", **job: Any,
) -> Report:
    """Stage a succeeded job (``job``: its other columns) and its report."""
    created_at = created_at or utcnow()
    job = insert_job(session, submitter_id, status=JobStatus.SUCCEEDED.value, track=track,
                     created_at=created_at, **job)
    report = build_report_row(job, body or report_body(track=track), created_at)
    job.report_id = report.id
    session.add(report)
    session.flush()
    count_verdict(session, report)
    return report


def key_id(token: str) -> str:
    """The key id inside a token ``ib_<hex>_<secret>``."""
    return "key_" + token.split("_")[1]
