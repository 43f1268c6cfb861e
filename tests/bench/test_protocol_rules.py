"""The protocol's rules, judged through a scripted executor (tests/bench/scripted.py): no child
process; each test writes what every run scores, and the protocol's own code decides.

The end-to-end tests through real sandboxed children (test_confirmation.py, test_protocol.py,
tests/security) check that the sandbox executor delivers what these assume."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.captured import ArmCapture
from bench.catalog import planned_runs
from bench.errors import BenchError, ErrorCode
from bench.execution import Trained
from bench.judge import declared_configs, judge
from bench.npy import read_npy
from bench.options import EngineOptions
from bench.protocol import Progress
from bench.report import Report, runs_made
from bench.seeding import SeedSecret, confirmation_seeds
from bench.stats import confirmation_p, paired_sign_flip_p
from tests.bench.scripted import TRACK, Asked, Scripted, ScriptedExecutor, by_lr, scripted_request

SECRET = SeedSecret(key=b"scripted-protocol-rules-secret-0", epoch=1)
N = 7


def run(script: Any, **request: Any) -> tuple[dict[str, Any], Scripted, list[Progress]]:
    executor = Scripted(script)
    events: list[Progress] = []
    request.setdefault("job_key", "job")
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, **request), events.append,
                   executor=executor, track=TRACK).model_dump(mode="json")
    Report.model_validate(report)
    return report, executor, events


def test_a_real_win_is_confirmed_on_fresh_seeds_and_every_counted_run_is_run() -> None:
    report, executor, events = run(by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.3}))
    br = report["bench_report"]
    assert (report["practical_verdict"], report["system_verdict"], br["decided_by"]) == (
        "helps", "worked", "confirmation")
    assert br["comparison"]["per_seed_diffs"] == pytest.approx([0.09 - 0.25] * N)
    assert br["confirmation"]["seeds"] == confirmation_seeds(N) and len(br["confirmation"]["looks"]) == 1
    assert not set(br["confirmation"]["seeds"]) & set(br["seeds"]["final"])
    # the sweep on the union grid (3 lrs x 2 seeds x 2 arms), the screening and the confirmation
    assert len(executor.asked(split="val")) == 12
    assert len(executor.asked(split="test", phase="screening")) == len(executor.asked(phase="confirmation")) == 2 * N
    # the plan counted what ran, and progress said so (bench.plan: one count of the runs)
    assert events[-1].done == events[-1].total == len(executor.asked()) == max(e.total for e in events)
    assert executor.jobs[0].calls[-3:] == ["rebuild:baseline", "rebuild:idea", "close"] or \
        executor.jobs[0].calls[-3:] == ["rebuild:idea", "rebuild:baseline", "close"]
    assert "forget_builds" in executor.jobs[0].calls  # no child that ran submitted code builds it again


def test_a_null_idea_that_wins_only_its_screening_is_not_helps() -> None:
    """As a lucky re-roll would: the idea wins the screening, then is the baseline's equal on the
    confirmation's fresh seeds; a futile first look (p = 1) ends it."""
    tuned = by_lr({"baseline": 0.03, "idea": 0.03})

    def lucky(run: Asked) -> float:
        if run.arm == "idea" and run.split == "test" and run.phase == "screening":
            return 0.3
        return tuned(run)

    report, executor, _ = run(lucky)
    br = report["bench_report"]
    assert br["comparison"]["verdict"] == "idea better (significant)"
    assert br["confirmation"]["comparison"]["per_seed_diffs"] == [0.0] * N
    assert not br["confirmation"]["significant"] and br["confirmation"]["p_value"] == 1.0
    assert len(br["confirmation"]["looks"]) == 1
    assert (report["practical_verdict"], report["practical_detail"], report["system_verdict"]) == (
        "inconclusive", "not_replicated", "failed")
    assert report["worked"] is False and br["p_helps"] == 1.0


def test_a_win_that_only_came_from_the_baselines_tuning_is_not_helps() -> None:
    """The baseline's sweep picks a worse lr (0.01) than its best on test (0.03, the idea's): the
    baseline is trained at the idea's lr too, matches the idea there, and the win is gone."""
    def script(run: Asked) -> float:
        if run.split == "val":
            return by_lr({"baseline": 0.01, "idea": 0.03})(run)
        return 0.3 if run.cfg["lr"] == 0.03 else 0.5

    report, executor, events = run(script)
    br = report["bench_report"]
    matched = br["screening"]["matched_lr"]
    assert br["baseline"]["best_cfg"]["lr"] == 0.01 and br["idea"]["best_cfg"]["lr"] == matched["lr"] == 0.03
    assert br["comparison"]["verdict"] == "idea better (significant)"
    assert matched["comparison"]["per_seed_diffs"] == [0.0] * N
    assert (report["practical_verdict"], report["practical_detail"]) == ("inconclusive", "lr_confounded")
    assert br["confirmation"] is None and br["p_helps"] == 1.0
    assert len(executor.asked(arm="baseline", split="test")) == 2 * N  # its best lr and the idea's
    assert events[-1].done == events[-1].total == len(executor.asked())


def test_a_win_over_a_baseline_still_at_its_grids_edge_is_not_helps() -> None:
    """Both arms do better the larger the lr: the grid is extended once, both still pick its top,
    and a win over a baseline that may be under-tuned is lr_confounded, with a warning."""
    def script(run: Asked) -> float:
        return (0.3 if run.arm == "idea" else 0.5) + 0.1 / run.cfg["lr"] / 100

    report, executor, events = run(script)
    br = report["bench_report"]
    grid = br["lr_grid"] if isinstance(br["lr_grid"], list) else br["lr_grid"]["baseline"]
    assert br["baseline"]["best_cfg"]["lr"] == max(grid) > max(TRACK.card["defaults"]["lr_grid"])
    assert br["comparison"]["verdict"] == "idea better (significant)" and br["screening"]["matched_lr"] is None
    assert (report["practical_verdict"], report["practical_detail"]) == ("inconclusive", "lr_confounded")
    assert any("still at the edge" in w for w in br["warnings"])
    assert len(executor.asked(split="val")) == 16  # 3 lrs, then one more above, x 2 seeds x 2 arms
    assert events[-1].done == events[-1].total == len(executor.asked())


