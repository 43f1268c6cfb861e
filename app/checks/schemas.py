"""The check's request and answer."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.jobs.schemas import JobError, no_nul


class IdeaCheckRequest(BaseModel):
    """An idea to check before submitting it: the fields of POST /v1/ideas that shape the models."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"track": "smoke", "code": "from torch import nn\n\ndef build_model(spec):\n"
         "    return nn.Sequential(nn.Linear(spec['n_features'], 32), nn.ReLU(), nn.Linear(32, 1))\n"}]})

    track: str = Field(min_length=1, max_length=64, description="A built-in track name from GET /v1/tracks.")
    code: str = Field(min_length=1, description="The idea file: Python source defining build_model(spec).")
    baseline_code: str | None = Field(default=None, description="A matched baseline file (same contract).")
    hparams: dict[str, list[Any]] | None = Field(default=None, description="Extra sweep grid (as in POST /v1/ideas).")
    mechanism: dict[str, Any] | None = Field(default=None, description="A mechanism signature (as in POST /v1/ideas).")

    @field_validator("track", "hparams", "mechanism")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """The submission's rule (a fuzzed NUL in a mechanism key failed the IdeaSubmission the
        static checks are made from: a 500)."""
        return no_nul(value)


class CheckLinks(BaseModel):
    self: str = Field(description="GET it (?wait=N long-polls until it ends).")
    submit: str = Field(description="POST the same idea here to judge it.")


class CheckView(BaseModel):
    """A check: ``passed`` (a job would start training: what it found is in ``result``),
    ``failed`` (a job would end with ``error``), or still ``pending`` / ``running``."""

    check_id: str
    status: Literal["pending", "running", "passed", "failed"]
    track: str
    created_at: datetime
    finished_at: datetime | None
    result: dict[str, Any] | None = Field(description=(
        "passed: the configs, each arm's parameters, buffer words and FLOPs per example against the "
        "limits a job enforces, the execution path, the mechanism, and the runs a job would make."))
    error: JobError | None = Field(description="failed: the code, message and hint a job would end with.")
    links: CheckLinks
