"""bench.verdicts: mechanism expectations and the practical / system verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.stats import compare
from bench.verdicts import decide, mechanism_confirmed

SEEDS = Path(__file__).resolve().parents[1] / "data" / "seeds"


def read_seed(path: Path) -> dict[str, Any]:
    """The JSON object after the first '{' of a seed report."""
    text = path.read_text(encoding="utf-8")
    report: dict[str, Any] = json.loads(text[text.index("{") :])
    return report


SEED_FILES = sorted(SEEDS.glob("*.txt"))


def test_four_seeds_present() -> None:
    assert len(SEED_FILES) == 4


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name[:3])
def test_seed_verdicts_reproduce(path: Path) -> None:
    seed = read_seed(path)
    out = decide(seed["bench_report"]["comparison"], seed["mechanism_ok"], smallest_effect=0.0)
    assert out["system_verdict"] == seed["system_verdict"]
    assert out["practical_verdict"] == seed["practical_verdict"]
    assert out["worked"] is seed["worked"]


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name[:3])
def test_exact_recomputation_keeps_seed_verdicts(path: Path) -> None:
    bench = read_seed(path)["bench_report"]

    def per_seed(arm: dict[str, Any]) -> list[float]:
        values: list[float] = arm.get("full", arm)["per_seed"]
        return values

    out = compare(per_seed(bench["baseline"]), per_seed(bench["idea"]))
    assert out.verdict == bench["comparison"]["verdict"]
    assert out.idea_wins == bench["comparison"]["idea_wins"]
    assert out.delta_mean == pytest.approx(bench["comparison"]["delta_mean"], rel=1e-6)


@pytest.mark.parametrize(
    ("verdict", "mechanism_ok", "system", "practical"),
    [
        ("idea better (significant)", 1, "worked", "helps"),
        ("idea better (significant)", None, "worked", "helps"),
        ("idea better (significant)", 0, "partial", "helps"),
        ("idea worse (significant)", 1, "partial", "harms"),
        ("idea worse (significant)", None, "failed", "harms"),
        ("no significant win", 1, "partial", "inconclusive"),
        ("no significant win", None, "failed", "inconclusive"),
        ("no significant win", 0, "failed", "inconclusive"),
        ("idea worse (significant)", 0, "failed", "harms"),
    ],
)
def test_verdict_table(verdict: str, mechanism_ok: int | None, system: str, practical: str) -> None:
    out = decide({"verdict": verdict}, mechanism_ok, smallest_effect=0.01)
    assert (out["system_verdict"], out["practical_verdict"]) == (system, practical)
    assert out["worked"] is (system == "worked")
    if practical != "inconclusive":
        assert out["practical_detail"] is None


@pytest.mark.parametrize("verdict", ["idea better (significant)", "idea worse (significant)", "no significant win"])
@pytest.mark.parametrize("mechanism_ok", [0, 1])
def test_a_self_measured_mechanism_can_lower_the_verdict_never_raise_it(verdict: str, mechanism_ok: int) -> None:
    """PROTOCOL.md 2: a number the idea reported never alone makes a verdict. The verdict on
    the bench's numbers alone is the one-claim rule (no mechanism): worked iff it helps."""
    order = {"failed": 0, "partial": 1, "worked": 2}
    bench_only = decide({"verdict": verdict}, None, smallest_effect=0.01)["system_verdict"]
    out = decide({"verdict": verdict}, mechanism_ok, smallest_effect=0.01, self_measured=True)
    assert order[out["system_verdict"]] <= order[bench_only]
    helps = verdict == "idea better (significant)"
    expected = ("worked" if mechanism_ok else "partial") if helps else "failed"
    assert out["system_verdict"] == expected and out["worked"] is (expected == "worked")
    # a mechanism the bench measured keeps its weight: "one of two claims held" is partial
    trusted = decide({"verdict": verdict}, mechanism_ok, smallest_effect=0.01)["system_verdict"]
    assert trusted == ("partial" if helps != bool(mechanism_ok) else "worked" if helps else "failed")


def test_practical_detail() -> None:
    none = "no significant win"
    tight = {"verdict": none, "ci90_low": -0.004, "ci90_high": 0.005, "mde": 0.02}
    assert decide(tight, None, 0.01)["practical_detail"] == "negligible"
    wide = {"verdict": none, "ci90_low": -0.03, "ci90_high": 0.02, "mde": 0.02}
    assert decide(wide, None, 0.01)["practical_detail"] == "underpowered"
    powered = {"verdict": none, "ci90_low": -0.03, "ci90_high": 0.02, "mde": 0.005}
    assert decide(powered, None, 0.01)["practical_detail"] == "inconclusive"
    unbounded = {"verdict": none, "ci90_low": None, "ci90_high": None, "mde": 0.001}
    assert decide(unbounded, None, 0.01)["practical_detail"] == "inconclusive"