def test_a_close_first_look_gets_a_second_on_fresh_seeds() -> None:
    """The first look is close (neither significant at alpha/5 nor futile); the 2N pairs are a
    clear win: N more confirmation seeds are trained and the second look decides."""
    close = [1.0, 1.0, 1.0, 1.0, 1.0, -0.5, 0.2]  # baseline - idea over the first look's pairs (MSE)
    tuned = by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 1.0, "idea": 0.0})

    def script(run: Asked) -> float:
        if run.split == "val" or run.arm == "baseline":
            return tuned(run)
        if run.phase == "confirmation" and run.n < N:
            return math.sqrt(1.0 - close[run.n])
        return 0.0

    report, executor, events = run(script)
    stage = report["bench_report"]["confirmation"]
    p1 = paired_sign_flip_p([-g for g in close], alternative="less")[0]
    assert 0.01 < p1 <= 0.5
    assert [look["n_pairs"] for look in stage["looks"]] == [N, 2 * N]
    p2 = paired_sign_flip_p([-g for g in close] + [-1.0] * N, alternative="less")[0]  # all 2N pairs
    assert [look["p_better"] for look in stage["looks"]] == pytest.approx([p1, p2])
    assert stage["seeds"] == confirmation_seeds(2 * N) and len(stage["per_seed"]["baseline"]) == 2 * N
    assert stage["p_value"] == pytest.approx(confirmation_p([p1, p2])) == pytest.approx(p2 / 0.8)
    assert stage["significant"]
    assert [look["alpha"] for look in stage["looks"]] == pytest.approx([0.01, 0.04])
    assert report["practical_verdict"] == "helps" and "in 2 looks" in report["summary"]
    assert [e.message for e in events if "first look was close" in (e.message or "")]
    assert len(executor.asked(phase="confirmation")) == 2 * 2 * N
    assert executor.jobs[0].calls.count("forget_builds") == 2  # each look builds in fresh children
    assert events[-1].done == events[-1].total == len(executor.asked())


MATCHED = "# a matched baseline\ndef build_model(spec, **hp):\n    raise AssertionError\n"


@pytest.mark.parametrize("worse_by", [0.0, 0.2])
def test_a_matched_baseline_is_judged_against_the_tracks_first(worse_by: float) -> None:
    """Its check is a screening of the matched baseline (as the idea) against the track's, on the
    same seeds: worse by more than the track's smallest effect ends baseline_inferior; else the
    job goes on, and its report shows what the check found."""
    tuned = by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.3})

    def script(run: Asked) -> float:
        if run.checking and run.arm == "idea":  # the matched baseline, in its check
            return math.sqrt(0.25 + worse_by) if run.split == "test" else tuned(run)
        return tuned(run)

    if worse_by:
        with pytest.raises(BenchError) as caught:
            run(script, baseline_code=MATCHED)
        assert caught.value.code == ErrorCode.BASELINE_INFERIOR
        assert "worse than the track's canonical baseline by 0.2" in caught.value.message
        return
    report, executor, events = run(script, baseline_code=MATCHED)
    br = report["bench_report"]
    assert [job.checking for job in executor.jobs] == [True, False]
    assert not executor.asked(checking=True, phase="confirmation")  # the check screens only
    check = br["matched_baseline_check"]
    assert check["non_inferior"] is True and check["worse_by"] == pytest.approx(0.0, abs=1e-6)
    assert report["practical_verdict"] == "helps"
    # one count for the whole job: the check's runs, then the job's on from them (it never goes back)
    done = [e.done for e in events]
    assert done == sorted(done) and events[0].stage.startswith("baseline_check:")
    assert events[-1].done == events[-1].total == len(executor.asked())


