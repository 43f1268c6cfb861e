"""Turns a finished protocol run into the report (``bench.report.Report`` as JSON data).

The protocol hands over an ``Outcome``: plain data, fixed when the job ends, that flows one
way into ``build_report``; nothing here reaches back into the running job.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

import numpy as np

from bench import BENCH_VERSION
from bench import report as model
from bench.card import TrackSettings
from bench.decide import lr_matched, p_helps, reaches, stage_comparisons, stage_p, unchecked_at
from bench.report import Report
from bench.sandbox import ALLOW_WEAK_ENV, missing_judge_layers
from bench.stats import (
    ALPHA,
    CONFIRMATION_LOOKS,
    CONFIRMATION_SHARES,
    HARMS_ON_FIRST_RUNS,
    HARMS_WHY,
    Comparison,
    compare,
    confirmation_p,
)
from bench.verdicts import decide, mechanism_confirmed

ARMS = ("baseline", "idea")


@dataclass(frozen=True)
class Stage:
    """One test stage: test values per seed (``baseline``, ``idea``, and ``matched`` when the
    baseline also ran at the idea's learning rate ``matched_lr``), diverged runs filled; the
    seeds; diverged runs and seconds per key."""

    values: dict[str, list[float]]
    seeds: list[int]
    diverged: dict[str, int]
    seconds: dict[str, float]
    matched_lr: float | None = None
    # the same pairs' first-run values, where the stage looked at them (an efficacy stop possible)
    # before making its repeats: its tests count that stop (bench.decide.stage_comparisons)
    first: dict[str, list[float]] | None = None
    # values are means of repeat runs, made because the first runs favoured the idea: harms is
    # left to first runs (bench.decide.stage_comparisons)
    repeated: bool = False

    def tests(self, lower_is_better: bool) -> list[Comparison]:
        """The stage's tests against each baseline it ran (``bench.decide.stage_comparisons``)."""
        return stage_comparisons(self.values, lower_is_better, self.first, repeated=self.repeated)


@dataclass(frozen=True)
class Outcome:
    """What one judged job found, as the report needs it (built by ``bench.protocol``)."""

    card: dict[str, Any]
    matched_baseline: bool  # a submitted matched baseline, not the track's
    custom_track: dict[str, Any] | None  # the custom track's report block
    submission: dict[str, Any]  # name, hypothesis
    mechanism: dict[str, Any] | None  # the checked MECHANISM
    measured: dict[str, list[float]] | None  # its values per arm
    screening: Stage
    confirmation: Stage | None  # every pair it ran
    first_look: Stage | None  # its first look's pairs, as they were when the look was decided
    confirmation_runs: int
    job_key: str
    model_key: str  # the confirmation's seeds are expanded under it (seeding.model_key)
    seed_commitment: dict[str, Any]
    n_params: dict[str, int]
    buffers: dict[str, int]
    flops: dict[str, float]  # forward FLOPs per example per arm (the trusted trainer's count)
    tensors: dict[str, int]  # parameter tensors per arm (the trusted trainer's count)
    diverged: dict[str, int]  # every run of the arm
    wall: dict[str, float]  # seconds of every run of the arm
    sweep_tables: dict[str, list[dict[str, Any]]]
    best_cfgs: dict[str, dict[str, Any]]
    lr_grids: dict[str, list[float]]
    capture: dict[str, dict[str, Any]]
    data_checksum: str
    sweep_seeds: list[int]
    isolation: list[str]
    execution: dict[str, Any]
    warnings: list[str]
    device: str
    wall_s: float
    # A matched baseline's check against the track's canonical baseline (bench.protocol).
    matched_check: dict[str, Any] | None = None
    # On a custom track: on how many test seeds the baseline beat the bench's reference fits
    # (seeds, not_beaten, margin; Job.reference_check).
    references: dict[str, Any] | None = None
    # Runs per seed each test stage's looks made (``screening``: [n], ``confirmation``: one per
    # look): the card's repeats, or 1 where the first runs decided the look (bench.decide:
    # repeats_futile, efficacy).
    repeats_made: dict[str, list[int]] = field(default_factory=dict)
    # Each arm's dearest forward per example (``bench.decide.dearest_per_example``, the trusted
    # trainer's count): what compute parity also holds an idea to (a matched baseline's job takes
    # the canonical baseline's from its check).
    dearest: dict[str, float] = field(default_factory=dict)

    @property
    def lower_is_better(self) -> bool:
        return bool(self.card["metric"]["direction"] == "lower")


def _versions() -> dict[str, str]:
    import torch

    try:
        ours = version("ideabench")
    except PackageNotFoundError:
        ours = "unknown"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "ideabench": ours,
    }