def test_decide_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        decide({"verdict": "maybe"}, None, 0.01)
    with pytest.raises(ValueError):
        decide({"verdict": "no significant win"}, 2, 0.01)
    with pytest.raises(ValueError):
        decide({"verdict": "no significant win"}, None, -1.0)


# --- mechanism expectations ---------------------------------------------------------------

BASE = [0.5, 0.6, 0.4, 0.55, 0.45, 0.5, 0.6, 0.52]


def test_close_to() -> None:
    ok, detail = mechanism_confirmed({"kind": "close_to", "target": 1.0}, [1.04, 1.02], BASE)
    assert ok and detail["idea_mean"] == pytest.approx(1.03) and detail["p_value"] is None
    assert detail["baseline_mean"] == pytest.approx(sum(BASE) / 8)
    assert not mechanism_confirmed({"kind": "close_to", "target": 1.0}, [1.06, 1.06], BASE)[0]
    assert mechanism_confirmed({"kind": "close_to", "target": 1.0, "rtol": 0.1}, [1.06], BASE)[0]
    zero = {"kind": "close_to", "target": 0.0, "atol": 1e-5}
    assert mechanism_confirmed(zero, [1e-8, 3e-8], BASE)[0]
    assert not mechanism_confirmed(zero, [1e-3], BASE)[0]
    exact_zero = {"kind": "close_to", "target": 0.0}  # rtol * |0| = 0: no tolerance at all
    assert not mechanism_confirmed(exact_zero, [1e-12], [])[0]


def test_less_than_and_greater_than_are_strict() -> None:
    assert mechanism_confirmed({"kind": "less_than", "value": 0.1}, [0.05, 0.1], [])[0]
    assert not mechanism_confirmed({"kind": "less_than", "value": 0.1}, [0.1, 0.1], [])[0]
    assert mechanism_confirmed({"kind": "greater_than", "value": 0.1}, [0.2], [])[0]
    assert not mechanism_confirmed({"kind": "greater_than", "value": 0.1}, [0.1], [])[0]


def test_lower_and_higher_than_baseline() -> None:
    lower = [b - 0.1 * (i + 1) for i, b in enumerate(BASE)]
    ok, detail = mechanism_confirmed({"kind": "lower_than_baseline"}, lower, BASE)
    assert ok and detail["p_value"] == 1 / 256 and "exact" in detail["p_method"]
    assert not mechanism_confirmed({"kind": "higher_than_baseline"}, lower, BASE)[0]
    higher = [b + 0.01 for b in BASE]
    assert mechanism_confirmed({"kind": "higher_than_baseline"}, higher, BASE)[0]
    mixed = [b + (0.01 if i % 2 else -0.01) for i, b in enumerate(BASE)]
    ok, detail = mechanism_confirmed({"kind": "lower_than_baseline"}, mixed, BASE)
    assert not ok and detail["p_value"] > 0.05


def test_mechanism_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        mechanism_confirmed({"kind": "about"}, [1.0], BASE)
    with pytest.raises(ValueError):
        mechanism_confirmed({"kind": "close_to"}, [1.0], BASE)
    with pytest.raises(ValueError):
        mechanism_confirmed({"kind": "less_than", "value": 1.0}, [float("nan")], BASE)
    with pytest.raises(ValueError):
        mechanism_confirmed({"kind": "lower_than_baseline"}, [1.0, 2.0], BASE)


@pytest.mark.parametrize("expect", [
    {"kind": "close_to", "target": 1.0, "rtol": 1e9},  # anything is close to 1 within 1e9
    {"kind": "close_to", "target": 0.0, "atol": 5.0},
    {"kind": "close_to", "target": 0.0, "atol": -1.0},
    {"kind": "close_to", "target": 0.0, "atol": True},
])
def test_unbounded_tolerances_are_refused(expect: dict[str, object]) -> None:
    from bench.contract import check_mechanism
    from bench.errors import BenchError, ErrorCode

    with pytest.raises(BenchError) as info:
        check_mechanism({"quantity": "q", "prediction": "p", "expect": expect})
    assert info.value.code == ErrorCode.INVALID_MECHANISM
    check_mechanism({"quantity": "q", "prediction": "p", "expect": {"kind": "close_to", "target": 1.0, "rtol": 0.05}})


def test_a_mechanism_needs_a_probe_or_a_measure() -> None:
    """One rule for the API and the engine (bench.contract.check_measurable)."""
    from bench.contract import check_measurable
    from bench.errors import BenchError, ErrorCode

    declared = {"quantity": "q", "prediction": "p", "expect": {"kind": "lower_than_baseline"}}
    with pytest.raises(BenchError) as info:
        check_measurable(declared, defines_measure=False)
    assert info.value.code == ErrorCode.INVALID_MECHANISM and info.value.hint and "probe" in info.value.hint
    assert check_measurable(declared, defines_measure=True)["expect"] == declared["expect"]
    probed = check_measurable({**declared, "probe": {"kind": "input_gradient"}}, defines_measure=False)
    assert probed["probe"] == {"kind": "input_gradient"}


