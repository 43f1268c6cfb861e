"""Request and response bodies of POST /v1/compare."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat


class CompareRequest(BaseModel):
    """Per-seed test metrics of both arms, paired by position (pair i shares seed i)."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "baseline": [0.412, 0.398, 0.405, 0.420, 0.401, 0.399, 0.415, 0.408],
                    "idea": [0.395, 0.390, 0.401, 0.404, 0.392, 0.396, 0.400, 0.397],
                    "lower_is_better": True,
                    "alpha": 0.05,
                }
            ]
        },
    )

    # Strict: JSON's true is not the number 1, nor 0 false (strict floats still take integers).
    baseline: list[StrictFloat] = Field(min_length=2, max_length=64)
    idea: list[StrictFloat] = Field(min_length=2, max_length=64)
    lower_is_better: StrictBool = True
    alpha: StrictFloat = Field(default=0.05, gt=0.0, lt=1.0)


class Comparison(BaseModel):
    """The report's ``comparison`` block (PROTOCOL.md section 3); more keys may appear."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "delta_mean": -0.010125,
                    "idea_wins": 8,
                    "n_pairs": 8,
                    "per_seed_diffs": [-0.017, -0.008, -0.004, -0.016, -0.009, -0.003, -0.015, -0.011],
                    "p_value": 0.0078125,
                    "p_method": "exact sign-flip (2^8 = 256 patterns)",
                    "ci_low": -0.0155,
                    "ci_high": -0.006,
                    "ci_level": 0.95,
                    "effect_size": -1.91,
                    "rel_delta_pct": -2.48,
                    "mde": 0.0052,
                    "baseline_mean": 0.40725,
                    "idea_mean": 0.397125,
                    "alpha": 0.05,
                    "verdict": "idea better (significant)",
                    "system_worked": True,
                }
            ]
        },
    )

    delta_mean: float
    idea_wins: int
    n_pairs: int
    p_value: float
    verdict: str
