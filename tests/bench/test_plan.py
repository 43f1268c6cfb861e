"""The run plan, counted in one place (bench.plan, issue 26): what the engine, the API's
estimate and a custom track's validation say a job runs."""

from __future__ import annotations

import pytest

from bench.catalog import get_card, list_cards, planned_runs
from bench.decide import dense_size, densify
from bench.plan import budget_factor, plan, plan_for_card
from bench.stats import CONFIRMATION_LOOKS


def test_a_job_of_one_config_per_arm() -> None:
    runs = plan(n_lrs=5, sweep_seeds=2, n_seeds=8)
    assert (runs.sweep, runs.screening, runs.planned) == (2 * 5 * 2, 16, 36)
    assert runs.edges_max == 2 * 2 * 2 and runs.matched_max == 8
    assert runs.confirmation_max == 3 * CONFIRMATION_LOOKS * 8
    assert runs.at_most == 36 + 8 + 8 + 48


def test_repeats_are_runs_a_job_may_add_in_its_test_stages() -> None:
    """Every job makes each test seed's first runs; the repeats only where those are not futile."""
    one, three = plan(n_lrs=5, sweep_seeds=2, n_seeds=8), plan(n_lrs=5, sweep_seeds=2, n_seeds=8, repeats=3)
    assert (three.sweep, three.edges_max, three.screening, three.matched_max, three.planned) == (
        one.sweep, one.edges_max, one.screening, one.matched_max, one.planned)
    assert one.repeats_max == 0 and three.repeats_max == 2 * (one.screening + one.matched_max)
    assert three.confirmation_max == 3 * one.confirmation_max
    assert three.at_most == one.at_most + three.repeats_max + 2 * one.confirmation_max


def test_equal_budgets_when_the_idea_has_more_configs() -> None:
    """The baseline sweeps at least budget_factor times as many learning rates (densify): 4 idea
    configs over 5 lrs against 1 baseline config over 5 + 4 x 4 = 21 lrs, the grid's own among them."""
    assert budget_factor(4, 1) == 4 and budget_factor(3, 2) == 2 and budget_factor(1, 3) == 1
    runs = plan(n_lrs=5, sweep_seeds=2, n_seeds=8, idea_configs=4)
    assert runs.sweep == 5 * 4 * 2 + len(densify([1e-3, 1e-2, 1e-1, 0.3, 1.0], 4, "grid")) * 2 == 5 * 4 * 2 + 21 * 2
    assert runs.edges_max == 2 * 4 * 2 + 2 * len(densify([0.5], 4, "below")) * 2
    single = plan(n_lrs=1, sweep_seeds=1, n_seeds=2, idea_configs=3)  # one lr: nothing to densify
    assert single.sweep == 3 + len(densify([0.01], 3, "grid"))


def test_every_card_is_counted_alike_by_the_catalog_and_the_plan() -> None:
    for card in list_cards():
        d = card["defaults"]
        runs = plan_for_card(card)
        assert planned_runs(card) == runs.planned
        assert runs.sweep == 2 * len(d["lr_grid"]) * d["sweep_seeds"]
        assert runs.screening == 2 * d["n_seeds"]
    assert plan_for_card(get_card("smoke"), n_seeds=4).screening == 8
    smoke = get_card("smoke")["defaults"]
    n, seeds = len(smoke["lr_grid"]), smoke["sweep_seeds"]
    assert plan_for_card(get_card("smoke"), idea_configs=2).sweep == (2 * n + dense_size(n, 2)) * seeds


def test_time_left_counts_seconds_per_run_from_the_start_of_training() -> None:
    """The children's start and the capture (here 60 s) come once per job: the time left is
    the runs left times the seconds per run since training began, not since the job began."""
    from bench.protocol import Progress, _Tracker

    now = [100.0]
    seen: list[Progress] = []
    tracker = _Tracker(seen.append, total=0, clock=lambda: now[0])
    tracker.add_total(40)
    now[0] += 60.0  # children and capture
    tracker.emit("capturing")
    assert seen[-1].eta_s is None  # no run yet: no estimate
    tracker.start_training()
    for _ in range(10):
        now[0] += 2.0
        tracker.run_finished({"arm": "idea"})
    assert seen[-1].done == 10 and seen[-1].eta_s == pytest.approx(30 * 2.0)  # not (80 / 10) * 30
    tracker.start_training()  # a second call moves nothing
    tracker.add_total(8)  # a confirmation's runs join the count when it starts
    tracker.emit()
    assert seen[-1].eta_s == pytest.approx(38 * 2.0)


def test_before_the_first_run_ends_the_time_left_comes_from_the_cards_timing() -> None:
    """Issue 27.2: a job capturing (or stuck there) showed eta_s null until its first run ended.
    With the card's measured timing the estimate is what is left of the part before training
    plus the runs at the card's rate; the job's own rate replaces it from the first run on."""
    from bench.protocol import Progress, _Tracker

    now = [0.0]
    seen: list[Progress] = []
    tracker = _Tracker(seen.append, total=0, clock=lambda: now[0], prior=(20.0, 0.5))
    tracker.emit("starting the children")
    assert seen[-1].eta_s is None  # the run plan is not known yet
    tracker.add_total(40)
    now[0] += 5.0
    tracker.emit("capturing")
    assert seen[-1].eta_s == pytest.approx(15.0 + 40 * 0.5)
    now[0] += 30.0  # a capture slower than the card's: never a negative part
    tracker.emit("capturing")
    assert seen[-1].eta_s == pytest.approx(40 * 0.5)
    tracker.start_training()
    now[0] += 2.0
    tracker.run_finished({"arm": "idea"})
    assert seen[-1].eta_s == pytest.approx(39 * 2.0)  # measured from here on