def test_a_matched_baseline_is_not_swept_again_at_the_config_its_check_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25: a matched baseline's final config is the one its check chose (``Job.pinned``),
    so its sweep in the job decided nothing and is not run: with two idea configs that is 14 runs
    fewer. What decides is unchanged (the same verdicts, tests, final runs and grids as with the
    sweep); the report's baseline sweep is the one its check ran, and that check was sized for the
    idea's two configs (``declared_configs``: the matched baseline, and the track's baseline beside
    it, swept the grid densified, its own lrs among them), so the tuning budgets are equal; the run
    count is what ran."""
    from bench import protocol

    script = by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.3})

    def judged() -> tuple[dict[str, Any], Scripted, list[Progress]]:
        executor, events = Scripted(script), []
        report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", baseline_code=MATCHED,
                                        hparams={"width": [8, 16]}),
                       events.append, executor=executor, track=TRACK).model_dump(mode="json")
        Report.model_validate(report)
        return report, executor, events

    report, executor, events = judged()
    monkeypatch.setattr(protocol.Job, "swept", lambda self, arm: True)  # the job before: both arms swept
    before, executor_before, _ = judged()
    assert not executor.asked(checking=False, arm="baseline", split="val")
    assert len(executor_before.asked(checking=False, arm="baseline", split="val")) == 14  # 7 lrs x 2 seeds
    assert len(executor.asked()) == len(executor_before.asked()) - 14
    assert events[-1].done == events[-1].total == len(executor.asked()) == max(e.total for e in events)
    # the API's count at submission (no edge, no lr switch here; the confirmation comes on top)
    assert planned_runs(TRACK.card, 2, N, matched_configs=1) == (
        len(executor.asked()) - len(executor.asked(phase="confirmation")))
    br, old = report["bench_report"], before["bench_report"]
    assert (report["system_verdict"], report["practical_verdict"]) == (before["system_verdict"],
                                                                       before["practical_verdict"]) == ("worked", "helps")
    for key in ("comparison", "screening", "confirmation", "lr_grid", "matched_baseline_check"):
        assert br[key] == old[key], key
    assert br["baseline"]["best_cfg"] == old["baseline"]["best_cfg"]
    assert br["baseline"]["full"] == old["baseline"]["full"] and br["idea"] == old["idea"]
    check = br["matched_baseline_check"]
    # the check's grid, one config: densified for two idea configs (7 lrs, the track's among them) and
    # both edge steps (2 lrs each), whatever its arms' best
    assert br["baseline"]["sweep"] == check["sweep"] and len(check["sweep"]) == 7 + 2 * 2
    checked = sorted(row["cfg"]["lr"] for row in check["sweep"])
    assert {0.01, 0.03, 0.1} <= set(checked) and checked[0] < 0.01 and checked[-1] > 0.1
    assert len(executor.asked(checking=True, arm="baseline", split="val")) == 11 * 2  # the track's, as densely
    assert br["budget"]["configs"] == {"idea": 6, "baseline": 11}
    assert br["baseline"]["union_lr_grid"] == checked  # what its check swept
    assert not any("tuning budget" in w for w in br["warnings"])


def test_a_matched_baselines_many_tensors_do_not_raise_the_ideas_tensor_cap() -> None:
    """Every limit of a matched baseline's job is the track's canonical baseline's, the parameter
    tensors' too (the bench redraws each tensor's values and keeps two numbers of it, so the cap
    bounds what a file smuggles in them). Until session 36 the cap was four times the matched
    baseline's tensors: a matched baseline padded to the 64 its check allows let its idea hold
    256 (a red team's reading of ``Job.check_counts``)."""
    tuned = by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.3})
    idea = "# an idea of 65 one-number tensors\ndef build_model(spec, **hp):\n    raise AssertionError\n"
    executor = Scripted(tuned, options={"tensors_by_file": {MATCHED: 64, idea: 65}})
    with pytest.raises(BenchError) as caught:
        judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", idea_code=idea, baseline_code=MATCHED),
              None, executor=executor, track=TRACK)
    assert caught.value.code == ErrorCode.PARAMETER_PARITY and "holds 65 parameter tensors" in caught.value.message
    assert "allows 64" in caught.value.message
    assert [job.checking for job in executor.jobs] == [True, False]  # the matched baseline passed its check
    # 64 tensors, as the matched baseline holds, are within the cap: the job is judged
    within = Scripted(tuned, options={"tensors_by_file": {MATCHED: 64, idea: 64}})
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", idea_code=idea, baseline_code=MATCHED),
                   None, executor=within, track=TRACK).model_dump(mode="json")
    assert report["bench_report"]["parameter_parity"]["tensors"] == {"idea": 64, "baseline": 64}
    assert report["bench_report"]["matched_baseline_check"]["n_tensors"] == 4


def test_an_idea_with_more_configs_than_its_matched_baselines_check_was_tuned_for_is_refused() -> None:
    """The check is sized before the idea runs, from the configs its request declares (``hparams``,
    else a literal ``HPARAMS``: ``bench.judge.declared_configs``). A file whose HPARAMS its child
    reports larger (computed, so no literal says it) would out-tune its pinned matched baseline:
    the job refuses it before training anything of its own, with a code and a hint; the same
    configs declared literally are judged, on a check densified for them."""
    script = by_lr({"baseline": 0.03, "idea": 0.03})
    computed = "HPARAMS = {'width': [8 * 2**i for i in range(3)]}\n" + scripted_request().idea_code
    unnamed = "globals()['HPARAMS'] = {'width': [8, 16, 32]}\n" + scripted_request().idea_code
    literal = "HPARAMS = {'width': [8, 16, 32]}\n" + scripted_request().idea_code
    grid = {"width": [8, 16, 32]}
    # a grid the file computes is refused before anything runs (the same code at submission: test_intake)
    early = Scripted(script, {"hparams_by_file": {computed: grid}})
    with pytest.raises(BenchError) as caught:
        judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", baseline_code=MATCHED,
                               idea_code=computed), executor=early, track=TRACK)
    assert caught.value.code == ErrorCode.INVALID_HPARAMS and "literal" in caught.value.message
    assert not early.asked()
    # one no statement names: refused once its child reports it, before the job trains anything
    hidden = Scripted(script, {"hparams_by_file": {unnamed: grid}})
    with pytest.raises(BenchError) as caught:
        judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", baseline_code=MATCHED,
                               idea_code=unnamed), executor=hidden, track=TRACK)
    assert caught.value.code == ErrorCode.INVALID_HPARAMS and "3 configurations" in caught.value.message
    assert "literal" in (caught.value.hint or "")
    assert hidden.asked(checking=True) and not hidden.asked(checking=False)  # refused before the job trained
    declared = Scripted(script, {"hparams_by_file": {literal: grid}})
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", baseline_code=MATCHED,
                                    idea_code=literal), executor=declared, track=TRACK).model_dump(mode="json")
    br = report["bench_report"]
    # an annotated literal declares as much (red team: it declared one, and the job refused it)
    assert declared_configs(scripted_request(idea_code=literal.replace("HPARAMS =", "HPARAMS: dict =")), 12) == 3
    assert declared_configs(scripted_request(idea_code=literal, hparams={"depth": [1, 2]}), 12) == 2
    # its check swept the matched baseline's one config on the grid densified for 3 (3 + 2 x 3 lrs),
    # and 3 lrs beyond each edge
    assert br["budget"]["configs"] == {"idea": 9, "baseline": 9 + 2 * 3}
    assert br["matched_baseline_check"]["tuned_for"] == 3