@pytest.mark.parametrize(("expect", "baseline", "confirmed"), [
    ({"kind": "less_than", "value": 1e30}, [0.4, 0.5], False),  # holds for any model: says nothing
    ({"kind": "less_than", "value": 0.01}, [0.4, 0.5], True),
    ({"kind": "close_to", "target": 0.0, "atol": 1e-3}, [2e-4, 1e-4], False),  # the baseline shows it too
    ({"kind": "close_to", "target": 0.0, "atol": 1e-3}, [0.1, 0.2], True),
    ({"kind": "greater_than", "value": -1.0}, [0.4, 0.5], False),
])
def test_an_absolute_signature_must_tell_the_idea_from_the_baseline(expect: dict[str, Any], baseline: list[float],
                                                                     confirmed: bool) -> None:
    """A red-team forgery: a copy of the baseline with a bench probe and ``less_than 1e30``
    got mechanism_ok 1 and so ``partial`` for an idea that is the baseline."""
    ok, detail = mechanism_confirmed(expect, [0.0, 0.0], baseline)
    assert ok is confirmed
    assert detail["baseline_meets_it"] is (not confirmed)
    assert mechanism_confirmed(expect, [0.0, 0.0], [])[0] is True  # no baseline values: the rule alone


def test_non_finite_numbers_and_long_texts_are_refused_before_any_training() -> None:
    """Red team: ``expect.value = inf`` or a NaN in HPARAMS passed the checks, trained the whole
    protocol and then ended as ``internal``; a 10 kB ``quantity`` was pasted into the summary."""
    from bench.contract import check_hparams, check_mechanism
    from bench.errors import BenchError, ErrorCode

    base = {"quantity": "q", "prediction": "p", "expect": {"kind": "less_than", "value": 1.0}}
    for bad in ({"kind": "less_than", "value": float("inf")}, {"kind": "close_to", "target": float("nan")},
                {"kind": "close_to", "target": 1.0, "rtol": float("nan")}):
        with pytest.raises(BenchError) as info:
            check_mechanism({**base, "expect": bad})
        assert info.value.code == ErrorCode.INVALID_MECHANISM
    for text in ("x" * 501, "", 7):
        with pytest.raises(BenchError):
            check_mechanism({**base, "quantity": text})
    with pytest.raises(BenchError) as info:
        check_hparams({"width": [8, float("nan")]}, max_configs=12)
    assert info.value.code == ErrorCode.INVALID_HPARAMS
    checked = check_mechanism({**base, "prediction": "two\\nlines", "expect": {**base["expect"], "note": "x"}})
    assert checked["expect"] == {"kind": "less_than", "value": 1.0} and checked["prediction"] == "two\\nlines"
    assert check_mechanism({**base, "prediction": "two\nlines"})["prediction"] == "two lines"
    # Red team of the typed wire: keys the kind does not read were copied unchecked into the report
    # (an inf ended a finished job `internal`; 48,000 characters of "System verdict: worked" rode in).
    junk = {"kind": "lower_than_baseline", "value": float("inf"), "target": "System verdict: worked. " * 2000}
    assert check_mechanism({**base, "expect": junk})["expect"] == {"kind": "lower_than_baseline"}
    close = check_mechanism({**base, "expect": {"kind": "close_to", "target": 0.5, "value": [1], "atol": 0.01}})
    assert close["expect"] == {"kind": "close_to", "target": 0.5, "atol": 0.01}


def test_a_win_below_the_smallest_effect_does_not_help() -> None:
    better = {"verdict": "idea better (significant)"}
    out = decide(better, None, 0.01, replicated=True, reaches=False)
    assert (out["practical_verdict"], out["practical_detail"], out["system_verdict"]) == (
        "inconclusive", "below_effect", "failed")
    assert decide(better, None, 0.01, replicated=False, reaches=False)["practical_detail"] == "not_replicated"
    assert decide(better, None, 0.01, replicated=True, reaches=True)["practical_verdict"] == "helps"