def test_the_most_runs_left_counts_what_the_protocol_has_not_decided() -> None:
    """Issue 27.2: a job's progress says the most runs it may make (the edges, the matched
    baseline and a confirmation of up to two looks while undecided) and the time left then;
    each decision takes its part out, and the bound never grows."""
    from bench.protocol import Progress, _Tracker

    now = [0.0]
    seen: list[Progress] = []
    tracker = _Tracker(seen.append, total=0, clock=lambda: now[0])
    runs = plan(n_lrs=3, sweep_seeds=2, n_seeds=8)
    tracker.add_total(runs.planned)
    for part, most in (("edges", runs.edges_max), ("matched", runs.matched_max),
                       ("confirmation", runs.confirmation_max)):
        tracker.expect(part, most)
    tracker.start_training()
    for _ in range(4):
        now[0] += 1.5
        tracker.run_finished({"arm": "idea"})
    assert seen[-1].at_most == runs.at_most and seen[-1].total == runs.planned
    assert seen[-1].eta_max_s == pytest.approx((runs.at_most - 4) * 1.5)
    tracker.expect("edges", 0)  # the sweep's best lrs: one edge, for one arm, over both sweep seeds
    tracker.add_total(2)
    tracker.expect("matched", 0)  # the arms' lrs agree: no matched runs
    tracker.emit()
    bounds = [seen[-1].at_most]
    tracker.expect("confirmation", 2 * CONFIRMATION_LOOKS * 8)  # a win: two arms per fresh seed, two looks
    tracker.add_total(2 * 8, "confirmation")  # the first look starts
    tracker.emit()
    bounds.append(seen[-1].at_most)
    tracker.expect("confirmation", 0)  # the first look decided: no second
    tracker.emit()
    bounds.append(seen[-1].at_most)
    assert bounds == sorted(bounds, reverse=True) and bounds[0] <= runs.at_most
    assert seen[-1].at_most == seen[-1].total == runs.planned + 2 + 16
    assert seen[-1].eta_max_s == seen[-1].eta_s


def test_runs_done_never_go_back_when_both_arms_report_at_once() -> None:
    """Both arms' threads end runs and emit: a count one thread read before the other's run ended
    reached the callback after it, so MCP's progress went 7, 6 (seen in a real job's stream)."""
    import threading
    import time as time_mod

    from bench.protocol import Progress, _Tracker

    seen: list[int] = []

    def slow(progress: Progress) -> None:
        time_mod.sleep(0.0001)  # a database write: the other thread runs meanwhile
        seen.append(progress.done)

    tracker = _Tracker(slow, total=400)
    threads = [threading.Thread(target=lambda: [tracker.run_finished({"arm": "x"}) for _ in range(200)])
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 400 and seen == sorted(seen) and seen[-1] == 400


@pytest.mark.parametrize("n_lrs", [2, 3, 5, 6])
def test_every_arm_sweeps_at_least_the_pairs_of_the_arm_it_is_matched_to(n_lrs: int) -> None:
    """Budgets by (config, lr) pairs, not by configs: the denser grid keeps the track's lrs and so
    has more than ``factor * n`` points (``dense_size``). A matched baseline of M configs checked for
    an idea of T sweeps at least the idea's pairs, and the track's baseline beside it in its check
    at least the matched one's (by config counts alone it got 13 pairs against 14), edge steps
    counted (without them a matched baseline of 2 configs got 34 against 35),
    and neither factor is larger than the count ratio asks."""
    def pairs(configs: int, factor: int) -> int:  # the grid and both edge steps, densified alike
        return configs * (dense_size(n_lrs, factor) + 2 * factor)

    for matched in range(1, 13):
        for idea in range(1, 13):
            f_matched = budget_factor(idea, matched, n_lrs)
            assert pairs(matched, f_matched) >= pairs(idea, 1) and matched * dense_size(n_lrs, f_matched) >= idea * n_lrs
            assert f_matched <= budget_factor(idea, matched)
            f_track = budget_factor(matched, 1, n_lrs, f_matched)
            assert pairs(1, f_track) >= pairs(matched, f_matched)
            assert f_track == 1 or pairs(1, f_track - 1) < pairs(matched, f_matched)
            # a track's own baseline (one config) against an idea: as many lrs as before the edges counted
            assert budget_factor(idea, 1, n_lrs) == budget_factor(idea, 1) or n_lrs < 2
    check = plan(n_lrs, 2, 8, idea_configs=2, baseline_configs=1, idea_factor=budget_factor(4, 2, n_lrs))
    assert check.sweep == (2 * dense_size(n_lrs, budget_factor(4, 2, n_lrs))
                           + dense_size(n_lrs, budget_factor(2, 1, n_lrs, budget_factor(4, 2, n_lrs)))) * 2