def test_parity_is_a_rule_on_the_trainers_counts() -> None:
    """An idea config over the parity ratio ends the job before any run is trained."""
    executor = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}))
    executor.options["counts"] = {"idea": 321 * 2}
    with pytest.raises(BenchError) as caught:
        judge(scripted_request(seed_secret=SECRET, n_seeds=N), executor=executor, track=TRACK)
    assert caught.value.code == ErrorCode.PARAMETER_PARITY
    assert not executor.asked()


def test_a_second_job_scores_the_track_baselines_sweep_and_screening_from_the_cache(tmp_path: Path) -> None:
    """The canonical baseline's runs are the same in every job of an epoch (its seeds, its graph):
    the second job trains the idea alone, where the seeds are the first job's (the sweep's), and
    still gets the same numbers; a job's own screening seeds are its own draw."""
    options = EngineOptions(cache_dir=tmp_path)
    script = by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.3})
    first, executor, _ = run(script, options=options)
    again, executor_again, _ = run(script, options=options, job_key="another")
    assert first["bench_report"]["execution"]["baseline_cache_hits"] == 0
    hits = again["bench_report"]["execution"]["baseline_cache_hits"]
    assert hits >= 6 and not executor_again.asked(arm="baseline", split="val")  # the sweep: all cached
    assert again["bench_report"]["baseline"]["sweep"] == first["bench_report"]["baseline"]["sweep"]


def test_an_idea_with_more_configs_gives_the_baseline_a_denser_grid_of_equal_budget() -> None:
    """PROTOCOL.md 1: the baseline's tuning budget is at least the idea's by construction: two
    idea configs per lr, so the baseline sweeps at least twice the lrs over the same range, the
    track's own among them."""
    executor = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}), {"hparams": {"idea": {"width": [8, 16]}}})
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job"), executor=executor, track=TRACK).model_dump(mode="json")
    idea, baseline = executor.asked(arm="idea", split="val"), executor.asked(arm="baseline", split="val")
    assert len(idea) == 3 * 2 * 2 and len(baseline) == 7 * 2  # (3 lrs x 2 configs | 7 lrs) x 2 sweep seeds
    lrs = {arm: sorted({a.cfg["lr"] for a in runs}) for arm, runs in (("idea", idea), ("baseline", baseline))}
    assert len(lrs["baseline"]) == 7 and set(lrs["idea"]) <= set(lrs["baseline"])  # the grid, 2 more per interval
    assert (lrs["baseline"][0], lrs["baseline"][-1]) == (lrs["idea"][0], lrs["idea"][-1])
    assert report["bench_report"]["budget"] == {"configs": {"baseline": 7, "idea": 6}, "sweep_seeds": 2}
    assert not any("tuning budget" in w for w in report["bench_report"]["warnings"])


def test_a_tracks_own_baseline_has_one_config_whatever_its_child_says() -> None:
    """Red team (session 21): a custom track's file wrote a grid of decoy configs into its
    capture child's answer (its module code walks the stack to the load's reply); the baseline
    then swept decoys, which no validation had seen and which thinned its lr grid against an
    idea of several configs. The parent does not read a track's own baseline's HPARAMS."""
    executor = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}),
                        {"hparams": {"idea": {"width": [8, 16]}, "baseline": {"decoy": [0, 1, 2, 3]}}})
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job"), executor=executor,
                   track=TRACK).model_dump(mode="json")
    assert {str(a.cfg.get("hparams", {})) for a in executor.asked(arm="baseline")} == {"{}"}
    assert report["bench_report"]["budget"] == {"configs": {"baseline": 7, "idea": 6}, "sweep_seeds": 2}


def test_a_matched_baseline_is_refused_on_a_custom_track_before_any_child() -> None:
    """A custom track's baseline is its validated build (``Job.pins_baseline``); a matched one,
    built like the track's own at every seed of its check, could lend the track's sabotage at
    other seeds to a copy of it (red team, session 21). Refused at once, by the API's static
    checks as well (tests/app)."""
    from bench.custom_track import CustomTrack

    source = (Path(__file__).parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text()
    track = CustomTrack.from_source(source)
    executor = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}))
    copy = "from torch import nn\n\ndef build_model(spec):\n    return nn.Linear(4, 1)\n"
    with pytest.raises(BenchError) as refused:
        judge(scripted_request(seed_secret=SECRET, custom_track=track, baseline_code=copy), executor=executor)
    assert refused.value.code == ErrorCode.MATCHED_BASELINE_UNSUPPORTED and refused.value.hint
    assert executor.jobs == []


REPEATED = dataclasses.replace(TRACK, card={**TRACK.card, "defaults": {**TRACK.card["defaults"], "repeats": 2}})


