"""The confirmation stage (PROTOCOL.md 2.6): a screened win counts only when it replicates on
seeds drawn for this job alone. These run through real sandboxed children; the stage's rules
(a null that wins only its screening, a win from the baseline's tuning or at its grid's edge,
the second look) are tested through a scripted executor in test_protocol_rules.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import execution, protocol
from bench import options as engine_options
from bench.errors import BenchError, ErrorCode
from bench.judge import JudgeRequest, judge
from bench.report import Report
from bench.seeding import (
    confirmation_seeds,
    final_seeds,
    public_secret,
    run_seeds,
    screening_pool,
    screening_seeds,
    sweep_seeds,
)
from bench.stats import (
    CONFIRMATION_SHARES,
    FUTILITY_P,
    bh_qvalues,
    compare,
    confirmation_continues,
    confirmation_p,
    paired_sign_flip_p,
)
from bench.verdicts import decide
from tests.conftest import count_launches

MLP = """
from torch import nn


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1))
"""
# A matched baseline that cannot fit the smoke track's nonlinear target: the MLP beats it
# on every seed, so the screening finds a win and the confirmation replicates it.
LINEAR = """
from torch import nn


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["n_features"], 35), nn.Linear(35, 1))
"""
N = 7  # the fewest pairs whose exact one-sided test can pass the first look's alpha / 5 (1/128)


def _streams(seeds: list[int], job_key: str | None = None) -> set[int]:
    secret = public_secret()
    out: set[int] = set()
    for seed in seeds:
        s = run_seeds(seed, secret, job_key, track="smoke")
        out |= {s.split, s.order, s.init}
    return out


def test_confirmation_seeds_are_disjoint_from_every_other_seed() -> None:
    shared = _streams(sweep_seeds(4) + final_seeds(32))
    job_a = _streams(confirmation_seeds(32), "job_a")
    job_b = _streams(confirmation_seeds(32), "job_b")
    assert len(job_a) == len(job_b) == 3 * 32  # no stream repeats within a job either
    assert shared.isdisjoint(job_a) and shared.isdisjoint(job_b) and job_a.isdisjoint(job_b)
    assert _streams(confirmation_seeds(3), "job_a") <= job_a  # the same job: the same seeds
    with pytest.raises(ValueError, match="models' key"):
        run_seeds(confirmation_seeds(1)[0], public_secret(), track="smoke")


def test_decide_keeps_helps_only_when_it_replicates() -> None:
    better = {"verdict": "idea better (significant)"}
    assert decide(better, None, 0.01, replicated=True)["system_verdict"] == "worked"
    out = decide(better, None, 0.01, replicated=False)
    assert (out["practical_verdict"], out["practical_detail"], out["system_verdict"]) == (
        "inconclusive", "not_replicated", "failed")
    assert decide(better, 1, 0.01, replicated=False)["system_verdict"] == "partial"
    worse = {"verdict": "idea worse (significant)"}
    assert decide(worse, None, 0.01, replicated=None)["practical_verdict"] == "harms"


def test_one_sided_p_and_bh_qvalues_by_hand() -> None:
    c = compare([1.0] * 8, [0.0] * 4 + [0.5] * 4)  # lower is better: the idea wins 8/8
    assert (c.p_value, c.p_better) == (2 / 256, 1 / 256)
    assert compare([0.0] * 8, [1.0] * 8).p_better == 1.0
    # m = 5, sorted p: 0.01 0.02 0.03 0.04 0.5 -> m*p/rank: 0.05 0.05 0.05 0.05 0.5
    assert bh_qvalues([0.04, 0.5, 0.01, 0.03, 0.02]) == pytest.approx([0.05, 0.5, 0.05, 0.05, 0.05])
    # a later smaller ratio pulls earlier ones down: 0.01*3/1=0.03, 0.04*3/2=0.06, 0.045*3/3=0.045
    assert bh_qvalues([0.01, 0.04, 0.045]) == pytest.approx([0.03, 0.045, 0.045])
    assert bh_qvalues([0.9, 0.9]) == [0.9, 0.9] and bh_qvalues([]) == []
    with pytest.raises(ValueError):
        bh_qvalues([1.5])


# These tests need a sure win, which only a baseline weaker than the track's gives; the check a
# matched baseline gets first (it would refuse LINEAR: baseline_inferior, as it should) is the
# worker's, skipped here by handing the engine its result: parity then measures against LINEAR.
CHECKED = {"n_params": 351, "n_buffers": 0, "flops": 702.0, "n_tensors": 4}


def _judge(job_key: str, events: list[Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    request = JudgeRequest(track="smoke", idea_code=MLP, baseline_code=kwargs.pop("baseline", LINEAR),
                           n_seeds=N, job_key=job_key, canonical=CHECKED, **kwargs)
    return judge(request, events.append if events is not None else None).model_dump(mode="json")


@pytest.fixture(scope="module")
def replicated() -> tuple[dict[str, Any], list[Any]]:
    events: list[Any] = []
    return _judge("job_one", events), events


def test_a_real_win_is_confirmed_on_this_jobs_own_seeds(replicated: tuple[dict[str, Any], list[Any]]) -> None:
    report, events = replicated
    Report.model_validate(report)
    br = report["bench_report"]
    assert br["comparison"]["verdict"] == "idea better (significant)"
    stage = br["confirmation"]
    assert stage["looks"] == [{"n_pairs": N, "p_better": stage["comparison"]["p_better"], "alpha": 0.05 * 0.2}]
    assert stage["significant"] and stage["p_value"] == pytest.approx(5 * stage["comparison"]["p_better"])
    assert stage["p_value"] <= 0.05
    assert (report["practical_verdict"], report["system_verdict"], br["decided_by"]) == (
        "helps", "worked", "confirmation")
    assert br["screening"]["comparison"] == br["comparison"]
    assert stage["seeds"] == br["seeds"]["confirmation"] == confirmation_seeds(N)
    assert len(stage["per_seed"]["idea"]) == len(stage["per_seed"]["baseline"]) == N
    assert stage["per_seed"]["idea"] != br["screening"]["per_seed"]["idea"]  # other data, other inits
    assert stage["job_key"] == "job_one" and stage["seed_commitment"] == br["seed_commitment"]
    assert len(stage["model_key"]) == 32 and stage["model_key"] != "job_one"
    assert br["p_helps"] == max(br["comparison"]["p_better"], stage["p_value"])
    assert br["pooled"]["n_pairs"] == 2 * N and br["pooled"]["decides"] is False
    assert "Confirmation on 7 fresh seeds" in report["summary"]
    stages = [e.stage for e in events]
    assert stages.index("final") < stages.index("confirmation")
    assert events[-1].done == events[-1].total == max(e.total for e in events)


def test_the_same_job_reruns_bit_for_bit_and_a_resubmission_rerolls_no_confirmation(
    replicated: tuple[dict[str, Any], list[Any]],
) -> None:
    """Issue 25.6: another job draws other screening seeds from the pool, but the same models
    get the same confirmation (its seeds are the models' key's): resubmitting re-rolls nothing."""
    first = replicated[0]["bench_report"]
    again = _judge("job_one")["bench_report"]
    assert again["confirmation"]["per_seed"] == first["confirmation"]["per_seed"]
    assert again["screening"]["per_seed"] == first["screening"]["per_seed"]
    other = _judge("job_two")["bench_report"]
    assert other["seeds"]["final"] != first["seeds"]["final"]  # this job's own draw from the pool
    assert set(other["seeds"]["final"]) <= set(screening_pool())
    assert other["confirmation"]["model_key"] == first["confirmation"]["model_key"]
    assert other["confirmation"]["per_seed"] == first["confirmation"]["per_seed"]


_REAL_STAGE_VALUES = protocol.Job.stage_values


def lucky_screening(self: protocol.Job, runs: dict[str, list[protocol.RunRecord]]) -> dict[str, list[float]]:
    """A test double: the idea's screening is a win (as a lucky re-roll's would be)."""
    values = _REAL_STAGE_VALUES(self, runs)
    if runs["idea"][0].stage == "screening":
        values["idea"] = [v - 1.0 for v in values["baseline"]]
    return values


def test_the_two_looks_adjust_their_p_and_stop_when_futile_or_significant() -> None:
    assert (CONFIRMATION_SHARES, FUTILITY_P) == ((0.2, 0.8), 0.5)
    assert confirmation_p([0.002]) == pytest.approx(0.01) and confirmation_p([0.3, 0.02]) == pytest.approx(0.025)
    assert confirmation_p([0.7]) == 1.0 and confirmation_p([0.05, 0.6]) == pytest.approx(0.25)
    assert confirmation_continues(0.011, 0.05) and confirmation_continues(0.5, 0.05)
    assert not confirmation_continues(0.01, 0.05)  # significant at the first look (alpha / 5)
    assert not confirmation_continues(0.51, 0.05)  # futile: the idea looked no better
    for bad in ([], [0.1, 0.2, 0.3], [1.5]):
        with pytest.raises(ValueError):
            confirmation_p(bad)


def test_the_two_look_confirmation_keeps_its_size_under_the_null() -> None:
    """Under the null (no effect), the whole two-look rule rejects at most alpha of the time:
    simulated with the exact tests it uses (8 pairs, then 16)."""
    rng = np.random.default_rng(20261201)
    trials, rejected, second = 600, 0, 0
    for _ in range(trials):
        d = rng.standard_normal(16)
        p1, _ = paired_sign_flip_p(d[:8], alternative="less")
        ps = [p1]
        if confirmation_continues(p1, 0.05):
            second += 1
            ps.append(paired_sign_flip_p(d, alternative="less")[0])
        rejected += confirmation_p(ps) <= 0.05
    assert 0.35 < second / trials < 0.65  # about half the nulls look again
    assert rejected / trials <= 0.05 + 3 * (0.05 * 0.95 / trials) ** 0.5


def test_a_close_first_look_gets_a_second_on_fresh_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test double makes the first look close (neither significant at alpha/2 nor futile)
    and the 2N pairs a clear win: the job trains N more confirmation seeds, and the second
    look decides. (The rule is tested through a scripted executor in test_protocol_rules.py;
    this one runs the second look's rebuild and trainers through real children.)"""
    real = protocol.Job.stage_values
    close = [1.0, 1.0, 1.0, 1.0, 1.0, -0.5, 0.2]  # baseline - idea over the first look's N pairs

    def shaped(self: protocol.Job, runs: dict[str, list[protocol.RunRecord]]) -> dict[str, list[float]]:
        values = real(self, runs)
        if runs["idea"][0].stage == "confirmation":
            gains = close if len(values["idea"]) == N else [1.0] * (2 * N)
            values["idea"] = [b - g for b, g in zip(values["baseline"], gains, strict=True)]
        return values

    monkeypatch.setattr(protocol.Job, "stage_values", shaped)
    events: list[Any] = []
    report = _judge("job_close", events)
    Report.model_validate(report)
    stage = report["bench_report"]["confirmation"]
    p1 = paired_sign_flip_p([-g for g in close], alternative="less")[0]
    assert 0.01 < p1 <= 0.5
    assert [look["n_pairs"] for look in stage["looks"]] == [N, 2 * N]
    assert stage["looks"][0]["p_better"] == pytest.approx(p1) and stage["looks"][1]["p_better"] == 1 / 2 ** (2 * N)
    assert stage["seeds"] == confirmation_seeds(2 * N) and len(stage["per_seed"]["baseline"]) == 2 * N
    assert stage["p_value"] == pytest.approx(1 / 2 ** (2 * N) / 0.8) and stage["significant"]
    assert [look["alpha"] for look in stage["looks"]] == pytest.approx([0.01, 0.04])
    assert report["practical_verdict"] == "helps" and "in 2 looks" in report["summary"]
    assert [e.message for e in events if "first look was close" in (e.message or "")]
    assert events[-1].done == events[-1].total


