"""Pydantic models of the judge report (PROTOCOL.md sections 3-6).

``Report`` is the whole answer; ``BenchReport`` is its ``bench_report`` block
(bench_version 1), compatible with the hand-run reports in the shared seeds and
extended with the fields ideabench fills (all optional). Every model allows extra
keys, and no float anywhere in a report (extras included) may be NaN or inf.

``python -m bench.report > docs/report.schema.json`` regenerates the JSON schema.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


def _reject_non_finite(value: Any, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"non-finite number {value!r} at {where or 'top level'}")
    if isinstance(value, dict):
        for key, item in value.items():
            _reject_non_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _reject_non_finite(item, f"{where}[{index}]")


class _Model(BaseModel):
    """Base: extra keys kept, NaN/inf rejected everywhere (JSON cannot hold them)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _finite_everywhere(cls, data: Any) -> Any:
        _reject_non_finite(data, "")
        return data


class SweepRow(_Model):
    """One config of a sweep: its mean validation metric over the sweep seeds."""

    cfg: dict[str, Any]
    mean: float
    per_seed: list[float] | None = None
    diverged: int | None = None


class ArmFull(_Model):
    """An arm's final test metric over the fresh paired seeds."""

    mean: float | None = None
    std: float | None = None
    per_seed: list[float] | None = None
    n: int | None = None


class ArmResult(_Model):
    """One arm. Nested (best_cfg / sweep / full) or flat (mean / std / per_seed / n)."""

    best_cfg: dict[str, Any] | None = None
    sweep: list[SweepRow] | None = None
    full: ArmFull | None = None
    union_lr_grid: list[float] | None = None
    mean: float | None = None
    std: float | None = None
    per_seed: list[float] | None = None
    n: int | None = None
    n_params: int | None = None
    wall_time_s: float | None = None
    diverged: int | None = None


class Comparison(_Model):
    """Paired statistics of idea - baseline (PROTOCOL.md section 3; ``bench.stats.compare``)."""

    delta_mean: float
    idea_wins: int
    n_pairs: int
    p_value: float = Field(ge=0.0, le=1.0)
    verdict: Literal["idea better (significant)", "idea worse (significant)", "no significant win"]
    per_seed_diffs: list[float] | None = None
    p_method: str | None = None
    p_better: float | None = Field(default=None, ge=0.0, le=1.0)
    ci_low: float | None = None
    ci_high: float | None = None
    ci_level: float | None = None
    t_ci_low: float | None = None
    t_ci_high: float | None = None
    ci90_low: float | None = None
    ci90_high: float | None = None
    effect_size: float | None = None
    rel_delta_pct: float | None = None
    mde: float | None = None
    mde_rel_pct: float | None = None
    baseline_mean: float | None = None
    idea_mean: float | None = None
    alpha: float | None = None
    system_worked: bool | None = None


class MechanismSignature(_Model):
    """The declared prediction, both arms' measured values, and the service's decision."""

    quantity: str | None = None
    prediction: str | None = None
    expect: dict[str, Any] | None = None
    baseline_values: list[float] | None = None
    idea_values: list[float] | None = None
    baseline_mean: float | None = None
    idea_mean: float | None = None
    confirmed: bool | None = None
    detail: dict[str, Any] | None = None


class CustomTrack(_Model):
    """A track that is not built in (as in the seeds)."""

    name: str | None = None
    file: str | None = None
    domain: str | None = None
    # Filled by ideabench for a registered track (absent from the hand-run seeds).
    version: int | None = None
    author: str | None = None
    hash: str | None = None
    validation_warnings: list[str] | None = None  # what the track's validation warned about
    weak_baseline: bool | None = None  # its baseline did not beat the reference fits (validation or this job)
    # the job's baseline build was validation's, bit for bit (validation's seed epoch): only then it counts
    build_checked: bool | None = None
    reference_fits: dict[str, Any] | None = None  # this job's check: seeds, not_beaten, margin


class Seeds(_Model):
    """The seeds used: sweep seeds, the job's screening seeds (drawn from the epoch's pool;
    empty in an agent's view) and, when a confirmation ran, its seeds (expanded under the
    models' key; all three sets disjoint)."""

    sweep: list[int]
    final: list[int]
    confirmation: list[int] | None = None


class SeedCommitment(_Model):
    """The seed epoch a report's runs used and a commitment to its secret (never the secret).

    ``commitment`` is sha256 over ``"{scheme}|{epoch}|"`` and the epoch's key; once the
    epoch is retired its key is published and anyone can check it and rerun any run."""

    scheme: str
    epoch: int
    commitment: str