def test_a_cards_repeats_train_each_test_seed_that_often_and_the_test_pairs_their_means() -> None:
    """``defaults.repeats`` 2: each test seed's runs twice (its split; each run its own order and
    init, from the seed's captured build), the pair's value the two runs' mean; the sweep once.
    The screening's first runs favour the idea on six seeds of seven, so it makes its repeats,
    and its means' test counts the efficacy stop it passed (2/128, not 1/128); the confirmation's
    first runs all favour the idea, so it stops there (efficacy)."""
    def script(run: Asked) -> float:  # MSE = offset²; the baseline scores 0.5² = 0.25
        if run.split == "test" and run.arm == "idea":
            if run.phase == "confirmation":
                return 0.2
            if run.n < N:  # the first runs, seed by seed: the first seed's worse than the baseline
                return 0.6 if run.n == 0 else 0.4
            return 0.2  # the repeats
        return by_lr({"baseline": 0.03, "idea": 0.03})(run)

    executor = Scripted(script)
    events: list[Progress] = []
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job"), events.append,
                   executor=executor, track=REPEATED).model_dump(mode="json")
    br = report["bench_report"]
    assert br["comparison"]["per_seed_diffs"] == pytest.approx([0.2 - 0.25] + [0.1 - 0.25] * (N - 1))
    assert br["comparison"]["p_better"] == pytest.approx(2 / 2**N) and br["comparison"]["p_value"] == pytest.approx(4 / 2**N)
    assert br["n_seeds"] == N and len(br["seeds"]["final"]) == len(set(br["seeds"]["final"])) == N
    assert br["budget"]["repeats"] == 2 and report["practical_verdict"] == "helps"
    assert br["budget"]["repeats_made"] == {"screening": [2], "confirmation": [1]}
    assert "across 7 paired seeds (each the mean of 2 runs per arm)" in report["summary"]
    assert len(executor.asked(split="val")) == 12  # the sweep is not repeated
    assert len(executor.asked(split="test", phase="screening")) == 2 * 2 * N
    assert len(executor.asked(phase="confirmation")) == 2 * N
    assert events[-1].done == events[-1].total == len(executor.asked()) == runs_made(br)
    for job in executor.jobs:
        tests = [c for c in job.commands if c["eval"] == "test"]

        def key(c: dict[str, Any]) -> tuple[str, str, str]:  # the arm, the seed's data, the config
            return c["run_id"].rstrip("0123456789"), c["data_dir"], json.dumps(c["cfg"], sort_keys=True)

        own = {key(c): c for c in tests if "build_init" not in c}
        repeats = [c for c in tests if "build_init" in c]
        assert len(repeats) == 2 * N  # the screening's: both arms, every seed once more
        for c in repeats:  # the seed's build and split; its own initial values and order
            first = own[key(c)]
            assert c["build_init"] == first["init_seed"]
            assert c["init_seed"] != first["init_seed"] and c["order_seed"] != first["order_seed"]
            assert not c["keep"]


def test_a_trimmed_seed_value_leaves_out_each_seeds_runs_far_off() -> None:
    """``defaults.seed_value: trimmed`` (vision@6) with 8 runs a seed: each seed's lowest and
    highest run are dropped. The idea's runs are 0.4 (MSE 0.16; the first seed's first 0.6, so
    the first runs decide nothing) but for one repeat a seed far off (MSE 25): its mean makes
    every pair about 3 worse than the baseline's 0.25, its trimmed mean 0.06-0.09 better; the
    summary and the budget say which value was taken."""
    def script(run: Asked) -> float:
        if run.split == "test" and run.arm == "idea" and run.phase == "screening":
            if run.n < N:
                return 0.6 if run.n == 0 else 0.4
            return 5.0 if (run.n - N) % 7 == 2 else 0.4  # the repeats: one a seed far off
        return by_lr({"baseline": 0.03, "idea": 0.03})(run)

    reports = {}
    for statistic in ("trimmed", "mean"):
        track = dataclasses.replace(TRACK, card={**TRACK.card, "defaults": {
            **TRACK.card["defaults"], "repeats": 8, "seed_value": statistic}})
        reports[statistic] = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job"),
                                   executor=Scripted(script), track=track).model_dump(mode="json")
    br = reports["trimmed"]["bench_report"]
    assert br["budget"]["repeats_made"]["screening"] == [8] and br["budget"]["seed_value"] == "trimmed"
    first = (0.36 + 5 * 0.16) / 6  # the first run 0.36 kept, one 0.16 and the 25 dropped
    assert br["comparison"]["per_seed_diffs"] == pytest.approx([first - 0.25] + [0.16 - 0.25] * (N - 1))
    assert "(each the trimmed mean of 8 runs per arm)" in reports["trimmed"]["summary"]
    means = reports["mean"]["bench_report"]["comparison"]["per_seed_diffs"]
    assert all(d > 2.5 for d in means) and reports["mean"]["practical_verdict"] != "helps"


def _repeated(script: Any, **request: Any) -> tuple[dict[str, Any], Scripted, list[Progress]]:
    executor, events = Scripted(script), []
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", **request), events.append,
                   executor=executor, track=REPEATED).model_dump(mode="json")
    Report.model_validate(report)
    return report, executor, events


def test_an_idea_whose_first_runs_are_no_better_gets_no_repeats_and_the_count_says_so() -> None:
    """Futility (``bench.decide.repeats_futile``): the screening's first runs show the idea worse,
    so no seed runs again; the progress count drops the repeats it had allowed for."""
    report, executor, events = _repeated(by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.6}))
    br = report["bench_report"]
    assert br["budget"]["repeats"] == 2 and br["budget"]["repeats_made"] == {"screening": [1]}
    assert len(executor.asked(split="test")) == 2 * N and "confirmation" not in {a.phase for a in executor.asked()}
    assert not any("build_init" in c for job in executor.jobs for c in job.commands)
    assert report["practical_verdict"] == "harms" and runs_made(br) == len(executor.asked())
    assert max(e.at_most for e in events if e.at_most is not None) >= len(executor.asked()) + 2 * N  # allowed for
    assert events[-1].done == events[-1].total == len(executor.asked())


def test_a_stage_whose_first_runs_favoured_the_idea_leaves_harms_to_them() -> None:
    """The screening's first runs favour the idea on average (not on every pair), so it makes its
    repeats; the repeats are so much worse that every mean is: significantly worse on its means,
    but harms is judged on first runs (``bench.stats.harms_judged_on_first_runs``): inconclusive,
    and the report says why."""
    def script(run: Asked) -> float:  # MSE = offset²; the baseline scores 0.5² = 0.25
        if run.split == "test" and run.arm == "idea" and run.phase == "screening":
            if run.n < N:  # first runs: better than the baseline on all seeds but one
                return 0.6 if run.n == 0 else 0.4
            return 0.9  # the repeats: far worse
        return by_lr({"baseline": 0.03, "idea": 0.03})(run)

    report, _, _ = _repeated(script)
    br = report["bench_report"]
    assert br["budget"]["repeats_made"] == {"screening": [2]}
    assert br["comparison"]["delta_mean"] > 0 and br["comparison"]["p_value"] <= 0.05  # the means: worse
    assert br["comparison"]["verdict"] == "no significant win" and report["practical_verdict"] == "inconclusive"
    assert "harms is judged on the first runs" in br["comparison"]["p_method"]
    assert "harms is judged on each seed's first run" in report["summary"]