SABOTEUR = (Path(__file__).parents[1] / "security" / "hostile" / "confirmation_saboteur.py").read_text()


@pytest.mark.parametrize("odd_only", [False, True])
def test_a_baseline_that_builds_otherwise_for_the_confirmation_is_refused(
    monkeypatch: pytest.MonkeyPatch, odd_only: bool,
) -> None:
    """Issue 25 (red team): a matched baseline that sabotages its builds for the confirmation
    alone confirms a lucky screening. The confirmation builds in a fresh child, among decoys
    (this job's screening seeds) that must come out bit for bit as first built: the file, which
    cannot tell a decoy from a new seed, is refused, whether it sabotages every build there or
    guesses at half of them."""
    monkeypatch.setattr(protocol.Job, "stage_values", lucky_screening)
    baseline = SABOTEUR.replace("ODD_ONLY = False", f"ODD_ONLY = {odd_only}")
    with pytest.raises(BenchError) as caught:
        _judge("job_saboteur", baseline=baseline)
    assert caught.value.code is ErrorCode.NOT_CAPTURABLE, caught.value.message
    assert "baseline" in caught.value.message and "built again for the confirmation" in caught.value.message


def test_without_the_rebuild_check_the_saboteur_forges_helps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack above is real: with the decoys unchecked, the null idea is 'helps'."""
    real = execution.import_rebuilt

    def no_decoys(session: Any, first: Any, config: int, decoys: list[int | None], limit: int) -> Any:
        new = real(session, first, config, [None] * len(decoys), limit)
        return {k: arrays for k, arrays in new.items() if decoys[k] is None}

    monkeypatch.setattr(protocol.Job, "stage_values", lucky_screening)
    monkeypatch.setattr(execution, "import_rebuilt", no_decoys)
    report = _judge("job_saboteur", baseline=SABOTEUR)
    assert report["practical_verdict"] == "helps", report["bench_report"]["confirmation"]


LEAKER = (Path(__file__).parents[1] / "security" / "hostile" / "seed_leaker.py").read_text()


def _leaked(message: str) -> set[int]:
    return {int(s) for s in re.findall(r"SEEDS ([0-9,]+)", message)[0].split(",")}


def test_what_a_file_learns_of_its_builds_in_one_job_is_of_no_use_in_the_next() -> None:
    """Red team (issue 25): a file's error text carried the init seeds it built, and 35 failing
    jobs recovered every value the epoch's jobs share (its sweep's and its screening pool's).
    A submitted file builds the screening's seeds with seeds of its job alone: two jobs that
    screen on common pool seeds share only the sweep's builds."""
    secret = engine_options.current().deployment_secret()
    keys = ("learn_a", "learn_b")
    assert set(screening_seeds(8, secret, keys[0])) & set(screening_seeds(8, secret, keys[1]))  # common draws
    seen = []
    for key in keys:
        with pytest.raises(BenchError) as caught:
            judge(JudgeRequest(track="smoke", idea_code=LEAKER, n_seeds=8, job_key=key))
        seen.append(_leaked(caught.value.message))
    assert len(seen[0]) == len(seen[1]) == 10 and len(seen[0] & seen[1]) == 2  # the two sweep seeds


