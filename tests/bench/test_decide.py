"""The protocol's decisions as pure functions (bench.decide): each rule tested on numbers, with
no child process, so a rule costs milliseconds to test (issue 26)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from bench.decide import (
    MAX_DIVERGED_SHARE,
    ParityLimits,
    SweepRun,
    at_edge,
    best,
    compute_error,
    edge_steps,
    efficacy,
    efficacy_possible,
    lr_matched,
    matched_config,
    p_helps,
    parity_error,
    reaches,
    repeats_futile,
    seed_means,
    seed_value,
    stage_better,
    stage_comparisons,
    stage_p,
    sweep_table,
    too_many_diverged,
)
from bench.errors import ErrorCode
from bench.stats import VERDICT_BETTER, VERDICT_NONE, VERDICT_WORSE, Comparison, compare

nan = math.nan


def _cfg(lr: float, **hparams: Any) -> dict[str, Any]:
    return {"lr": lr, "epochs": 3, "batch_size": 32, "weight_decay": 0.0, "hparams": hparams}


def test_the_sweep_table_groups_runs_by_config_and_fills_diverged_runs() -> None:
    runs = [SweepRun(_cfg(0.1), 0.5, False), SweepRun(_cfg(0.01), 0.3, False),
            SweepRun(_cfg(0.1), nan, True), SweepRun(_cfg(0.01), 0.2, False)]
    table = sweep_table(runs, fill=9.0)
    assert [row.cfg["lr"] for row in table] == [0.01, 0.1]  # lr order, not run order
    assert table[0].per_seed == [0.3, 0.2] and table[0].mean == pytest.approx(0.25)
    assert table[1].per_seed == [0.5, 9.0] and table[1].diverged == 1
    assert table[1].report() == {"cfg": {"lr": 0.1, "epochs": 3, "batch_size": 32, "weight_decay": 0.0},
                                 "per_seed": [0.5, 9.0], "diverged": 1, "mean": pytest.approx(4.75)}
    assert best(table, lower_is_better=True) is table[0]
    assert best(table, lower_is_better=False) is table[1]
    assert table[0].config is runs[1].cfg  # the config the runs trained, hyperparameters nested


def test_a_hyperparameter_makes_its_own_row_and_ties_go_to_the_first() -> None:
    runs = [SweepRun(_cfg(0.1, width=8), 0.4, False), SweepRun(_cfg(0.1, width=16), 0.4, False)]
    table = sweep_table(runs, fill=1.0)
    assert [row.cfg["width"] for row in table] == [16, 8]  # str order within an lr
    assert best(table, lower_is_better=True).cfg["width"] == 16


def test_the_grid_is_extended_once_where_any_arm_is_at_an_edge() -> None:
    lrs = [0.01, 0.1, 1.0]
    grids = {"baseline": [0.01, 0.1, 1.0], "idea": [0.01, 0.1, 1.0]}
    assert edge_steps(lrs, {"baseline": 0.1, "idea": 0.1}, grids) == []
    assert edge_steps(lrs, {"baseline": 0.01, "idea": 0.1}, grids) == [("below", [0.005])]
    assert edge_steps(lrs, {"baseline": 0.1, "idea": 1.0}, grids) == [("above", [2.0])]
    assert edge_steps(lrs, {"baseline": 0.01, "idea": 1.0}, grids) == [("below", [0.005]), ("above", [2.0])]
    dense = {"baseline": [0.01, 0.02, 0.1, 1.0], "idea": [0.01, 0.1, 1.0]}  # the baseline's denser grid
    assert edge_steps(lrs, {"baseline": 0.02, "idea": 0.1}, dense) == []
    assert at_edge(0.01, lrs) and at_edge(1.0, lrs) and not at_edge(0.1, lrs)


def test_the_baseline_is_also_trained_at_the_ideas_lr_when_they_differ() -> None:
    base, idea = _cfg(0.01, depth=2), _cfg(0.1, width=4)
    assert matched_config(base, idea) == {**base, "lr": 0.1}  # the baseline's config, the idea's lr
    assert matched_config(base, _cfg(0.01)) is None
    assert matched_config(_cfg(1e-2), _cfg(0.01)) is None  # equal as numbers


def test_a_stage_wins_only_against_every_baseline_it_ran() -> None:
    """Intersection-union: the matched run (the baseline at the idea's lr) can take a win away,
    never give one; the stage's p is the larger."""
    base = [1.0, 1.1, 0.9, 1.2, 1.0, 1.05, 0.95, 1.15]
    idea = [b - 0.5 for b in base]
    values = {"baseline": base, "idea": idea}
    won = stage_comparisons(values, lower_is_better=True)
    assert len(won) == 1 and stage_better(won) and stage_p(won) == 1 / 2 ** 8
    values["matched"] = list(idea)  # the baseline at the idea's lr is as good as the idea
    both = stage_comparisons(values, lower_is_better=True)
    assert [c.verdict for c in both] == [VERDICT_BETTER, VERDICT_NONE]
    assert not stage_better(both) and stage_p(both) == 1.0
    assert stage_comparisons(values, lower_is_better=False)[0].verdict != VERDICT_BETTER  # direction


def _block(base: list[float], idea: list[float], matched: list[float] | None = None) -> list[Comparison]:
    """A stage's tests: against the baseline, and against it at the idea's lr when ``matched``."""
    return [compare(b, idea, lower_is_better=True) for b in (base, matched) if b is not None]


BASE = [1.0, 1.1, 0.9, 1.2, 1.0, 1.05, 0.95, 1.15]
BETTER = [b - 0.5 for b in BASE]


def test_a_win_over_a_baseline_at_its_grids_edge_or_only_over_its_tuning_is_lr_confounded() -> None:
    grid = [0.005, 0.01, 0.1, 1.0]
    clean = _block(BASE, BETTER)
    assert lr_matched(clean, 0.1, grid) is None  # the arms chose one lr: no confound
    assert lr_matched(_block(BASE, BETTER, matched=BASE), 0.1, grid) is True
    assert lr_matched(_block(BASE, BETTER, matched=BETTER), 0.1, grid) is False  # only the tuning
    # against a matched baseline (an agent's file, checked at its chosen lr only) the lrs must agree
    assert lr_matched(_block(BASE, BETTER, matched=BASE), 0.1, grid, pinned_baseline=True) is False
    assert lr_matched(clean, 0.1, grid, pinned_baseline=True) is None
    for edge in (0.005, 1.0):  # the baseline's optimum may lie outside its grid
        assert lr_matched(clean, edge, grid) is False
        assert lr_matched(_block(BASE, BETTER, matched=BASE), edge, grid) is False


def test_the_effect_must_reach_the_smallest_effect_in_every_stage_that_ran() -> None:
    screening, confirmation = compare(BASE, BETTER), compare(BASE, [b - 0.01 for b in BASE])
    assert reaches(0.4, True, screening, None)
    assert not reaches(0.6, True, screening, None)
    assert not reaches(0.4, True, screening, confirmation)  # the confirmation's gain is 0.01
    assert reaches(0.005, True, screening, confirmation)
    assert not reaches(0.4, False, screening, None)  # higher is better: the idea is worse


def test_p_helps_is_the_larger_of_both_stages() -> None:
    screening = _block(BASE, BETTER, matched=[b + (0.05 if k % 2 else -0.05) for k, b in enumerate(BETTER)])
    assert p_helps(screening, None) == stage_p(screening) == screening[1].p_better > screening[0].p_better
    assert p_helps(screening, 0.9) == 0.9 and p_helps(screening, 0.3) == stage_p(screening)
    assert p_helps(_block(BASE, BETTER), 1e-9) == 1 / 2 ** 8


def test_a_seeds_repeat_runs_are_averaged_into_one_pair_value() -> None:
    values = [0.3, 0.1, 0.5, 0.7]
    assert seed_means([4, 9, 2, 7], values) == values  # one run a seed: the values as they are, bit for bit
    assert seed_means([4, 4, 2, 2, 9, 9], [0.1, 0.3, 1.0, 2.0, 0.5, 0.5]) == pytest.approx([0.2, 1.5, 0.5])
    assert seed_means([4, 2, 4, 2], [0.1, 1.0, 0.3, 2.0]) == pytest.approx([0.2, 1.5])  # in the seeds' first order


def test_a_trimmed_seed_value_drops_an_eighth_of_its_runs_at_each_end() -> None:
    """vision@6 (``defaults.seed_value: trimmed``): of 16 runs the two lowest and two highest are
    dropped (a run that lands far off moves no seed's value); under eight runs nothing is, so
    every other track's value is its mean, bit for bit; swapping the arms negates the pair."""
    runs = [0.5] * 12 + [0.1, 0.2, 9.0, 1e6]  # one run far off and one diverged (filled)
    assert seed_value(runs, "trimmed") == 0.5 and seed_value(runs, "mean") > 6e4
    assert seed_value([0.3, 0.1, 7.0], "trimmed") == seed_value([0.3, 0.1, 7.0], "mean")
    assert seed_value(list(range(8)), "trimmed") == pytest.approx(3.5)  # 1..6 kept
    idea, base = [float(v) for v in range(16)], [2.0 * v for v in range(16)]
    assert seed_value(idea, "trimmed") - seed_value(base, "trimmed") == -(seed_value(base, "trimmed") - seed_value(idea, "trimmed"))
    assert seed_means([1, 1, 2, 2, 1, 2, 1, 1, 1, 1, 1, 1], [0.0, 0.0, 1.0, 1.0, 0.0, 1.0] + [0.0] * 5 + [100.0],
                      "trimmed") == [0.0, 1.0]


def test_a_look_stops_for_efficacy_only_where_its_most_extreme_pattern_decides_it() -> None:
    """The screening (one-sided alpha / 2) from six pairs; a confirmation's first look (its share,
    0.2 alpha) from seven: at six, p = 1/64 would not decide it, and a second look would pool
    single runs where other patterns pool means (review); its second look (0.8 alpha, pooled)
    from five; never above the exact test's 16 pairs (Monte Carlo p cannot reach 1 / 2^n)."""
    from bench.stats import ALPHA, CONFIRMATION_SHARES

    screening, first_look, second_look = ALPHA / 2, CONFIRMATION_SHARES[0] * ALPHA, CONFIRMATION_SHARES[1] * ALPHA
    assert [efficacy_possible(n, screening) for n in (5, 6)] == [False, True]
    assert [efficacy_possible(n, first_look) for n in (6, 7)] == [False, True]
    assert [efficacy_possible(n, second_look) for n in (4, 5)] == [False, True]
    assert efficacy_possible(16, screening) and not efficacy_possible(17, screening)
    wins = [compare([0.5] * 8, [0.4] * 7 + [0.45]), compare([0.5] * 8, [0.4] * 8)]
    assert efficacy(wins) and not efficacy([*wins, compare([0.5] * 8, [0.4] * 7 + [0.55])])


def test_more_than_a_quarter_diverged_decides_nothing() -> None:
    assert MAX_DIVERGED_SHARE == 0.25
    assert not too_many_diverged(2, 8) and too_many_diverged(3, 8) and not too_many_diverged(0, 1)


def test_parity_refuses_each_count_beyond_its_limit_with_its_own_message() -> None:
    limits = ParityLimits(base_params=100, ratio=1.1, buffer_cap=32, tensor_cap=64)
    assert parity_error(limits, {}, 110, 32, 64) is None
    for counts, words in (((111, 0, 1), "111 parameters"), ((10, 33, 1), "33 words"),
                          ((10, 0, 65), "65 parameter tensors")):
        error = parity_error(limits, {"width": 8}, *counts)
        assert error is not None and error.code == ErrorCode.PARAMETER_PARITY
        assert words in error.message and "(config {'width': 8})" in error.message
    assert compute_error({}, 400.0, 100.0, 4.0) is None
    error = compute_error({}, 401.0, 100.0, 4.0)
    assert error is not None and error.code == ErrorCode.COMPUTE_PARITY and "401 forward FLOPs" in error.message


def test_a_stage_with_repeats_reports_harms_at_the_one_run_level_on_every_orbit() -> None:
    """Exactness of ``harms`` (a stage with repeat runs, docs/statistics.md): under the null the
    sign flips act on each seed's first run and mean together. A stage whose first runs show the
    idea no better stops there and tests them (``harms`` if significantly worse); one whose first
    runs all favour it stops for efficacy; else it tests the means. Leaving ``harms`` to the first
    runs keeps it at the level's 6 of 256 patterns (the first runs' own worse side) on every orbit;
    letting the means report it too goes past that on some (the means add at most their own 6)."""
    rng = np.random.default_rng(11)
    n = 8
    signs = np.array([[1.0 if (k >> j) & 1 else -1.0 for j in range(n)] for k in range(2**n)])
    worst = {True: 0, False: 0}
    for _ in range(12):
        first = rng.normal(size=n)
        means = first / 3 + rng.normal(size=n) * 0.8  # a seed's mean holds its first run
        harms = {True: 0, False: 0}
        for s in signs:
            f, m = s * first, s * means  # idea - baseline, lower is better
            base = {"baseline": [0.0] * n}
            looked = stage_comparisons({**base, "idea": list(f)}, lower_is_better=True)
            if repeats_futile(looked, lower_is_better=True):
                for rule in harms:
                    harms[rule] += looked[0].verdict == VERDICT_WORSE
                continue
            if efficacy(looked):
                continue
            for rule in harms:
                tests = stage_comparisons({**base, "idea": list(m)}, True, {**base, "idea": list(f)}, repeated=rule)
                harms[rule] += tests[0].verdict == VERDICT_WORSE
        assert harms[True] == 6, harms  # exactly the one-run test's worse side, never more, never none
        for rule in harms:
            worst[rule] = max(worst[rule], harms[rule])
    assert 6 < worst[False] <= 12, worst


def test_a_stage_whose_means_are_worse_after_favourable_first_runs_says_why_it_is_not_harms() -> None:
    """The means of a stage with repeats come out significantly worse: the verdict is none, the
    two-sided p stays, and the report's summary says why (no words contradict the decision)."""
    from bench.assemble import summary_text

    first = {"baseline": [0.0] * 8, "idea": [-0.1] * 7 + [0.2]}  # first runs: the idea better on average
    means = {"baseline": [0.0] * 8, "idea": [0.3] * 8}  # its means: worse on every seed
    (plain,) = stage_comparisons(means, lower_is_better=True, first=first)
    (judged,) = stage_comparisons(means, lower_is_better=True, first=first, repeated=True)
    assert plain.verdict == VERDICT_WORSE and judged.verdict == VERDICT_NONE
    assert judged.p_value == plain.p_value and not judged.system_worked
    verdicts = {"practical_verdict": "inconclusive", "practical_detail": "inconclusive", "system_verdict": "failed"}
    text = summary_text("smoke@1", "mse", judged, verdicts, None, {"baseline": 10, "idea": 10})
    assert "harms is judged on each seed's first run" in text
    # the two-sided figures are named descriptive: the verdicts rest on the one-sided tests (issue 27.7)
    assert f"p={judged.p_value:.4g} (two-sided, descriptive)" in text and f"{judged.verdict} (two-sided)" in text
    assert "first run" not in summary_text("smoke@1", "mse", plain, verdicts, None, {"baseline": 10, "idea": 10})


def test_the_dearest_forward_is_held_to_the_ratio_per_example_of_at_least_a_batch() -> None:
    """``compute_error``'s second rule: a forward's cost past ``FIXED_FREE``, over its rows but at
    least a training batch, against the ratio times the baseline's per example (or the
    baseline's own dearest forward, whichever is larger)."""
    from bench.decide import FIXED_FREE, compute_error, dearest_forward, dearest_per_example

    assert dearest_per_example(1, FIXED_FREE + 6400.0, 64) == 100.0  # one row costs what a batch may
    assert dearest_per_example(1024, FIXED_FREE + 6400.0, 64) == 6.25
    assert dearest_per_example(2, 100.0, 64) == 0.0  # within the free allowance
    assert dearest_forward([1, 2, 64], [FIXED_FREE, FIXED_FREE + 2**40, FIXED_FREE + 64.0], 64)[0] == 2
    assert compute_error({}, 10.0, 10.0, 4.0, (64, FIXED_FREE + 64 * 40.0), 64) is None
    refused = compute_error({}, 10.0, 10.0, 4.0, (2, FIXED_FREE + 2**40), 64)
    assert refused is not None and refused.code is ErrorCode.COMPUTE_PARITY and "on 2 rows" in refused.message
    # the baseline's own dearest forward raises the reference: a copy of it passes
    assert compute_error({}, 10.0, 10.0, 4.0, (64, FIXED_FREE + 64 * 100.0), 64, base_dearest=100.0) is None


# -- the check's counts against their limits (Job.check_counts) ---------------------------------
def _counted(n_params: list[int], flops: list[float], *, n_buffers: int = 10, n_tensors: int = 4,
             forwards: list[list[tuple[int, float]]] | None = None) -> Any:
    from bench.decide import Counted

    n = len(n_params)
    return Counted(n_params=tuple(n_params), n_buffers=(n_buffers,) * n, n_tensors=(n_tensors,) * n,
                   flops=tuple(flops), forwards=tuple(tuple(f) for f in (forwards or [[(64, 64 * c)] for c in flops])))


def _limits(baseline: Any, reference: Any = None, buffer_cap: int | None = None) -> Any:
    from bench.decide import count_limits

    return count_limits(baseline, reference=reference, parity_ratio=1.1, buffer_cap=buffer_cap, compute_ratio=4.0,
                        batch_size=64, buffer_room=32)


def test_count_limits_are_the_baselines_largest_config_and_at_least_two_flops_a_parameter() -> None:
    from bench.decide import FIXED_FREE, MIN_MAX_TENSORS

    baseline = _counted([100, 300], [50.0, 700.0], n_tensors=30, forwards=[[(64, FIXED_FREE + 64 * 900.0)],
                                                                           [(8, 10.0)]])
    limits = _limits(baseline)
    assert (limits.parity.base_params, limits.parity.ratio, limits.parity.buffer_cap) == (300, 1.1, 10 + 32)
    assert limits.parity.tensor_cap == max(MIN_MAX_TENSORS, 4 * 30) == 120
    assert (limits.base_flops, limits.compute_ratio, limits.base_dearest) == (700.0, 4.0, 900.0)
    assert _limits(baseline, buffer_cap=500).parity.buffer_cap == 500  # the track's own cap wins
    cheap = _counted([1000], [5.0])  # a baseline of cheap ops: a dense layer's two FLOPs a parameter
    assert _limits(cheap).base_flops == 2000.0


def test_a_matched_baseline_cannot_raise_the_limits_it_is_held_to() -> None:
    """Against a matched baseline the idea is held to the track's canonical baseline's counts
    (``Reference``): a matched baseline padded with parameters and made dear (an agent's own
    file) leaves the idea's allowance where the canonical baseline puts it."""
    from bench.decide import Reference, counts_error

    padded = _counted([10_000], [1e6], n_buffers=5_000, n_tensors=64)
    limits = _limits(padded, Reference(n_params=300, n_buffers=10, flops=700.0, n_tensors=20, dearest=900.0))
    # the canonical baseline's dearest forward, from its check (helper-60: it was 0, which refused an
    # honest idea's batch-sized forward a job against the track's baseline accepts), not the padded one's
    assert (limits.parity.base_params, limits.parity.buffer_cap, limits.base_flops, limits.base_dearest) == (
        300, 42, 700.0, 900.0)
    assert limits.parity.tensor_cap == 80  # four times the canonical baseline's 20, not the padded 64's 256
    big = counts_error(limits, [{}], _counted([331], [100.0]), padded)
    assert big is not None and big.code == ErrorCode.PARAMETER_PARITY
    dear = counts_error(limits, [{}], _counted([300], [2801.0]), padded)
    assert dear is not None and dear.code == ErrorCode.COMPUTE_PARITY
    assert counts_error(limits, [{}], _counted([330], [2800.0]), padded) is None
    # a forward dearer per example than 4 x the canonical's cost, within 4 x its dearest forward: judged,
    # as in a job against the track's baseline; held to the cost alone where the check knew no dearest
    from bench.decide import FIXED_FREE

    batchy = _counted([300], [700.0], forwards=[[(64, FIXED_FREE + 64 * 3000.0)]])
    assert counts_error(limits, [{}], batchy, padded) is None
    unknown = _limits(padded, Reference(n_params=300, n_buffers=10, flops=700.0, n_tensors=20))
    assert unknown.base_dearest == 0.0 and counts_error(unknown, [{}], batchy, padded).code == ErrorCode.COMPUTE_PARITY


def test_counts_error_names_the_first_config_over_and_parity_before_compute() -> None:
    from bench.decide import counts_error

    baseline = _counted([300], [700.0])
    limits = _limits(baseline)
    grid = [{"width": 8}, {"width": 16}, {"width": 32}]
    assert counts_error(limits, grid, _counted([300, 330, 300], [700.0, 2800.0, 100.0]), baseline) is None
    dear = counts_error(limits, grid, _counted([300, 300, 300], [700.0, 2801.0, 100.0]), baseline)
    assert dear is not None and dear.code == ErrorCode.COMPUTE_PARITY and "'width': 16" in dear.message
    # the third config breaks parity, the second compute: parity is checked over every config first
    both = counts_error(limits, grid, _counted([300, 300, 331], [700.0, 2801.0, 100.0]), baseline)
    assert both is not None and both.code == ErrorCode.PARAMETER_PARITY and "'width': 32" in both.message
    tensors = counts_error(limits, grid[:1], _counted([300], [1.0], n_tensors=65), baseline)
    assert tensors is not None and tensors.code == ErrorCode.PARAMETER_PARITY and "65 parameter tensors" in tensors.message
    buffers = counts_error(limits, grid[:1], _counted([300], [1.0], n_buffers=43), baseline)
    assert buffers is not None and buffers.code == ErrorCode.PARAMETER_PARITY and "43 words" in buffers.message


def test_a_forward_dear_past_its_rows_is_refused_and_a_count_not_finite_is_the_benchs_error() -> None:
    from bench.decide import FIXED_FREE, counts_error

    baseline = _counted([300], [700.0])
    limits = _limits(baseline)
    # cheap per example over a batch, but one forward of 2 rows spends what 64 may (FIXED_FREE aside)
    lumpy = _counted([300], [100.0], forwards=[[(64, 64 * 100.0), (2, FIXED_FREE + 64 * 4 * 700.0 + 1)]])
    error = counts_error(limits, [{}], lumpy, baseline)
    assert error is not None and error.code == ErrorCode.COMPUTE_PARITY and "on 2 rows" in error.message
    for bad in (math.inf, math.nan, -1.0):
        error = counts_error(limits, [{}], _counted([300], [bad]), baseline)
        assert error is not None and error.code == ErrorCode.INTERNAL
        error = counts_error(limits, [{}], _counted([300], [1.0]), _counted([300], [700.0], forwards=[[(64, bad)]]))
        assert error is not None and error.code == ErrorCode.INTERNAL


# -- builds (Job.check_configs_differ, check_same_build, check_tuned_for) ------------------------
def test_two_configs_that_build_one_model_name_the_key_that_changed_nothing() -> None:
    from bench.decide import duplicate_config_error

    grid = [{"width": 8, "unread": 1}, {"width": 8, "unread": 2}, {"width": 16, "unread": 1}]
    error = duplicate_config_error("idea", grid, ["g1", "g1", "g2"], [("s1", "s2"), ("s1", "s2"), ("s3", "s4")])
    assert error is not None and error.code == ErrorCode.HPARAM_NO_EFFECT
    assert "number 1 and 2" in error.message and "'unread'" in error.message and "'width'" not in error.message
    assert error.hint  # the code's own hint: remove the key or read it
    # one graph, other tensors at one init seed: another model (an init scale); another graph: another model
    assert duplicate_config_error("idea", grid, ["g1", "g1", "g1"], [("s1", "s2"), ("s1", "s9"), ("s3", "s4")]) is None
    assert duplicate_config_error("idea", grid, ["g1", "g2", "g3"], [("s1", "s2")] * 3) is None


def test_a_matched_baseline_builds_in_its_job_what_its_check_built_configs_by_name_too() -> None:
    from bench.decide import same_build_error

    found = {"graph_sha256": ["g1", "g2"], "tensors_sha256": ["t1", "t2"], "configs": ['{"w": 1}', '{"w": 2}']}
    assert same_build_error(found, ("g1", "g2"), ("t1", "t2"), ('{"w": 1}', '{"w": 2}')) is None
    assert same_build_error(None, ("g9",), ("t9",), ("{}",)) is None  # no check ran (a job without one)
    for graphs, tensors, configs in [(("g1", "g3"), ("t1", "t2"), ('{"w": 1}', '{"w": 2}')),  # another graph
                                     (("g1", "g2"), ("t1", "t3"), ('{"w": 1}', '{"w": 2}')),  # other weights
                                     (("g1", "g2"), ("t1", "t2"), ('{"w": 2}', '{"w": 1}'))]:  # labels swapped
        error = same_build_error(found, graphs, tensors, configs)
        assert error is not None and error.code == ErrorCode.INCONSISTENT_BUILD


def test_an_idea_with_more_configs_than_its_matched_baseline_was_tuned_for_is_refused() -> None:
    from bench.decide import tuned_for_error

    assert tuned_for_error(3, 3) is None and tuned_for_error(1, 1) is None
    error = tuned_for_error(4, 3)
    assert error is not None and error.code == ErrorCode.INVALID_HPARAMS and "give 4 configurations, but 3" in error.message


def test_a_pinned_matched_baseline_guards_the_lr_confound_only_where_its_check_saw_it_level() -> None:
    from bench.decide import unchecked_at

    def row(lr: float, mean: float, **hparams: Any) -> dict[str, Any]:
        return {"cfg": {"lr": lr, "epochs": 4, "batch_size": 64, "weight_decay": 0.0, **hparams}, "mean": mean}

    check = {"chosen": {"lr": 0.01, "hparams": {"k": 2}},
             "sweep": [row(0.01, 0.50, k=2), row(0.03, 0.515, k=2), row(0.03, 0.40, k=1), row(0.1, 0.61, k=2)],
             "canonical_sweep": [row(0.01, 0.50), row(0.03, 0.515), row(0.1, 0.60)]}
    assert unchecked_at(0.03, check, lower_is_better=True) is False  # level with the track's there
    assert unchecked_at(0.1, check, lower_is_better=True) is True  # worse there at all: no guard
    assert unchecked_at(0.3, check, lower_is_better=True) is True  # no row at the idea's lr
    assert unchecked_at(0.1, check, lower_is_better=False) is False  # higher is better: it is better
    assert unchecked_at(0.03, {**check, "canonical_sweep": [row(0.03, math.nan)]}, True) is True
    assert unchecked_at(0.03, {k: v for k, v in check.items() if k != "chosen"}, True) is False  # swept in job
    assert unchecked_at(0.03, None, True) is False
    # the chosen config by type: a row of k=True does not vouch for k=1 (nor 1.0)
    typed = {**check, "chosen": {"lr": 0.01, "hparams": {"k": 1}}, "sweep": [row(0.03, 0.40, k=True)]}
    assert unchecked_at(0.03, typed, True) is True