def _full(values: list[float]) -> dict[str, Any]:
    return {
        "mean": float(np.mean(values)),
        "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
        "per_seed": [float(v) for v in values],
        "n": len(values),
    }


def _fmt_cfg(cfg: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in cfg.items())


def _bound(value: float | None, unbounded: str) -> str:
    return unbounded if value is None else f"{value:.4g}"


def _runs_each(looks: list[int], seed_value: str = "mean") -> str:
    """" (each the mean of 4 runs per arm)" where a stage's looks ran seeds more than once ("the
    trimmed mean" where the card's ``seed_value`` says so and eight or more ran)."""
    if not any(n > 1 for n in looks):
        return ""
    what = "trimmed mean" if seed_value == "trimmed" and max(looks) >= 8 else "mean"
    if len(set(looks)) == 1:
        return f" (each the {what} of {looks[0]} runs per arm)"
    return f" (each the {what} of up to {max(looks)} runs per arm)"


def summary_text(
    track_id: str, metric: str, comparison: Comparison, verdicts: dict[str, Any],
    mechanism: dict[str, Any] | None, n_params: dict[str, int], confirmation: model.Confirmation | None = None,
    matched: tuple[float, Comparison] | None = None, repeats_made: dict[str, list[int]] | None = None,
    seed_value: str = "mean",
) -> str:
    """One plain-language paragraph in the style of the seed reports' ``verdict``; where a
    card's repeats ran (``repeats_made``), what each seed's value is."""
    c = comparison
    better = "lower" if c.delta_mean < 0 else "higher"
    made = repeats_made or {}
    text = (
        f"On {track_id}, across {c.n_pairs} paired seeds{_runs_each(made.get('screening', []), seed_value)} the idea reached {metric} "
        f"{c.idea_mean:.6g} versus the baseline's {c.baseline_mean:.6g} "
        f"(paired delta {c.delta_mean:+.6g}, {better}; {c.rel_delta_pct:+.2f}%), "
        f"winning {c.idea_wins}/{c.n_pairs} pairs; exact sign-flip p={c.p_value:.4g} (two-sided, descriptive), "
        f"95% CI of the delta [{_bound(c.ci_low, '-inf')}, {_bound(c.ci_high, 'inf')}], "
        f"MDE {c.mde:.4g} ({c.mde_rel_pct:.1f}% of the baseline): {c.verdict} (two-sided). "
    )
    harms_note = f"{HARMS_WHY[0].upper()}{HARMS_WHY[1:]}. "
    if HARMS_ON_FIRST_RUNS in c.p_method:
        text += harms_note
    if matched is not None:
        lr, k = matched
        text += (
            f"Against the baseline trained at the idea's learning rate ({lr:g}): delta "
            f"{k.delta_mean:+.6g}, p={k.p_value:.4g} (two-sided): {k.verdict}. "
        )
        if HARMS_ON_FIRST_RUNS in k.p_method:
            text += harms_note
    if confirmation is not None:
        kc = confirmation.comparison
        looks = confirmation.looks or []
        text += (
            f"Confirmation on {kc.n_pairs} fresh seeds of this job{_runs_each(made.get('confirmation', []), seed_value)}"
            f"{f' (in {len(looks)} looks)' if len(looks) > 1 else ''}: delta {kc.delta_mean:+.6g}, "
            f"the idea won {kc.idea_wins}/{kc.n_pairs}, p={confirmation.p_value:.4g} "
            f"(one-sided, adjusted for its looks, at level {kc.alpha if kc.alpha is not None else ALPHA:g}; "
            f"the test that decided): "
            f"{'replicated' if confirmation.significant else 'not replicated'}. "
        )
    practical = verdicts["practical_verdict"]
    if practical == "inconclusive" and verdicts.get("practical_detail"):
        text += f"Practically the idea is inconclusive ({verdicts['practical_detail']}). "
    else:
        text += f"Practically the idea {practical}. "
    if mechanism is None:
        text += "No mechanism signature was declared. "
    else:
        state = "confirmed" if mechanism["confirmed"] else "not confirmed"
        text += (  # (no text the idea chose: its quantity and prediction are in mechanism_signature)
            f"The idea's declared mechanism signature was {state}: idea "
            f"{mechanism['idea_mean']:.4g} vs baseline {mechanism['baseline_mean']:.4g} "
            f"({mechanism['detail']['rule']}). "
        )
        if mechanism.get("self_measured"):
            text += ("It was measured by the idea's own measure(), so it can lower the system verdict, "
                     "never raise it. ")
        if (mechanism.get("detail") or {}).get("not_confirmable"):
            text += ("Against a matched baseline a signature is confirmed only where it also tells the idea from "
                     "the track's baseline, which this job's check did not probe. ")
    text += (
        f"Parameters: baseline {n_params['baseline']}, idea {n_params['idea']}. "
        f"System verdict: {verdicts['system_verdict']}."
    )
    return text


