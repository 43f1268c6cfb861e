"""Request and response bodies of the idea and job routes."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, field_validator

from app.jobs.models import JobStatus

_JOB_EXAMPLE: dict[str, Any] = {
    "job_id": "job_4be1f0c2a9d3e8b7c6a5",
    "status": "running",
    "track": "smoke",
    "name": "silu-wide",
    "device": "cpu",
    "submitter": "key_1a2b3c4d",
    "created_at": "2025-05-01T12:00:00Z",
    "started_at": "2025-05-01T12:00:01Z",
    "finished_at": None,
    "queue_position": None,
    "progress": {"stage": "sweep", "runs_done": 9, "runs_total": 40, "eta_s": 6.5,
                 "message": "sweep: idea lr=0.01 seed 1"},
    "attempts": 1,
    "cancel_requested": False,
    "error": None,
    "report_id": None,
    "links": {"self": "/v1/jobs/job_4be1f0c2a9d3e8b7c6a5",
              "report": "/v1/jobs/job_4be1f0c2a9d3e8b7c6a5/report",
              "cancel": "/v1/jobs/job_4be1f0c2a9d3e8b7c6a5/cancel"},
}


class IdeaSubmission(BaseModel):
    """One idea to judge: the track and the idea file, plus optional overrides.

    ``hparams`` (alias ``grid``) and ``mechanism`` override the file's own
    ``HPARAMS`` / ``MECHANISM``. The example below is the smoke track's example idea.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    track: str = Field(min_length=1, max_length=64, description="A track name from GET /v1/tracks.")
    code: str = Field(min_length=1, description="The idea file: Python source defining build_model(spec).")
    name: str | None = Field(default=None, max_length=200, description="A short label for the idea.")
    hypothesis: str | None = Field(default=None, max_length=4000, description="What the idea should do, and why.")
    baseline_code: str | None = Field(
        default=None, description="A matched baseline file (same contract); default: the track's baseline."
    )
    hparams: dict[str, Any] | None = Field(
        default=None,
        validation_alias=AliasChoices("hparams", "grid"),
        description="Extra sweep grid {name: [values]} (alias: grid); overrides the file's HPARAMS.",
    )
    n_seeds: StrictInt | None = Field(
        default=None, ge=2, le=32,
        description="Final paired seeds per arm; fixed per track, so only an operator may set it "
        "(403 n_seeds_fixed otherwise).",
    )
    mechanism: dict[str, Any] | None = Field(
        default=None, description="A mechanism expectation; overrides the file's MECHANISM."
    )
    device: Literal["cpu", "gpu"] | None = Field(
        default=None, description="Which workers run it; default: the service's setting."
    )
    callback_url: str | None = Field(
        default=None, max_length=2000,
        description="A public http(s) URL to POST to once the job has ended: a Standard Webhooks message "
        "signed with your key's webhook_secret (GET /v1/keys/me), retried with backoff; its deliveries "
        "show on the job (callback.deliveries).",
    )

    @field_validator("track", "name", "hypothesis", "hparams", "mechanism", "callback_url")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return no_nul(value)


def no_nul(value: Any) -> Any:
    """``value``, unless it holds a NUL character anywhere: none in a text the database stores
    (Postgres refuses it in text and JSON: that was a 500). The idea files are checked as
    source (``invalid_code``)."""
    if _has_nul(value):
        raise ValueError("must not contain the NUL character (\\u0000)")
    return value


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


class JobError(BaseModel):
    """Why a job errored (or was cancelled): the same shape as every API error."""

    code: str
    message: str
    hint: str


class JobProgress(BaseModel):
    """Where a running protocol stands."""

    stage: str | None = Field(description="sweep, final, confirmation, mechanism or done")
    runs_done: int
    runs_total: int | None
    eta_s: float | None = Field(description="Estimated seconds left for runs_total.")
    runs_at_most: int | None = Field(default=None, description=(
        "The most runs this job may make: runs_total plus those the protocol has not decided yet "
        "(an extension of the lr grid at its edge, the baseline at the idea's lr, a confirmation "
        "of one or two looks after a screened win). runs_total reaches it only if all of them run."))
    eta_max_s: float | None = Field(default=None, description=(
        "Estimated seconds left if the job makes runs_at_most runs: wait up to about this long."))
    message: str | None = None