StageKey = Literal["baseline", "idea", "matched"]  # a stage's per-seed arms (matched: the baseline at the idea's lr)
STAGE_KEYS: tuple[StageKey, ...] = ("baseline", "idea", "matched")


class Stage(_Model):
    """One test stage (screening, or confirmation) of the protocol: paired per-seed values
    of both arms, their comparison, the seeds and the epoch they were drawn under."""

    comparison: Comparison
    per_seed: dict[StageKey, list[float]]
    seeds: list[int]
    seed_commitment: SeedCommitment
    diverged: dict[str, int] | None = None
    wall_time_s: dict[str, float] | None = None
    # When the arms' best learning rates differ: the baseline also trained at the idea's lr
    # (``lr``) on the same seeds, and the idea compared with it (``comparison``).
    matched_lr: dict[str, Any] | None = None


class ConfirmationLook(_Model):
    """One look of the confirmation: its first ``n_pairs`` pairs, their one-sided p that the
    idea is better, and the level that look is tested at (its share of alpha)."""

    n_pairs: int
    p_better: float = Field(ge=0.0, le=1.0)
    alpha: float


class Confirmation(Stage):
    """The confirmation stage (PROTOCOL.md 2.6): up to two looks on seeds of these models alone
    (expanded under ``model_key``, a hash of both arms' captured graphs and sweep-seed tensors:
    an identical model resubmitted gets the same seeds), n pairs and then 2n when the first is neither significant nor futile.
    The looks are tested at alpha / 5 and 4 alpha / 5; ``p_value`` is min(1, min over the looks
    of p / its share) (``bench.stats.confirmation_p``); significant when it is <= alpha. Reports from before the second look have no ``looks``."""

    p_value: float = Field(ge=0.0, le=1.0)
    significant: bool
    job_key: str
    model_key: str | None = None  # absent from reports before the models' key
    test: str | None = None
    n_runs: int | None = None
    looks: list[ConfirmationLook] | None = None
    baseline_cache: str | None = None  # never: the confirmation's seeds are fresh


class Attempts(_Model):
    """What came before this job on its track (PROTOCOL.md 6): the jobs of its idea family
    and of its key, and how many of those were judged ``helps``. Filled by the service when
    the report is stored (a local ``ideabench run`` has none)."""

    family: str | None = None
    family_before: int
    family_helps_before: int
    key: str | None = None
    key_before: int
    key_helps_before: int
    name: str | None = None


class BenchReport(_Model):
    """The ``bench_report`` block, bench_version 1."""

    bench_version: Literal[1]
    track: str
    model: str
    metric_direction: str
    metric: str | None = None  # the metric's name (absent from the hand-run seeds)
    n_seeds: int
    baseline: ArmResult
    idea: ArmResult
    comparison: Comparison  # the screening's (the seeds' field); ``screening`` repeats it with its values
    mechanism_signature: MechanismSignature | None = None
    idea_sweep: list[SweepRow] | None = None
    best_idea_cfg: dict[str, Any] | None = None
    parameter_parity: dict[str, Any] | None = None
    track_justification: str | None = None
    custom_track: CustomTrack | None = None
    # Filled by ideabench's engine (absent from the hand-run seeds).
    track_id: str | None = None
    track_version: int | None = None
    data_checksum: str | None = None
    seeds: Seeds | None = None
    seed_commitment: SeedCommitment | None = None
    screening: Stage | None = None
    confirmation: Confirmation | None = None
    decided_by: Literal["screening", "confirmation"] | None = None
    pooled: dict[str, Any] | None = None
    p_helps: float | None = Field(default=None, ge=0.0, le=1.0)
    attempts: Attempts | None = None
    public_data: bool | None = None
    lr_grid: list[float] | None = None
    union_grid_size: int | None = None
    budget: dict[str, Any] | None = None
    wall_time_s: dict[str, float] | None = None
    versions: dict[str, str] | None = None
    device: str | None = None
    warnings: list[str] | None = None
    isolation: list[str] | None = None
    sandbox: dict[str, Any] | None = None  # {"complete": bool, "missing": [judging layers it ran without]}
    matched_baseline_check: dict[str, Any] | None = None  # a matched baseline against the canonical one
    withheld: str | None = None  # what an agent's or viewer's view leaves out (withhold_reusable_seeds)
    own_track: bool | None = None  # judged on a custom track its own key registered: counted nowhere
    execution: dict[str, Any] | None = None
    diverged: dict[str, int] | None = None
    submission: dict[str, Any] | None = None
    capture: dict[str, Any] | None = None  # per arm: what the capture found (graph and tensor hashes, ops)
    smallest_effect: float | None = None  # the track's smallest effect, in the metric's units