def _outcome(baseline: list[float], idea: list[float], isolation: list[str] | None = None) -> Any:
    from bench import sandbox
    from bench.assemble import Outcome, Stage
    from bench.catalog import get_card
    from bench.seeding import public_secret

    def stage(seeds: list[int]) -> Stage:
        return Stage({"baseline": baseline, "idea": idea}, seeds, {"baseline": 0, "idea": 0},
                     {"baseline": 1.0, "idea": 1.0})

    sweep = [{"cfg": {"lr": 0.03}, "mean": 1.0}]
    return Outcome(
        card=get_card("smoke"), matched_baseline=False, custom_track=None, submission={"name": None,
        "hypothesis": None}, mechanism=None, measured=None, screening=stage(list(range(8))),
        confirmation=stage(list(range(100, 108))), first_look=stage(list(range(100, 108))),
        confirmation_runs=16, job_key="job_test", model_key="m" * 32, seed_commitment=public_secret().report_block(),
        n_params={"baseline": 321, "idea": 321}, buffers={"baseline": 0, "idea": 0},
        flops={"baseline": 576.0, "idea": 576.0}, tensors={"baseline": 4, "idea": 4},
        diverged={"baseline": 0, "idea": 0}, wall={"baseline": 1.0, "idea": 1.0},
        sweep_tables={"baseline": sweep, "idea": sweep}, best_cfgs={"baseline": {"lr": 0.03}, "idea": {"lr": 0.03}},
        lr_grids={"baseline": [0.01, 0.03, 0.1], "idea": [0.01, 0.03, 0.1]},
        capture={"baseline": {}, "idea": {}}, data_checksum="0" * 64, sweep_seeds=[0, 1],
        isolation=list(sandbox.FULL_ISOLATION) if isolation is None else isolation, execution={},
        warnings=[], device="cpu", wall_s=1.0)


def test_a_tiny_sure_win_is_below_effect_and_a_real_one_helps() -> None:
    """Issue 25.7: a 1e-7 relative gain on every seed gave p 0.0078 and ``helps``."""
    from bench.assemble import build_report

    baseline = [0.5 + 0.01 * i for i in range(8)]
    tiny = build_report(_outcome(baseline, [b * (1 - 1e-7) for b in baseline])).model_dump(mode="json")
    assert tiny["bench_report"]["comparison"]["verdict"] == "idea better (significant)"
    assert (tiny["practical_verdict"], tiny["practical_detail"]) == ("inconclusive", "below_effect")
    real = build_report(_outcome(baseline, [b * 0.9 for b in baseline])).model_dump(mode="json")
    assert real["practical_verdict"] == "helps" and real["worked"] is True
    assert real["bench_report"]["sandbox"] == {"complete": True, "missing": []}


def test_a_report_under_a_weak_sandbox_says_so() -> None:
    from bench.assemble import build_report

    baseline = [0.5 + 0.01 * i for i in range(8)]
    weak = build_report(_outcome(baseline, baseline, isolation=["process", "empty_env", "no_new_privs", "seccomp"])).model_dump(mode="json")
    assert weak["bench_report"]["sandbox"] == {"complete": False, "missing": ["namespaces", "no_network"]}
    assert any(w.startswith("weak sandbox: judged without namespaces, no_network") for w in weak["bench_report"]["warnings"])


def test_a_win_over_a_baseline_that_did_not_beat_the_reference_fits_is_no_win() -> None:
    """A custom track's baseline (its author's code) that did not beat the bench's reference fits
    on every test seed of the job: a win over it is ``inconclusive`` / ``weak_baseline``, ahead of
    every other detail, and the report's custom track is marked weak (counted nowhere)."""
    from dataclasses import replace

    from bench.assemble import build_report

    better = {"verdict": "idea better (significant)"}
    assert (decide(better, None, 0.01, weak_baseline=True)["practical_verdict"],
            decide(better, None, 0.01, weak_baseline=True, replicated=False)["practical_detail"]) == (
        "inconclusive", "weak_baseline")
    assert decide({"verdict": "idea worse (significant)"}, None, 0.01, weak_baseline=True)["practical_verdict"] == "harms"
    baseline = [0.5 + 0.01 * i for i in range(8)]
    track = {"name": "t", "version": 1, "weak_baseline": False, "validation_warnings": []}
    win = replace(_outcome(baseline, [b * 0.9 for b in baseline]), custom_track=track)
    sound = build_report(replace(win, references={"seeds": 16, "not_beaten": 0, "margin": 0.02})).model_dump(mode="json")
    assert sound["practical_verdict"] == "helps" and sound["bench_report"]["custom_track"]["weak_baseline"] is False
    weak = build_report(replace(win, references={"seeds": 16, "not_beaten": 3, "margin": 0.02})).model_dump(mode="json")
    assert (weak["practical_verdict"], weak["practical_detail"], weak["system_verdict"]) == (
        "inconclusive", "weak_baseline", "failed")
    assert weak["bench_report"]["custom_track"]["weak_baseline"] is True
    assert weak["bench_report"]["custom_track"]["reference_fits"]["not_beaten"] == 3
    assert any("3 of its 16 test seeds" in w for w in weak["bench_report"]["warnings"])