def test_a_win_never_in_doubt_costs_one_run_a_seed() -> None:
    """Efficacy (``bench.decide.efficacy``): every first run favours the idea, in the screening and
    in the confirmation's first look: both stop there, their tests on those runs, and the job
    trains what it would with one run a seed."""
    report, executor, _ = _repeated(by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.3}))
    br = report["bench_report"]
    assert br["budget"]["repeats_made"] == {"screening": [1], "confirmation": [1]}
    assert report["practical_verdict"] == "helps" and br["comparison"]["p_better"] == pytest.approx(1 / 2**N)
    assert len(executor.asked()) == 12 + 2 * N + 2 * N == runs_made(br)
    assert not any("build_init" in c for job in executor.jobs for c in job.commands)
    assert "paired seeds the idea" in report["summary"]  # one run a seed: nothing to say of means


def test_a_confirmation_look_whose_first_runs_are_no_better_gets_no_repeats() -> None:
    """A screened win whose confirmation's first runs show no gain: the look stops there, is not
    significant, and a second look is futile too: not replicated, at a K-th of the look's runs."""
    tuned = by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.3})

    def script(run: Asked) -> float:
        if run.phase == "confirmation" and run.arm == "idea":
            return 0.6
        return tuned(run)

    report, executor, events = _repeated(script)
    br = report["bench_report"]
    assert br["budget"]["repeats_made"] == {"screening": [1], "confirmation": [1]}  # (the screening: efficacy)
    assert len(executor.asked(phase="confirmation")) == 2 * N and br["confirmation"]["n_runs"] == 2 * N
    assert report["practical_verdict"] != "helps" and runs_made(br) == len(executor.asked())
    assert events[-1].done == events[-1].total == len(executor.asked())


def test_a_second_confirmation_look_judges_futility_on_the_pooled_pairs() -> None:
    """The second look's test runs on both looks' pairs, so its repeats stop only when the pooled
    gain is not positive: here its own first runs are worse, the pooled pairs still better, and
    its seeds run twice (a stop on its own runs would have tested single runs where the means
    decide)."""
    close = [1.0, 1.0, 1.0, 1.0, 1.0, -0.5, 0.2]  # baseline - idea over the first look's pairs (MSE)
    tuned = by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 1.0, "idea": 0.0})

    def script(run: Asked) -> float:
        if run.split == "val" or run.arm == "baseline" or run.phase != "confirmation":
            return tuned(run)
        if run.n < 2 * N:  # the first look: its first runs, then its repeats
            return math.sqrt(1.0 - close[run.n % N])
        return math.sqrt(1.2) if run.n < 3 * N else 0.0  # the second look's first runs, then repeats

    report, executor, _ = _repeated(script)
    br = report["bench_report"]
    assert br["budget"]["repeats_made"] == {"screening": [1], "confirmation": [2, 2]}  # (the screening: efficacy)
    assert len(executor.asked(phase="confirmation")) == 2 * 2 * 2 * N == br["confirmation"]["n_runs"]
    per_seed = br["confirmation"]["per_seed"]
    diffs = [i - b for i, b in zip(per_seed["idea"], per_seed["baseline"], strict=True)]
    assert diffs[N:] == pytest.approx([-(-0.2 + 1.0) / 2] * N)  # the second look's means (MSE: lower)


def test_a_matched_baselines_check_makes_every_repeat_even_when_no_better() -> None:
    """The check estimates (non-inferiority is a point estimate): a matched baseline exactly as
    good as the track's is no better, yet its check runs every seed twice."""
    tuned = by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.3})

    def script(run: Asked) -> float:
        return 0.5 if run.checking and run.split == "test" else tuned(run)

    report, executor, _ = _repeated(script, baseline_code=MATCHED)
    check = report["bench_report"]["matched_baseline_check"]
    assert check["non_inferior"] is True
    assert len(executor.asked(checking=True, split="test")) == 2 * 2 * N


def test_a_self_measured_mechanism_is_measured_on_both_arms_final_models() -> None:
    """The idea's measure() on every screening model of both arms (the baseline's in its capture
    child, by the idea's code); the parent decides the expectation."""
    measured: list[tuple[str, int]] = []

    def measure(arm: str, run: Any) -> float:
        measured.append((arm, run.seed_index))
        return 1.0 if arm == "idea" else 0.0

    executor = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}, {"baseline": 0.5, "idea": 0.3}),
                        {"mechanism": {"quantity": "a gate's mean", "prediction": "the idea's gate is open",
                                      "expect": {"kind": "higher_than_baseline"}}, "measured": measure})
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job"), executor=executor, track=TRACK).model_dump(mode="json")
    assert sorted(arm for arm, _ in measured) == ["baseline"] * N + ["idea"] * N
    signature = report["bench_report"]["mechanism_signature"]
    assert signature["idea_values"] == [1.0] * N and signature["baseline_values"] == [0.0] * N
    assert signature["confirmed"] is True and signature["self_measured"] is True
    assert report["mechanism_ok"] == 1 and report["system_verdict"] == "worked"


