"""Track bodies: built-in cards (``card.json`` plus the example idea) and custom tracks."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.tracks.models import TrackStatus

_SOURCE_EXAMPLE = '''"""A tiny custom track: y = sum of squares of 4 features."""
import numpy as np
from torch import nn

CARD = {
    "name": "sum_of_squares",
    "title": "Sum of squares of four features",
    "description": "x: float32 (B, 4) standard normal; y: float32 (B, 1) = sum of x**2.",
    "domain": "quadratic forms",
    "justification": "No built-in track isolates a pure quadratic form of the inputs.",
    "spec": {"task": "regression", "input_shape": [4], "output_shape": [1]},
    "metric": {"name": "mse"},
    "defaults": {"epochs": 10, "batch_size": 64, "lr_grid": [0.003, 0.01, 0.03]},
    "param_cap": 5000,
    "baseline": {"name": "mlp_small", "description": "Linear(4,32)-ReLU-Linear(32,1)"},
}


def make_splits(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((768, 4)).astype(np.float32)
    y = (x**2).sum(axis=1, keepdims=True).astype(np.float32)
    return {"x_train": x[:512], "y_train": y[:512], "x_val": x[512:640], "y_val": y[512:640],
            "x_test": x[640:], "y_test": y[640:]}


def build_baseline(spec):
    return nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 1))
'''


class JobLimits(BaseModel):
    """A job's limits on this deployment (the same on every track)."""

    capture_timeout_s: float = Field(description="Building one arm's models (every config and init seed); "
                                     "longer: capture_timeout.")
    job_timeout_s: float = Field(description="The whole protocol; longer: timeout.")
    memory_mb: int = Field(description="Memory of each sandboxed process; more: out_of_memory.")
    compute_ratio: float | None = Field(default=None, description="This track's cap on the idea's forward FLOPs "
                                        "per example, as a multiple of the baseline's; more: compute_parity.")


class TrackCard(BaseModel):
    """A track's spec, metric, defaults and limits, built-in or custom (all card fields kept).

    An agent can write a valid idea from this answer alone: ``spec`` is what
    ``build_model(spec)`` receives; a built-in track's ``example_idea`` is a
    complete idea file. Custom tracks add who registered them, why, and where
    their validation stands.
    """

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="name@version")
    name: str
    version: int
    kind: Literal["builtin", "custom"] = "builtin"
    title: str | None = None
    description: str | None = None
    spec: dict[str, Any]
    metric: dict[str, Any]
    defaults: dict[str, Any]
    param_cap: int | None = None
    max_configs: int | None = None
    example_idea: str | None = Field(default=None, description="A complete idea file (built-in tracks).")
    n_reports: int = Field(default=0, description="Reports judged on this track (this version, if custom).")
    status: TrackStatus | None = Field(default=None, description="validating, active or rejected (built-in: active).")
    deprecated: bool | None = None
    available: bool = Field(default=True, description="Whether this deployment can run the track now; a "
                            "submission to one that cannot is refused at once (track_unavailable).")
    unavailable_reason: str | None = Field(default=None, description="Why not, when available is false.")
    limits: JobLimits | None = Field(default=None, description="What every job on this deployment may spend.")
    author: str | None = Field(default=None, description="ideabench, or the key id (or CLI author) that registered it.")
    # Custom tracks only.
    domain: str | None = None
    justification: str | None = Field(default=None, description="Why no built-in track fits.")
    sha256: str | None = Field(default=None, description="Content hash of the track file.")
    created_at: datetime | None = None
    validated_at: datetime | None = None
    validation: dict[str, Any] | None = Field(
        default=None, description="What validation measured: sizes, determinism, baseline smoke run, "
        "estimated protocol seconds, warnings."
    )
    error: dict[str, str] | None = Field(default=None, description="{code, message, hint} when rejected.")
    vouched: bool = Field(default=True, description=(
        "Whether verdicts on this track count in totals, q-values and discoveries. Built-in tracks: "
        "true. A custom version: false until an operator has read its file and vouches for its data "
        "and baseline (PUT /v1/tracks/{id}/vouch); until then its reports are judged and readable "
        "but counted nowhere."))
    vouched_at: datetime | None = Field(default=None, description="When an operator vouched (custom tracks).")
    vouched_by: str | None = Field(default=None, description="The operator key (or CLI user) that vouched.")
    source: str | None = Field(default=None, description="The track file (GET of one custom track).")
    links: dict[str, str] | None = None


class TrackList(BaseModel):
    """Built-in tracks, then custom track versions by name and version."""

    items: list[TrackCard]


class TrackRegistration(BaseModel):
    """A custom track file to register (validated in the sandbox before it takes jobs)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"source": _SOURCE_EXAMPLE, "file_name": "sum_of_squares.py"}]
    })

    source: str = Field(min_length=1, max_length=131072, description=(
        "One Python file defining CARD (a literal dict: name, title, description, domain, "
        "justification, spec, metric, defaults, param_cap, baseline), make_splits(seed) returning "
        "x/y train/val/test arrays, and build_baseline(spec) returning a torch.nn.Module."))
    file_name: str | None = Field(default=None, max_length=200, description="The file's name, for reports.")