class Report(_Model):
    """The whole judge report: verdicts, a plain-language summary, and ``bench_report``."""

    worked: bool
    summary: str
    metrics: dict[str, Any]
    system_verdict: Literal["worked", "partial", "failed"]
    practical_verdict: Literal["helps", "harms", "inconclusive"]
    practical_detail: Literal["negligible", "underpowered", "inconclusive", "not_replicated",
                              "lr_confounded", "below_effect", "weak_baseline"] | None = None
    mechanism_ok: Literal[0, 1] | None
    system_judged: bool
    bench_report: BenchReport

    @model_validator(mode="before")
    @classmethod
    def _summary_from_legacy_verdict(cls, data: Any) -> Any:
        # The hand-run seeds carry their plain-language paragraph as "verdict".
        if (
            isinstance(data, dict)
            and "summary" not in data
            and isinstance(data.get("verdict"), str)
        ):
            data = {**data, "summary": data["verdict"]}
        return data

    @model_validator(mode="after")
    def _worked_mirrors_system_verdict(self) -> Report:
        if self.worked != (self.system_verdict == "worked"):
            raise ValueError("worked must equal (system_verdict == 'worked')")
        return self


# Per-seed values of seeds other jobs reuse (the sweep's, the screening pool's, and the
# confirmation's, the same for every job of one pair of models) teach an agent which init won
# where, or what a file wrote of its seeds into its numbers; they are withheld from everyone but
# operators (issue 25.6; withhold_reusable_seeds).
PER_SEED_KEYS = frozenset({"per_seed", "per_seed_diffs", "baseline_values", "idea_values"})
WITHHELD = ("per-seed values and screening seed numbers are withheld: the sweep's and the screening's seeds are "
            "reused by other jobs, the confirmation's by every job of the same models")


def withhold_reusable_seeds(body: dict[str, Any]) -> dict[str, Any]:
    """A stored report as an agent or viewer sees it: every per-seed list (``PER_SEED_KEYS``)
    dropped (a stage's ``per_seed`` emptied), the screening seed numbers nulled, and
    ``bench_report.withheld`` saying so. Means, spreads, tests and verdicts stay. A copy.

    The confirmation's too (issue 25, red team): its seeds are the same for every job of one
    pair of models (resubmitting re-rolls nothing), and a file that writes what it knows of its
    seeds into its own numbers could read them back from per-seed values, then tell the
    confirmation's builds from their decoys (``bench.protocol.Job.capture_confirmation``)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in PER_SEED_KEYS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    bench = body.get("bench_report")
    if not isinstance(bench, dict):
        return body
    out = strip(bench)
    for stage in ("screening", "confirmation"):
        if isinstance(out.get(stage), dict):
            out[stage]["per_seed"] = {}
    if isinstance(out.get("screening"), dict):
        out["screening"]["seeds"] = []
    if isinstance(out.get("seeds"), dict):
        out["seeds"]["final"] = []
    if isinstance(out.get("matched_baseline_check"), dict):
        out["matched_baseline_check"]["seeds"] = []
    out["withheld"] = WITHHELD
    return {**body, "bench_report": out}


def runs_made(bench_report: dict[str, Any]) -> int:
    """The training runs a report's job made, both arms: the sweep's, the screening's (each
    value the mean of ``budget.repeats_made.screening`` runs; the baseline at the idea's rate included) and
    the confirmation's (cache hits included: ``execution.baseline_cache_hits`` counts those)."""
    sweep = sum(len(row["per_seed"]) for arm in ("baseline", "idea") for row in bench_report[arm]["sweep"])
    made = (bench_report.get("budget") or {}).get("repeats_made", {}).get("screening", [1])[0]
    screening = int(made) * sum(len(values) for values in bench_report["screening"]["per_seed"].values())
    confirmation = int(bench_report["confirmation"]["n_runs"]) if bench_report["confirmation"] else 0
    return sweep + screening + confirmation


def report_json_schema() -> dict[str, Any]:
    """The JSON schema of ``Report`` (validation mode)."""
    return Report.model_json_schema()


def schema_text() -> str:
    """The schema as stable text: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(report_json_schema(), indent=2, sort_keys=True) + "\n"


def export_json_schema(path: str | Path) -> None:
    """Write the ``Report`` JSON schema to ``path`` (e.g. docs/report.schema.json)."""
    Path(path).write_text(schema_text(), encoding="utf-8")


if __name__ == "__main__":
    sys.stdout.write(schema_text())