class WebhookDelivery(BaseModel):
    """One try at POSTing a job's webhook."""

    attempt: int
    at: datetime
    status_code: int | None = Field(description="The receiver's HTTP status; null when none came.")
    error: str | None = Field(description="Why the attempt did not count as delivered (null: 2xx).")
    duration_ms: int


class JobCallback(BaseModel):
    """The job's webhook: where it goes and how its deliveries went."""

    url: str
    state: Literal["pending", "delivered", "failed"] | None = Field(
        description="pending until delivered (a 2xx answer) or given up (refused, 410, retries spent).")
    attempts: int
    next_attempt_at: datetime | None = Field(description="When the next try is due (pending only).")
    deliveries: list[WebhookDelivery] | None = Field(
        description="Every attempt, first first (in GET /v1/jobs/{job_id}; null in listings).")


class JobLinks(BaseModel):
    """Where to poll, fetch the report, cancel."""

    model_config = ConfigDict(populate_by_name=True)

    self_: str = Field(alias="self", serialization_alias="self")
    report: str
    cancel: str


class JobView(BaseModel):
    """A job's state."""

    model_config = ConfigDict(json_schema_extra={"examples": [_JOB_EXAMPLE]})

    job_id: str
    status: JobStatus
    track: str
    name: str | None
    device: str
    submitter: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    queue_position: int | None = Field(
        description="Queued jobs ahead of this one (only while queued and fetched singly)."
    )
    progress: JobProgress
    attempts: int
    cancel_requested: bool
    error: JobError | None
    report_id: str | None
    links: JobLinks
    callback: JobCallback | None = Field(default=None, description="Only for a job submitted with callback_url.")


class Estimate(BaseModel):
    """A rough estimate of the run: runs to train and seconds."""

    runs_total: int
    run_s: float = Field(description="Estimated seconds of judging once started, without a confirmation: "
                         "fixed_s + runs_total x seconds_per_run.")
    run_s_max: float | None = Field(default=None, description="Up to this many seconds: fixed_s + runs_at_most x "
                                    "seconds_per_run, when every part that depends on the results runs.")
    runs_at_most: int | None = Field(default=None, description="The most runs the job may make: runs_total, plus "
                                     "what the protocol adds only when results call for it (an lr grid extended at "
                                     "an edge, the baseline at the idea's learning rate, a confirmation: "
                                     "confirmation_runs); bench.plan counts it.")
    fixed_s: float | None = Field(default=None, description="Seconds before training: the sandboxed children "
                                  "started, both arms captured and checked.")
    seconds_per_run: float | None = Field(default=None, description="Seconds per training run on this track.")
    wait_s: float = Field(description="Estimated seconds waiting in the queue (jobs ahead x run_s).")
    basis: Literal["history", "card", "default"] = Field(description=(
        "history: fitted to this track's recent jobs on this deployment; card: the track card's timing, "
        "measured on the reference machine (a custom track's at its validation); default: neither exists."))
    confirmation_runs: int = Field(
        default=0,
        description="The most runs added, beyond runs_total, only if the screening finds a win: both arms' "
        "best configs, and the baseline at the idea's learning rate when the two differ, on fresh seeds, "
        "n_seeds per look and a second look only when the first is close (PROTOCOL.md 2.6; never from "
        "the baseline cache; bench.plan counts it). The screening, too, adds n_seeds runs when the "
        "arms' best learning rates differ (docs/statistics.md).",
    )


class JobAccepted(JobView):
    """The answer to a submission (202): the job, its links, and an estimate."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    **_JOB_EXAMPLE,
                    "status": "queued",
                    "started_at": None,
                    "queue_position": 0,
                    "progress": {"stage": None, "runs_done": 0, "runs_total": None, "eta_s": None,
                                 "message": None},
                    "attempts": 0,
                    "estimate": {"runs_total": 40, "run_s": 12.0, "wait_s": 0.0, "basis": "history"},
                    "idempotent_replay": False,
                }
            ]
        }
    )

    estimate: Estimate
    idempotent_replay: bool = Field(description="True when an earlier request with this Idempotency-Key made it.")


class JobPage(BaseModel):
    """One page of jobs, newest first; pass ``next_cursor`` back as ``cursor``."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [_JOB_EXAMPLE], "next_cursor": "eyJzIjoiLWNyZWF0ZWRfYXQiLCJrIjpbXX0"}]}
    )

    items: list[JobView]
    next_cursor: str | None