@pytest.mark.parametrize(("idea_mse", "verdict"), [(0.2469, ("inconclusive", "below_effect")), (0.235, ("helps", None))])
def test_a_win_over_a_sandbagged_matched_baseline_counts_only_what_beats_the_tracks(
    idea_mse: float, verdict: tuple[str, str | None],
) -> None:
    """Red-team shape (issue 25.5): the agent's matched baseline is worse than the track's by 0.9
    of the smallest effect m (non-inferior: its check allows up to m), and the idea beats it by
    1.5 m, so by 0.6 m over the track's baseline: not helps (below_effect). An idea that beats
    the track's baseline by m too still helps."""
    canonical, matched = 0.25, 0.25 * (1 + 0.9 * 0.02)  # MSE; the track's smallest effect is 2 %
    tuned = by_lr({"baseline": 0.03, "idea": 0.03})

    def script(run: Asked) -> float:
        if run.split == "val":
            return tuned(run)
        if run.checking:  # the check: the matched baseline (as the idea) against the track's
            return math.sqrt(matched if run.arm == "idea" else canonical)
        return math.sqrt(matched if run.arm == "baseline" else idea_mse)

    report, _, _ = run(script, baseline_code=MATCHED)
    br = report["bench_report"]
    check = br["matched_baseline_check"]
    assert check["non_inferior"] and check["worse_by"] == pytest.approx(matched - canonical, rel=1e-4)
    m = br["smallest_effect"]
    gain = -br["comparison"]["delta_mean"]
    assert gain >= m and -br["confirmation"]["comparison"]["delta_mean"] >= m  # over the matched baseline
    assert br["comparison"]["verdict"] == "idea better (significant)" and br["confirmation"]["significant"]
    assert (report["practical_verdict"], report["practical_detail"]) == verdict
    assert (gain - check["worse_by"] >= m) == (verdict[0] == "helps")


def test_a_worker_without_a_tracks_data_ends_the_job_track_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """cifar10's data lies outside the repository (IDEABENCH_CIFAR10_DIR). The API refuses a track
    its host cannot run, but a worker without the data took the job and ended it ``internal``
    ("a bug in ideabench... retry later"): now ``track_unavailable``, naming what is missing."""
    from bench.registry import load_track

    monkeypatch.setenv("IDEABENCH_CIFAR10_DIR", str(tmp_path))  # empty: no batch files
    executor = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}))
    request = scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job")
    with pytest.raises(BenchError) as caught:
        judge(request, executor=executor, track=load_track("cifar10"))
    assert caught.value.code is ErrorCode.TRACK_UNAVAILABLE, caught.value.message
    assert "data_batch_1" in caught.value.message and "Not your idea's fault" in (caught.value.hint or "")
    assert not executor.asked()


SWAPPER = "def build_model(spec, **hp):\n    raise AssertionError\n# a matched baseline that reads its role\n"


@dataclass
class LabelSwap(ScriptedExecutor):
    """A matched baseline that reads its role (``__name__``) and swaps its HPARAMS labels: in its
    check (as the idea) ``v`` is ["x", "y"] and x builds the sound model, in its job ["y", "x"]
    and y does. Both build [sound, weak] by index, so the graphs and tensors match; the check
    chooses "x", which names the weak model in the job. ``swap`` False: an honest file."""

    swap: bool = True

    def _declared(self) -> tuple[dict[str, list[str]], dict[str, str]]:
        if self.checking or not self.swap:
            return {"v": ["x", "y"]}, {"x": "sound", "y": "weak"}
        return {"v": ["y", "x"]}, {"y": "sound", "x": "weak"}

    def _model(self, arm: str, hp: dict[str, Any]) -> str:
        if self.files.get(arm) == SWAPPER:
            return self._declared()[1][hp["v"]]
        return "sound"  # the idea (a copy of the track's baseline) and the track's baseline

    def load(self, arm: str, command: Any) -> Any:
        reply = super().load(arm, command)
        return reply.model_copy(update={"hparams": self._declared()[0]}) if command.code == SWAPPER else reply

    def read_capture(self, arm: str, configs_asked: list[dict[str, Any]], n_seeds: int, dest: Path,
                     max_elements: int) -> ArmCapture:
        dest.mkdir(parents=True, exist_ok=True)
        models = [self._model(arm, hp) for hp in configs_asked]
        sha = lambda *parts: hashlib.sha256(repr(parts).encode()).hexdigest()  # noqa: E731
        seeds = self.builds[arm]
        return ArmCapture(arm=arm, configs=tuple(json.dumps(hp, sort_keys=True) for hp in configs_asked),
                          shapes=tuple((((2,), "float32"),) for _ in models), directory=dest,
                          graph_sha256=tuple(sha(m) for m in models), tensors_sha256=tuple(sha(m, seeds) for m in models),
                          seed_sha256=tuple(tuple(sha(m, s) for s in seeds) for m in models),
                          families=tuple(sha(m)[:16] for m in models))

    def train(self, arm: str, runs: list[dict[str, Any]], path: str, on_run: Any) -> None:
        for run in runs:
            x = read_npy((Path(run["data_dir"]) / f"x_{run['eval']}.npy").read_bytes())  # threads: no np.load (bench.npy)
            offset = {"sound": 0.5, "weak": 1.0}[self._model(arm, run["cfg"].get("hparams", {}))]
            offset += 0.2 * abs(math.log(run["cfg"]["lr"] / 0.03))
            with self.lock:
                self.trained.append(Asked(arm, run["cfg"], run["eval"], self.phase, 0, self.checking))
            pred = (x[:, :1] / 2 + offset).astype(np.float32)
            on_run(Trained(run_id=run["run_id"], predictions=pred, diverged=False, seconds=0.01, n_params=321, path=path,
                           read_rows=functools.partial(np.asarray, pred[run["rows"]]),
                           read_state=lambda shapes: [np.zeros(s, dtype=d) for s, d in shapes]))