def _comparison(c: Comparison) -> model.Comparison:
    return model.Comparison.model_validate(c.as_dict())


def against_track_baseline(outcome: Outcome, idea_values: list[float], confirmed: bool,
                           detail: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """A probe's signature against a matched baseline: its baseline side is the submitter's own
    file, so the signature must also tell the idea from the track's baseline, whose models of
    the same seeds the matched baseline's check probed (``bench.judge.declared_probe``;
    ``detail.track_baseline``). A matched baseline that read far from a signature the track's
    baseline shows too made a ``partial`` idea ``worked`` (red team, session 36). Without that
    measurement (a probe declared only where the file computes it, or one that does not apply to
    the track's baseline) the signature is shown and not confirmed (``detail.not_confirmable``)."""
    found = (outcome.matched_check or {}).get("probe")
    if (found is None or found["probe"] != (outcome.mechanism or {}).get("probe")
            or list(found["seeds"]) != list(outcome.screening.seeds)):
        return False, {**detail, "not_confirmable": "the track's baseline was not probed in the matched "
                                                    "baseline's check; a matched baseline's values are the submitter's"}
    assert outcome.mechanism is not None
    also, track_detail = mechanism_confirmed(outcome.mechanism["expect"], idea_values, found["values"])
    return confirmed and also, {**detail, "track_baseline": {**track_detail, "confirmed": also}}


def stage_block(outcome: Outcome, stage: Stage, tests: list[Comparison]) -> model.Stage:
    """One test stage of the report: its tests (``tests``: ``decide.stage_comparisons`` of its
    values), per-seed values, seeds and commitment."""
    return model.Stage(
        comparison=_comparison(tests[0]),
        per_seed={key: list(stage.values[key]) for key in model.STAGE_KEYS if key in stage.values}, seeds=stage.seeds,
        seed_commitment=model.SeedCommitment.model_validate(outcome.seed_commitment),
        diverged=stage.diverged, wall_time_s=stage.seconds,
        # the baseline at the idea's learning rate (Job.matched_cfg)
        matched_lr=None if stage.matched_lr is None else {"lr": stage.matched_lr,
                                                          "comparison": tests[1].as_dict()},
    )


def confirmation_block(outcome: Outcome, stage: Stage, first_look: Stage, alpha: float,
                       tests: list[Comparison]) -> model.Confirmation:
    """The confirmation stage: its comparison over every pair it ran (``tests``), and its looks
    (``look`` pairs, then all of them when a second look ran), each tested at its share of alpha
    (``stats.CONFIRMATION_SHARES``). Significant when the adjusted p (``stats.confirmation_p``)
    is <= alpha. Its seeds are labelled by the models' key."""
    block = stage_block(outcome, stage, tests)
    look = len(first_look.seeds)
    looked = [(stage, tests)]  # each look's pairs and tests: one look, or the first and then all
    if len(stage.seeds) != look:
        looked.insert(0, (first_look, first_look.tests(outcome.lower_is_better)))
    looks = [model.ConfirmationLook(n_pairs=len(pairs.values["idea"]), p_better=stage_p(t), alpha=alpha * share)
             for (pairs, t), share in zip(looked, CONFIRMATION_SHARES, strict=False)]
    p = confirmation_p([entry.p_better for entry in looks])
    shares = " and ".join(f"{share:g} alpha" for share in CONFIRMATION_SHARES)
    return model.Confirmation(
        **dict(block), p_value=p, significant=p <= alpha, job_key=outcome.job_key, model_key=outcome.model_key,
        looks=looks,
        test=f"one-sided exact paired sign-flip, idea better (the screened direction), at up to "
        f"{CONFIRMATION_LOOKS} looks ({look} pairs, then {CONFIRMATION_LOOKS * look} when the first is "
        f"neither significant nor futile) tested at {shares}; against the baseline at the idea's "
        "learning rate too when it differs, the larger p; p_value = min(1, min over the looks of p / "
        "its share)",
        n_runs=outcome.confirmation_runs, baseline_cache="never (fresh seeds)")


def pooled_block(screening: Stage, confirmation: Stage, lower_is_better: bool) -> dict[str, Any]:
    """Both stages' pairs in one comparison: shown for information, it decides nothing."""
    values = {a: screening.values[a] + confirmation.values[a] for a in ARMS}
    pooled = compare(values["baseline"], values["idea"], lower_is_better=lower_is_better).as_dict()
    keep = ("delta_mean", "idea_wins", "n_pairs", "p_value", "p_method", "ci_low", "ci_high", "rel_delta_pct")
    return {**{k: pooled[k] for k in keep}, "decides": False,
            "note": "screening and confirmation pairs pooled; the verdict comes from the stages, not from this"}


def build_report(outcome: Outcome) -> Report:
    """Assemble and return the report of one judged idea (validated as it is built)."""
    card = outcome.card
    settings = TrackSettings.of(card)
    track_id = f"{card['name']}@{card['version']}"
    tests = outcome.screening.tests(outcome.lower_is_better)
    screening = stage_block(outcome, outcome.screening, tests)
    values = outcome.screening.values
    comparison = tests[0]
    confirmed_tests, replication = None, None
    if outcome.confirmation is not None:
        confirmed_tests = outcome.confirmation.tests(outcome.lower_is_better)
        replication = confirmation_block(outcome, outcome.confirmation, outcome.first_look or outcome.confirmation,
                                         comparison.alpha, confirmed_tests)
    mechanism = None
    mechanism_ok: Literal[0, 1] | None = None
    measured = outcome.measured
    if outcome.mechanism is not None and measured is not None:
        confirmed, detail = mechanism_confirmed(
            outcome.mechanism["expect"], measured["idea"], measured["baseline"]
        )
        if outcome.matched_baseline and "probe" in outcome.mechanism:
            confirmed, detail = against_track_baseline(outcome, measured["idea"], confirmed, detail)
        mechanism_ok = 1 if confirmed else 0
        mechanism = {
            **outcome.mechanism, "idea_values": measured["idea"], "baseline_values": measured["baseline"],
            "idea_mean": float(np.mean(measured["idea"])),
            "baseline_mean": float(np.mean(measured["baseline"])),
            "confirmed": confirmed, "detail": detail,
            # measure() is the idea's own function: its numbers are the idea's, not the bench's;
            # a declared probe (bench.probes) is measured by the trusted trainer.
            "self_measured": "probe" not in outcome.mechanism,
        }
    # m is a share of the baseline's mean: the track's own baseline's, measured in a matched
    # baseline's check on these seeds, never the matched baseline's (an agent's file: a sandbag on
    # a higher-is-better metric lowered the bar it set; red team, session 36)
    reference_mean = (outcome.matched_check or {}).get("canonical_mean", comparison.baseline_mean)
    m = float(card["smallest_effect_rel_pct"]) / 100.0 * abs(float(reference_mean))
    self_measured = mechanism is not None and mechanism["self_measured"]
    weak_baseline = bool(outcome.references and outcome.references["not_beaten"])
    verdicts = decide(
        comparison.as_dict(), mechanism_ok, m, None if replication is None else replication.significant,
        lr_matched=lr_matched(tests, outcome.best_cfgs["baseline"]["lr"], outcome.lr_grids["baseline"],
                              pinned_baseline=unchecked_at(float(outcome.best_cfgs["idea"]["lr"]), outcome.matched_check,
                                                           outcome.lower_is_better)),
        self_measured=self_measured,
        reaches=reaches(m, outcome.lower_is_better, comparison, None if confirmed_tests is None else confirmed_tests[0],
                        float((outcome.matched_check or {}).get("worse_by", 0.0))),
        weak_baseline=weak_baseline,
    )

    tables = outcome.sweep_tables
    n_params = outcome.n_params
    warnings = list(outcome.warnings)
    custom_track = None if outcome.custom_track is None else dict(outcome.custom_track)
    if custom_track is not None:  # the track's own caveats travel with every verdict on it
        warnings += [f"custom track validation: {w}" for w in custom_track.get("validation_warnings") or []]
        custom_track["reference_fits"] = outcome.references
        if custom_track.get("build_checked") is False:
            warnings.append(
                "unchecked build: the track was validated in another seed epoch, so neither this job's data nor "
                "(unless the track keeps validation's build) its baseline's build could be checked against "
                "validation's; the report counts in no totals or discoveries until the track is validated again "
                "in this epoch.")
    if weak_baseline and custom_track is not None and outcome.references is not None:
        custom_track["weak_baseline"] = True  # counted in no totals or discoveries (app.reports.service)
        warnings.append(
            f"weak baseline: the track's baseline did not beat the bench's reference fits (a constant, a ridge "
            f"regression) by {outcome.references['margin']:.0%} on {outcome.references['not_beaten']} of its "
            f"{outcome.references['seeds']} test seeds in this job, as validation required; a win over it is no "
            "win (inconclusive, weak_baseline) and the report counts in no totals or discoveries."
        )
    ratio = n_params["idea"] / max(1, n_params["baseline"])
    budget = {a: len(tables[a]) for a in ARMS}
    if budget["idea"] > budget["baseline"]:
        warnings.append(
            f"tuning budget: the idea swept {budget['idea']} configs, the baseline "
            f"{budget['baseline']} (the idea's extra hyperparameters count as budget)."
        )
    diverged = outcome.diverged
    for arm, count in diverged.items():
        if count:
            warnings.append(
                f"{arm}: {count} run(s) diverged and were scored at the divergence ceiling "
                "(or the worst finite value of both arms, if worse)."
            )
    weak = missing_judge_layers(outcome.isolation)
    if weak:  # only under the development setting: a worker with its sandbox never runs without them
        warnings.append(
            f"weak sandbox: judged without {', '.join(weak)} ({ALLOW_WEAK_ENV}, a development setting); "
            "submitted code could read and change this host, so this report counts in no totals or q-values."
        )
    wall = outcome.wall

    def arm_block(arm: str, flat: bool = False) -> model.ArmResult:
        full = _full(values[arm])
        return model.ArmResult.model_validate({
            "best_cfg": outcome.best_cfgs[arm], "sweep": tables[arm], "full": full,
            "union_lr_grid": outcome.lr_grids[arm], "n_params": n_params[arm], "wall_time_s": wall[arm],
            "diverged": diverged[arm], **(full if flat else {}),  # the seeds' flat idea shape, kept compatible
        })

    metric_name = card["metric"]["name"].upper() if card["metric"]["name"] == "mse" else card["metric"]["name"]
    bench_report = model.BenchReport(
        bench_version=BENCH_VERSION,
        track=card["name"],
        track_id=track_id,
        track_version=card["version"],
        model="matched_custom" if outcome.matched_baseline else card["baseline"]["name"],
        metric_direction="lower is better" if card["metric"]["direction"] == "lower" else "higher is better",
        metric=card["metric"]["name"],
        n_seeds=len(values["idea"]),
        baseline=arm_block("baseline"),
        idea=arm_block("idea", flat=True),
        comparison=screening.comparison,
        screening=screening,
        confirmation=replication,
        decided_by="screening" if replication is None else "confirmation",
        pooled=None if outcome.confirmation is None else pooled_block(outcome.screening, outcome.confirmation,
                                                                      outcome.lower_is_better),
        p_helps=p_helps(tests, None if replication is None else replication.p_value),
        mechanism_signature=None if mechanism is None else model.MechanismSignature.model_validate(mechanism),
        idea_sweep=[model.SweepRow.model_validate(row) for row in tables["idea"]],
        best_idea_cfg=outcome.best_cfgs["idea"],
        parameter_parity={**n_params, "ratio": ratio, "buffers": outcome.buffers, "tensors": outcome.tensors,
                          "max_ratio": settings.param_parity_ratio, "counted_by": "bench",
                          "flops_per_example": outcome.flops,
                          **({"dearest_per_example": outcome.dearest} if outcome.dearest else {}),
                          "compute_ratio": outcome.flops["idea"] / max(outcome.flops["baseline"], 1.0),
                          "max_compute_ratio": settings.compute_ratio},
        capture=outcome.capture,
        custom_track=None if custom_track is None else model.CustomTrack.model_validate(custom_track),
        matched_baseline_check=outcome.matched_check or None,
        track_justification=settings.justification if outcome.custom_track else None,
        data_checksum=outcome.data_checksum,
        seeds=model.Seeds(sweep=outcome.sweep_seeds, final=screening.seeds,
                          confirmation=None if replication is None else replication.seeds),
        seed_commitment=screening.seed_commitment,
        public_data=settings.public_data,
        lr_grid=outcome.lr_grids["idea"],
        budget={"configs": budget, "sweep_seeds": len(outcome.sweep_seeds),
                # runs per arm and test seed (the card's defaults.repeats; shown when more than one), and
                # how many each test stage's looks made: all, or 1 where the first runs decided the look
                **({"repeats": settings.defaults.repeats, "repeats_made": outcome.repeats_made,
                    "seed_value": settings.defaults.seed_value}
                   if settings.defaults.repeats > 1 else {})},
        wall_time_s={**wall, "total": outcome.wall_s},
        versions=_versions(),
        device=outcome.device,
        warnings=warnings,
        isolation=outcome.isolation,
        sandbox={"complete": not weak, "missing": weak},
        execution=outcome.execution,
        diverged=diverged,
        submission=outcome.submission,
        smallest_effect=m,
    )
    metrics = {
        arm: f"{metric_name} {np.mean(values[arm]):.7g}, std {_full(values[arm])['std']:.5g}; "
        f"best sweep {_fmt_cfg(outcome.best_cfgs[arm])}; {n_params[arm]} parameters."
        for arm in ARMS
    }
    matched = None if outcome.screening.matched_lr is None else (outcome.screening.matched_lr, tests[1])
    return Report(
        worked=verdicts["worked"],
        summary=summary_text(track_id, metric_name, comparison, verdicts, mechanism, n_params, replication, matched,
                             outcome.repeats_made, settings.defaults.seed_value),
        metrics=metrics,
        system_verdict=verdicts["system_verdict"],
        practical_verdict=verdicts["practical_verdict"],
        practical_detail=verdicts["practical_detail"],
        mechanism_ok=mechanism_ok,
        system_judged=True,
        bench_report=bench_report,
    )