def test_nothing_a_file_says_in_the_confirmations_rebuild_reaches_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its rebuild child knows the confirmation's seeds (the same for every job of these models):
    an error there ends the job ``not_capturable`` with none of the child's text."""
    monkeypatch.setattr(protocol.Job, "stage_values", lucky_screening)
    with pytest.raises(BenchError) as caught:
        _judge("job_leak", baseline=LEAKER.replace("ONLY_REBUILD = False", "ONLY_REBUILD = True"))
    assert caught.value.code is ErrorCode.NOT_CAPTURABLE and "SEEDS" not in caught.value.message
    assert "built again for the confirmation" in caught.value.message


def test_the_ideas_measure_code_cannot_take_over_the_baselines_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    """Red team (issue 25): a self-measured idea's ``measure()`` module code runs in the track's
    own baseline's capture child; kept for the confirmation's rebuild, that child built what the
    idea's code made of it (every seed the first capture had not built sabotaged): helps for
    the baseline's own model. Now the idea's measure() of the baseline runs in a fresh child of
    its own, closed after; the baseline's own child (it captures and trains) rebuilds."""

    monkeypatch.setattr(protocol.Job, "stage_values", lucky_screening)
    started = count_launches(monkeypatch)
    hijack = (Path(__file__).parents[1] / "security" / "hostile" / "measure_hijack.py").read_text()
    report = judge(JudgeRequest(track="smoke", idea_code=hijack, n_seeds=N, job_key="job_hijack")).model_dump(mode="json")
    confirmation = report["bench_report"]["confirmation"]
    assert confirmation is not None and confirmation["comparison"]["per_seed_diffs"] == [0.0] * N
    assert report["practical_verdict"] != "helps"
    assert sorted(started) == ["baseline", "capture_idea", "idea", "measure_baseline_1", "rebuild_idea_1"], started