@pytest.mark.parametrize("swap", [True, False])
def test_a_matched_baseline_that_renames_its_configs_by_role_is_refused(swap: bool) -> None:
    """Red team of the sweep skip (helper, session 23), a hole since the pin: the job trained the
    config its check chose by name, and only the builds were compared by index, so a matched
    baseline that swapped its HPARAMS labels by role passed its check with the sound model and
    trained the weak one under the same name; a copy of the track's baseline got worked / helps.
    Its configs must now be its check's, by name and in order (``check_same_build``)."""

    @dataclass
    class Swapping(Scripted):
        def __call__(self, request: Any, workdir: Path, deadline: float, cancel: Any) -> LabelSwap:
            executor = LabelSwap(self.script, checking=request.checking_matched, swap=swap)
            self.jobs.append(executor)
            return executor

    request = dataclasses.replace(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", baseline_code=SWAPPER),
                                  idea_code=MATCHED)
    if not swap:
        report = judge(request, executor=Swapping(lambda run: 0.0), track=TRACK).model_dump(mode="json")
        assert report["practical_verdict"] != "helps"  # an exact copy against the sound model
        return
    with pytest.raises(BenchError) as caught:
        judge(request, executor=Swapping(lambda run: 0.0), track=TRACK)
    assert caught.value.code == ErrorCode.INCONSISTENT_BUILD and "declared other configs" in caught.value.message


def test_a_matched_baseline_chosen_at_its_checks_grid_edge_gives_no_helps() -> None:
    """Red team of the sweep skip (helper, session 23): the edge rule and ``lr_matched`` read the
    job's grid for the matched baseline, which no run of it trained. Its check chose 0.005, the
    edge of the grid that check extended (its optimum may lie lower: an under-tuned baseline),
    but 0.005 was on no job grid, so a clear win was helps. The check's grid is its grid now: the
    idea's grid is extended below as the baseline's was, and the win is ``lr_confounded``."""

    def script(run: Asked) -> float:
        best = 0.005 if (run.arm == "idea") == run.checking else 0.03  # the matched baseline's best lr: 0.005
        at_best = 0.3 if run.arm == "idea" and not run.checking else 0.5  # the idea, in the job, is better
        return at_best + 0.2 * abs(math.log(run.cfg["lr"] / best))

    report, executor, _ = run(script, baseline_code=MATCHED)
    br = report["bench_report"]
    assert br["matched_baseline_check"]["chosen"]["lr"] == 0.005 and br["baseline"]["best_cfg"]["lr"] == 0.005
    assert br["baseline"]["union_lr_grid"][0] == 0.005
    assert 0.005 in {a.cfg["lr"] for a in executor.asked(checking=False, arm="idea", split="val")}  # extended as the baseline's
    assert br["comparison"]["delta_mean"] < 0 and br["comparison"]["p_value"] == 2 / 2 ** N  # a win on every seed
    assert (report["practical_verdict"], report["practical_detail"]) == ("inconclusive", "lr_confounded")


def test_a_matched_baselines_check_extends_both_edges_so_its_idea_may_extend_either() -> None:
    """Red teams of the budget change (helpers, session 24): a pinned matched baseline's budget is
    its check's, but the job extended the idea's grid at its edge alone (12 configs: 48 pairs
    against the baseline's 37); extended only where its check was, an honest idea left at its edge
    got harms. The check now sweeps both edge steps, whatever its arms' best, so the idea extends
    as the protocol says and the budgets stay equal."""
    grid = {"width": [8, 16, 32, 64]}
    literal = "HPARAMS = {'width': [8, 16, 32, 64]}\n" + scripted_request().idea_code

    def script(run: Asked) -> float:  # everyone best at 0.03, but the idea in the job, best at 0.2
        best = 0.2 if run.arm == "idea" and not run.checking else 0.03
        return 0.5 + 0.2 * abs(math.log(run.cfg["lr"] / best))

    executor = Scripted(script, {"hparams_by_file": {literal: grid}})
    events: list[Progress] = []
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", baseline_code=MATCHED,
                                    idea_code=literal), events.append, executor=executor,
                   track=TRACK).model_dump(mode="json")
    br = report["bench_report"]
    for arm in ("idea", "baseline"):  # both of the check's arms, though both were best inside
        swept = {a.cfg["lr"] for a in executor.asked(checking=True, arm=arm, split="val")}
        assert min(swept) < 0.01 and max(swept) > 0.1, arm
    assert br["matched_baseline_check"]["chosen"]["lr"] == 0.03
    assert br["idea"]["best_cfg"]["lr"] == 0.2  # extended above, as in a job against the track's baseline
    assert br["budget"]["configs"]["baseline"] >= br["budget"]["configs"]["idea"] == 4 * 4
    assert not any("tuning budget" in w for w in br["warnings"])
    assert (report["practical_verdict"], report["practical_detail"]) == ("inconclusive", "negligible")
    assert events[-1].done == events[-1].total == len(executor.asked())


def _rows_by_seed(split_seed: int, task_seed: int | None = None) -> Any:
    """The scripted track's splits, one training row fewer on odd split seeds."""
    from tests.bench.scripted import _splits

    splits = _splits(split_seed, task_seed)
    return dataclasses.replace(splits, x_train=splits.x_train[: 64 - split_seed % 2],
                               y_train=splits.y_train[: 64 - split_seed % 2]) if split_seed % 2 else splits


def test_a_track_whose_splits_change_size_from_seed_to_seed_is_refused() -> None:
    """Hardening (session 34): the compute count and the checks run on the first sweep seed's
    data, and count the row numbers a trainer runs there (``bench.cost.forward_sizes``); a track
    (a custom one, or a local track file: validation checks only the seeds it drew) whose splits
    change size with the seed would run forwards of row counts nothing counted. Every seed of a
    job must have the first one's row counts, or the track is refused."""
    # (another name: the process caches a track's splits by its name and seed)
    varying = dataclasses.replace(TRACK, card={**TRACK.card, "name": "scripted_varying"}, make_splits=_rows_by_seed)
    executor = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}))
    with pytest.raises(BenchError) as refused:
        judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job"), executor=executor, track=varying)
    assert refused.value.code == ErrorCode.INVALID_TRACK, refused.value.to_dict()
    assert "rows" in refused.value.message and refused.value.hint
    # the same track with one size for every seed is judged
    judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job"), executor=Scripted(
        by_lr({"baseline": 0.03, "idea": 0.03})), track=TRACK)
