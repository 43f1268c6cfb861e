"""The one settings object, read from environment variables.

Defaults are the embedded mode: a SQLite database and a SQLite Celery broker
under ``./var`` of the working directory. Production sets ``DATABASE_URL``
(Postgres) and ``BROKER_URL`` (Redis). Every other field reads
``IDEABENCH_<FIELD>`` (e.g. ``IDEABENCH_DEVICE=cuda:0``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from bench.options import HostOptions

JobDevice = Literal["cpu", "gpu"]


class Settings(BaseSettings):
    """Service configuration; construct it at run time, never at import time."""

    model_config = SettingsConfigDict(env_prefix="IDEABENCH_", extra="ignore", populate_by_name=True)

    data_dir: Path = Field(default=Path("var"), description="Where embedded-mode files live.")
    database_url: str = Field(
        default="",
        validation_alias=AliasChoices("DATABASE_URL", "IDEABENCH_DATABASE_URL", "database_url"),
        description="SQLAlchemy URL; empty means sqlite:///<data_dir>/ideabench.db.",
    )
    broker_url: str = Field(
        default="",
        validation_alias=AliasChoices("BROKER_URL", "IDEABENCH_BROKER_URL", "broker_url"),
        description="Celery broker URL; empty means sqla+sqlite:///<data_dir>/broker.db.",
    )

    log_format: Literal["text", "json"] = Field(default="text", description="Log lines as text or as JSON "
                                                 "lines; both carry the request id (app/logs.py).")

    # HTTP
    max_body_bytes: int = 256 * 1024
    cors_origins: list[str] = Field(default=[], description="Origins a browser may call the API from "
                                    "(CORS); empty: CORS is off.")
    key_cache_s: float = Field(default=5.0, description="How long an API process trusts a checked key.")

    # Dashboard (app/dashboard): a signed session cookie after sign-in with a key
    session_secret: SecretStr = Field(default=SecretStr(""), description="Signs the dashboard's session "
                                      "cookies; empty: a random one kept in <data_dir>/session_secret "
                                      "(set it when several API processes share no data dir).")
    dashboard_session_s: int = Field(default=8 * 3600, ge=60, description="How long a dashboard sign-in "
                                     "lasts.")
    public_origin: str = Field(default="", description="The origin browsers reach the service at "
                               "(https://bench.example.org) when a proxy terminates TLS or rewrites Host: the "
                               "dashboard's forms check Origin against it, and its cookie is Secure when it is "
                               "https. Empty: the request's own scheme and host.")

    # Jobs (API side)
    default_job_device: JobDevice = "cpu"
    track_validations_per_key: int = Field(
        default=2, ge=1,
        description="Custom tracks one key may have in status validating at once (each holds a worker "
        "for up to 15 minutes); operators are exempt.",
    )
    estimate_run_s: float = 1.0
    stream_max_s: float = Field(
        default=300.0, gt=0, description="An event stream is closed after this long (the client resumes "
        "with Last-Event-ID), so no connection is held forever.")
    long_poll_max_s: float = Field(default=60.0, gt=0, le=60.0,
                                   description="The longest GET /v1/jobs/{job_id}?wait= waits.")
    # Fair use (app/fair_use.py); operators are exempt.
    rate_limit: str = Field(default="3000/minute", description="Requests per key, in the limits "
                            "library's notation (e.g. 50/second, 3000/minute).")
    rate_limit_storage: str = Field(default="", description="Where request counts live: empty for "
                                    "memory (one process), redis://host:6379/N to share them.")
    max_active_jobs_per_key: int = Field(default=50, ge=0, description="Jobs queued or running per key (0: no cap).")
    daily_job_quota_per_key: int = Field(default=0, ge=0, description="Jobs per key per UTC day (0: none).")

    # Webhooks (app/webhooks): sent by the API processes (the tier with internet egress).
    send_webhooks: bool = Field(default=True, description="Whether this API process sends due job-end "
                                "webhooks (a thread; several processes share the work, each attempt "
                                "claimed by one). False on API processes that must not reach the internet.")
    webhook_allow_private: bool = Field(
        default=False, description="Allow callback URLs on loopback and private addresses (tests, a "
        "closed network); off, a callback could reach the service's own network.")
    webhook_timeout_s: float = 10.0
    webhook_retry_s: list[float] = Field(
        default=[10.0, 60.0, 300.0, 1800.0, 7200.0, 21600.0],
        description="Seconds before each retry of a webhook that was not delivered; then it has failed.")
    webhook_every_s: float = Field(default=1.0, description="How often an API process looks for due webhooks.")

    # Workers
    device: str = Field(default="cpu", description="The worker's device: cpu, cuda or cuda:N.")
    job_timeout_s: float = 1800.0
    job_memory_mb: int = 6144
    # Checks before the queue (POST /v1/ideas/check, app/checks): a thread of every judging worker.
    check_timeout_s: float = Field(default=120.0, gt=0, description="How long one check may take.")
    check_poll_s: float = Field(default=0.5, gt=0, description="How often a worker looks for pending checks.")
    check_pending_s: float = Field(default=300.0, gt=0, description=(
        "A check no worker took within this ends failed (not_ready)."))
    capture_timeout_s: float = Field(default=120.0, gt=0, description=(
        "How long building one arm's models (every config and init seed) may take; a build_model "
        "that takes longer ends the job capture_timeout."))
    warm_children: bool = Field(
        default=True, description="Start the next job's sandboxed children (torch imported) ahead of it."
    )
    lease_s: float = 60.0
    heartbeat_s: float = 2.0
    progress_min_interval_s: float = 0.5
    requeue_after_s: float = 120.0
    max_attempts: int = 3
    reconcile_every_s: float = 15.0
    dispatch_every_s: float = Field(
        default=0.25, gt=0, description="How often each worker sends the queued jobs not sent yet (the API "
        "commits a job and sends no message)."
    )
    worker_seen_s: float = 120.0
    worker_pool: Literal["solo", "prefork", "threads"] = "solo"
    worker_metrics_port: int = Field(default=0, ge=0, le=65535, description=(
        "A worker serves its own Prometheus metrics on this port (workers/metrics.py); 0: off."))
    worker_metrics_addr: str = Field(default="127.0.0.1", description=(
        "The address the worker's metrics listen on (0.0.0.0 in a container; no key is asked)."))
    broker_poll_s: float = 0.1

    # The engine on this host (workers and ``ideabench run``), handed to bench as EngineOptions
    # (``host_options``): bench reads no environment itself.
    seed_secret: SecretStr = Field(default=SecretStr(""), description=(
        "The seed epoch's key (hex, >= 32 digits) every worker of a deployment shares; empty: the current "
        "epoch of <data_dir>/seed_secret.json (generated on first use)."))
    seed_epoch: int = Field(default=1, ge=1, description="The epoch seed_secret belongs to.")
    cache_dir: Path | None = Field(default=None, description=(
        "Per-worker caches (canonical-baseline runs, custom tracks' data); empty: <data_dir>/cache."))
    baseline_cache: bool = Field(default=True, description="Reuse canonical-baseline runs across jobs.")
    execution: Literal["auto", "sequential"] = Field(default="auto", description=(
        "auto batches runs where both arms' models allow it; sequential trains one run at a time."))
    bwrap: str = Field(default="", description=(
        "Bubblewrap's path for the sandbox; empty: found on PATH; 0: none (then nothing is judged unless "
        "allow_weak_sandbox)."))
    allow_weak_sandbox: bool = Field(default=False, description=(
        "Development only: run submitted code without the sandbox's judging layers (namespaces, no network, "
        "empty environment, no_new_privs, seccomp); such reports say so and count in no totals."))
    require_full_isolation: bool = Field(default=False, description=(
        "Production: refuse any child without every sandbox layer (cgroups included); overrides "
        "allow_weak_sandbox."))

    fork_server: bool = Field(default=True, description=(
        "A job forks its sandboxed children from one sandbox that imported torch once, each child "
        "restricted by Landlock to its own view and moved into its own cgroup; used only where the "
        "kernel has Landlock ABI >= 6 and the cgroups (else, or off, every child starts fresh)."))

    @model_validator(mode="after")
    def _embedded_defaults(self) -> Settings:
        # Resolved once, against the working directory of the process that builds
        # the settings, so the API and its worker agree on the same files.
        self.data_dir = self.data_dir.expanduser().resolve()
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'ideabench.db'}"
        if not self.broker_url:
            self.broker_url = f"sqla+sqlite:///{self.data_dir / 'broker.db'}"
        return self

    @property
    def embedded(self) -> bool:
        """True when the database is a SQLite file (the one-command mode)."""
        return self.database_url.startswith("sqlite")

    def host_options(self) -> HostOptions:
        """What the engine is handed on this host (``bench.options``): a job's caches and
        execution, the seed secret and the sandbox's policy, all from these settings."""
        from bench.options import EngineOptions, HostOptions
        from bench.sandbox import SandboxPolicy

        return HostOptions(
            engine=EngineOptions(cache_dir=self.cache_dir or self.data_dir / "cache",
                                 baseline_cache=self.baseline_cache, execution=self.execution),
            data_dir=self.data_dir, seed_secret=self.seed_secret.get_secret_value(), seed_epoch=self.seed_epoch,
            sandbox=SandboxPolicy(bwrap=self.bwrap, allow_weak=self.allow_weak_sandbox,
                                  require_full_isolation=self.require_full_isolation,
                                  fork_server=self.fork_server),
        )

    @property
    def worker_queue(self) -> str:
        """The queue this worker consumes: ``gpu`` for a CUDA device, else ``cpu``."""
        return "gpu" if self.device.startswith("cuda") else "cpu"


def get_settings() -> Settings:
    """A fresh settings object from the environment."""
    return Settings()
