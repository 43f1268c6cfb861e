"""Response bodies of the report and verdict routes."""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class SystemVerdict(StrEnum):
    """PROTOCOL.md section 5."""

    WORKED = "worked"
    PARTIAL = "partial"
    FAILED = "failed"


class PracticalVerdict(StrEnum):
    """PROTOCOL.md section 5."""

    HELPS = "helps"
    HARMS = "harms"
    INCONCLUSIVE = "inconclusive"


class MechanismFilter(StrEnum):
    """``mechanism_ok`` as a query value: confirmed, not confirmed, none declared."""

    TRUE = "true"
    FALSE = "false"
    NONE = "none"


class ReportSort(StrEnum):
    """Sort orders of the report listing (``-`` = descending)."""

    CREATED_DESC = "-created_at"
    CREATED = "created_at"
    P_VALUE = "p_value"
    P_VALUE_DESC = "-p_value"
    DELTA = "delta"
    DELTA_DESC = "-delta"
    P_HELPS = "p_helps"  # the one-sided p that the idea helps, smallest first: the q-values' order


_SUMMARY_EXAMPLE: dict[str, Any] = {
    "report_id": "rep_0d9c8b7a6f5e4d3c2b1a",
    "job_id": "job_4be1f0c2a9d3e8b7c6a5",
    "track": "smoke",
    "name": "silu-wide",
    "system_verdict": "worked",
    "practical_verdict": "helps",
    "practical_detail": None,
    "mechanism_ok": True,
    "worked": True,
    "p_value": 0.0078125,
    "delta_mean": -0.0123,
    "delta_stage": "screening",
    "family": "ast-v1:2fdce545918b3110",
    "baseline": "canonical",
    "p_helps": 0.00390625,
    "q_value": 0.0234,
    "q_value_baseline": 0.0234,
    "counted": True,
    "submitter": "key_1a2b3c4d",
    "created_at": "2025-05-01T12:00:14Z",
    "links": {"self": "/v1/reports/rep_0d9c8b7a6f5e4d3c2b1a", "job": "/v1/jobs/job_4be1f0c2a9d3e8b7c6a5"},
}


class ReportLinks(BaseModel):
    """The report itself and the job that made it."""

    model_config = ConfigDict(populate_by_name=True)

    self_: str = Field(alias="self", serialization_alias="self")
    job: str


class ReportSummary(BaseModel):
    """A light row per report: verdicts and headline statistics."""

    model_config = ConfigDict(json_schema_extra={"examples": [_SUMMARY_EXAMPLE]})

    report_id: str
    job_id: str
    track: str
    custom_track: bool = Field(default=False, description="Judged on a registered custom track.")
    name: str | None
    system_verdict: str
    practical_verdict: str
    practical_detail: str | None
    mechanism_ok: bool | None
    worked: bool
    p_value: float | None = Field(description=(
        "The screening's exact two-sided paired p: descriptive. The verdict is decided by the one-sided "
        "test (p_helps; the report's bench_report.decided_by names it, with its looks and level)."))
    delta_mean: float | None = Field(description=(
        "The idea's mean paired difference (idea - baseline) in the metric's units, of the stage "
        "that decided the verdict (delta_stage)."))
    delta_stage: str = Field(default="screening", description=(
        "Which stage delta_mean is from: confirmation when one ran (it decided), else screening."))
    family: str | None = Field(default=None, description="The idea family (re-rolls of one idea share it).")
    baseline: str | None = Field(default=None, description="canonical, or matched (matched:<sha256 prefix> before session 36).")
    p_helps: float | None = Field(
        default=None, description="One-sided exact p that the idea helps (both stages' larger when confirmed)."
    )
    q_value: float | None = Field(
        default=None, description="Benjamini-Hochberg q-value of p_helps over every idea judged on the track so far."
    )
    q_value_baseline: float | None = Field(
        default=None, description="The same over the track's ideas judged against this baseline."
    )
    counted: bool = Field(default=True, description=(
        "Whether this verdict enters the track's totals, q-values and discoveries. False when it was "
        "judged under a weak sandbox (a development setting), on a custom track its own key registered, "
        "on a custom track whose baseline did not beat the bench's reference fits, or on a custom track "
        "version no operator has vouched for yet (the track card's vouched)."))
    submitter: str
    created_at: dt.datetime
    links: ReportLinks


class ReportView(ReportSummary):
    """A whole report: the summary row plus the full report JSON of PROTOCOL.md."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    **_SUMMARY_EXAMPLE,
                    "report": {
                        "worked": True,
                        "summary": "The SiLU idea lowers test MSE on all 8 paired seeds (p = 0.0078) ...",
                        "metrics": {"baseline_mse": 0.3141, "idea_mse": 0.3018},
                        "system_verdict": "worked",
                        "practical_verdict": "helps",
                        "practical_detail": None,
                        "mechanism_ok": 1,
                        "system_judged": True,
                        "bench_report": {
                            "bench_version": 1,
                            "track": "smoke",
                            "n_seeds": 8,
                            "comparison": {"delta_mean": -0.0123, "p_value": 0.0078125, "idea_wins": 8,
                                           "n_pairs": 8, "verdict": "idea better (significant)"},
                        },
                    },
                }
            ]
        }
    )

    report: dict[str, Any]


class ReportPage(BaseModel):
    """One page of report rows; pass ``next_cursor`` back as ``cursor``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [_SUMMARY_EXAMPLE], "next_cursor": None}]})

    items: list[ReportSummary]
    next_cursor: str | None


class Discoveries(BaseModel):
    """A track's false-discovery accounting over every idea judged on it so far (all time, not
    only the summary's window; docs/statistics.md)."""

    judged: int = Field(description="Judged ideas whose p_helps enters the Benjamini-Hochberg procedure.")
    worked: int
    q_max_worked: float | None = Field(description="The largest q-value among worked ideas (null: none).")
    expected_false_worked: float = Field(
        description="Upper estimate of false discoveries among worked: q_max_worked x the ideas at or below it."
    )


class VerdictCounts(BaseModel):
    """How many reports of one track got each verdict pair in one period (or in the whole range).

    ``counts`` is keyed ``"<system_verdict>/<practical_verdict>"``; pairs with no
    report are left out.
    """

    period: dt.date | None = Field(description="First day of the day or ISO week; null in totals.")
    track: str
    kind: Literal["builtin", "custom"] = Field(default="builtin", description="A built-in or a custom track.")
    counts: dict[str, int]
    total: int
    discoveries: Discoveries | None = Field(
        default=None, description="In totals only: the track's false-discovery accounting, all time."
    )


class VerdictSummary(BaseModel):
    """Verdict-pair counts by track and period over ``[since, until]`` (UTC days, inclusive)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "bucket": "day",
                    "since": "2025-04-02",
                    "until": "2025-05-01",
                    "rows": [{"period": "2025-05-01", "track": "smoke", "kind": "builtin", "total": 15,
                              "counts": {"worked/helps": 12, "failed/inconclusive": 3}}],
                    "totals": [{"period": None, "track": "smoke", "kind": "builtin", "total": 15,
                                "counts": {"worked/helps": 12, "failed/inconclusive": 3},
                                "discoveries": {"judged": 15, "worked": 12, "q_max_worked": 0.0125,
                                                "expected_false_worked": 0.15}}],
                }
            ]
        }
    )

    bucket: Literal["day", "week"]
    since: dt.date
    until: dt.date
    rows: list[VerdictCounts]
    totals: list[VerdictCounts]
