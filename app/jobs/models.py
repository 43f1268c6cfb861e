"""The ``jobs`` table: one submitted idea and the state of its judging."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime, utcnow
from app.types import JsonType


class JobStatus(StrEnum):
    """``queued -> running -> succeeded | errored | cancelled``.

    ``errored``: the job ended with an error and no report (its ``error`` says why). It was
    called ``failed`` until migration 0014, a word that also names a judged idea's
    ``system_verdict``; ``GET /v1/jobs?status=failed`` still lists errored jobs (``LEGACY``)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    ERRORED = "errored"
    CANCELLED = "cancelled"


FINISHED = frozenset({JobStatus.SUCCEEDED, JobStatus.ERRORED, JobStatus.CANCELLED})
LEGACY = {"failed": JobStatus.ERRORED}  # old status words a filter still accepts, for one version
STATUS_FILTER_HELP = ("Only jobs in this status. `failed` is the old name of `errored` (a job that ended "
                      "with an error and no report), accepted until the next API version.")


def status_filter(value: str | None) -> JobStatus | None:
    """A status filter's value, its legacy words (``LEGACY``) read as today's."""
    if value is None:
        return None
    return LEGACY[value] if value in LEGACY else JobStatus(value)


_UNSENT = text("status = 'queued' AND enqueued_at IS NULL")


class Job(Base):
    """A submission and its judging: what to run, who asked, where it stands."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("submitter_id", "idempotency_key", name="uq_jobs_submitter_idempotency"),
        Index("ix_jobs_status_queue_created", "status", "queue", "created_at"),
        Index("ix_jobs_created", "created_at", "id"),
        Index("ix_jobs_submitter_created", "submitter_id", "created_at", "id"),
        Index("ix_jobs_submitter_status", "submitter_id", "status"),  # fair use: a key's jobs in flight
        Index("ix_jobs_track_created", "track", "created_at", "id"),
        Index("ix_jobs_track_family_created", "track", "family", "created_at"),
        Index("ix_jobs_callback_state_next", "callback_state", "callback_next_at"),
        # The dispatcher's scan (app/jobs/leases.take_unsent): queued jobs not sent yet, alone.
        Index("ix_jobs_unsent", "created_at", postgresql_where=_UNSENT, sqlite_where=_UNSENT),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED.value)
    queue: Mapped[str] = mapped_column(String(16), default="cpu")
    # The submission.
    track: Mapped[str] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(200))
    hypothesis: Mapped[str | None] = mapped_column(Text)
    idea_code: Mapped[str] = mapped_column(Text)
    baseline_code: Mapped[str | None] = mapped_column(Text)
    n_seeds: Mapped[int | None] = mapped_column(Integer)
    hparams: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    mechanism: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    submitter_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    # The idea family (bench.family): re-rolls of one idea share it (attempt records).
    family: Mapped[str | None] = mapped_column(String(40))
    request_sha256: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(128))  # the submission's X-Request-ID (logs)
    # The webhook (app/webhooks): POSTed once the job has ended. State: pending (until it is
    # delivered or given up), delivered, failed; attempts fence the senders (compare-and-set).
    callback_url: Mapped[str | None] = mapped_column(String(2000))
    callback_state: Mapped[str | None] = mapped_column(String(16))
    callback_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    callback_next_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Progress, written by the worker while the protocol runs.
    stage: Mapped[str | None] = mapped_column(String(32))
    runs_done: Mapped[int] = mapped_column(Integer, default=0)
    runs_total: Mapped[int | None] = mapped_column(Integer)
    eta_s: Mapped[float | None] = mapped_column(Float)
    # The most runs the job may make (runs_total plus what is still undecided: grid edges, the
    # matched baseline, a confirmation), and the seconds left if it makes them all
    runs_at_most: Mapped[int | None] = mapped_column(Integer)
    eta_max_s: Mapped[float | None] = mapped_column(Float)
    progress_message: Mapped[str | None] = mapped_column(String(500))
    # The lease: who runs it, until when, which attempt (the fencing token).
    worker_id: Mapped[str | None] = mapped_column(String(200))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # The end.
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    error_hint: Mapped[str | None] = mapped_column(Text)
    report_id: Mapped[str | None] = mapped_column(String(32))
    # Times.
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # When the job's message was last sent; None: not sent yet (the API commits the job and
    # the workers' dispatcher sends it: workers/reconciler.py).
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class JobEvent(Base):
    """One event of a job's stream (``GET /v1/jobs/{id}/events``): ``stage``, ``run`` or
    ``warning``, numbered 1, 2, ... per job by the one worker that holds its lease. The
    ``queued`` and ``end`` events are read from the job row itself, so every path that ends
    a job (worker, cancel, reconciler) ends its stream."""

    __tablename__ = "job_events"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer)
    data: Mapped[dict[str, Any]] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WebhookAttempt(Base):
    """One try at delivering a job's webhook: when, the answer's status (or why none came)."""

    __tablename__ = "webhook_attempts"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(500))
    duration_ms: Mapped[int] = mapped_column(Integer)
