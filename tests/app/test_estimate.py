"""Estimates per track (issue 27.2): the track's own recent jobs, else its card's measured
timing, never one global default where either exists; the confirmation counted as "up to"."""

from __future__ import annotations

import datetime as dt
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from app.db import utcnow
from app.jobs.estimate import MIN_HISTORY, Timing, history_timing, timing_of
from app.jobs.models import JobStatus
from bench.catalog import get_card
from bench.plan import plan_for_card
from tests.app.factories import insert_job, key_id
from tests.conftest import bearer

TRACKS = Path(__file__).resolve().parents[2] / "tracks"
IDEA = (TRACKS / "smoke" / "example_idea.py").read_text()


@pytest.mark.parametrize("timing", [None, {}, {"fixed_s": 1.0}, {"fixed_s": "3", "run_s": 1.0},
                                    {"fixed_s": -1.0, "run_s": 1.0}, {"fixed_s": 1.0, "run_s": float("nan")},
                                    {"fixed_s": True, "run_s": 1.0}, [1, 2]])
def test_a_card_without_a_usable_timing_falls_back_to_the_default(timing: Any) -> None:
    assert timing_of({"timing": timing}, 0.7) == Timing(0.0, 0.7, "default")


def test_a_cards_timing_and_the_history_median() -> None:
    measured = timing_of({"timing": {"fixed_s": 10, "run_s": 0.5, "measured": "..."}}, 0.7)
    assert measured == Timing(10.0, 0.5, "card") and measured.seconds(40) == 30.0
    jobs = [(30.0, 40), (50.0, 40), (1000.0, 40)]  # one job held up by a busy machine
    assert history_timing(jobs[:MIN_HISTORY - 1], 10.0) is None  # too few to trust
    assert history_timing(jobs, 10.0) == (10.0, 1.0)  # the median of 0.5, 1.0, 24.75: not the mean
    assert history_timing([(5.0, 40), (5.0, 40), (5.0, 40)], 10.0) == (10.0, 0.0)
    assert history_timing([(5.0, None), (5.0, 0), (9.0, 3)], 0.0) is None  # no runs: unusable


def test_the_history_learns_the_fixed_part_where_run_counts_differ() -> None:
    """Issue 27.2: a deployment whose children start slower than the reference machine's (the
    card's ``fixed_s``) was estimated with the card's start; jobs of different sizes tell both
    parts apart, and one job held up by a busy machine moves neither."""
    jobs = [(20.0 + 0.5 * runs, runs) for runs in (16, 32, 48, 64, 112)] + [(900.0, 40)]
    assert history_timing(jobs, 5.0) == (20.0, 0.5)
    assert Timing(*history_timing(jobs, 5.0), "history").seconds(100) == 70.0
    same = [(20.0 + 0.5 * 40, 40)] * 4  # one size only: the card's fixed part stands
    assert history_timing(same, 5.0) == (5.0, 35.0 / 40)
    # a fit that says a job costs nothing before its runs is not believed
    assert history_timing([(1.0, 10), (30.0, 20), (60.0, 30)], 5.0) == (5.0, statistics.median([0.0, 1.25, 55 / 30]))


def test_every_builtin_card_carries_its_measured_timing() -> None:
    """cifar10's data is not on the reference machine: its estimate is the default until its
    jobs make a history."""
    for card_path in sorted(TRACKS.glob("*/card.json")):
        card = json.loads(card_path.read_text())
        if card["name"] == "cifar10":
            assert "timing" not in card
            continue
        timing = timing_of(card, 0.0)
        assert timing.basis == "card" and timing.run_s > 0, card_path.parent.name
        assert "track_timing.py" in card["timing"]["measured"]


def test_a_submission_is_estimated_from_the_card_then_from_the_tracks_history(app: Any, client: Any,
                                                                            keys: dict[str, str]) -> None:
    card = json.loads((TRACKS / "smoke" / "card.json").read_text())["timing"]

    def estimate() -> dict[str, Any]:
        app.state.estimator._runtime.clear()  # a minute's cache in production
        answer = client.post("/v1/ideas", json={"track": "smoke", "code": IDEA}, headers=bearer(keys["agent"]))
        assert answer.status_code == 202, answer.text
        return answer.json()["estimate"]

    first = estimate()
    runs, confirmation = first["runs_total"], first["confirmation_runs"]
    assert first["basis"] == "card" and first["fixed_s"] == round(card["fixed_s"], 1)
    assert first["seconds_per_run"] == round(card["run_s"], 3)
    assert first["run_s"] == pytest.approx(card["fixed_s"] + runs * card["run_s"], abs=0.1)
    # at most: every part that only the results call for (bench.plan), a confirmation among them
    plan = plan_for_card(get_card("smoke"))
    assert (runs, confirmation, first["runs_at_most"]) == (plan.planned, plan.confirmation_max, plan.at_most)
    assert first["runs_at_most"] > runs + confirmation  # edge steps and the baseline at the idea's lr too
    assert first["run_s_max"] == pytest.approx(card["fixed_s"] + first["runs_at_most"] * card["run_s"], abs=0.1)
    assert first["run_s_max"] > first["run_s"]

    now = utcnow()
    with app.state.sessionmaker() as session:
        for seconds in (card["fixed_s"] + 40 * 2.0, card["fixed_s"] + 40 * 3.0, card["fixed_s"] + 40 * 2.5):
            insert_job(session, key_id(keys["agent"]), status=JobStatus.SUCCEEDED.value, runs_total=40,
                       started_at=now - dt.timedelta(seconds=seconds), finished_at=now)
        insert_job(session, key_id(keys["agent"]), track="tabular", status=JobStatus.SUCCEEDED.value,
                   runs_total=40, started_at=now - dt.timedelta(hours=1), finished_at=now)  # another track's
        session.commit()
    second = estimate()
    assert second["basis"] == "history" and second["seconds_per_run"] == pytest.approx(2.5, abs=1e-3)
    assert second["run_s"] == pytest.approx(card["fixed_s"] + runs * 2.5, abs=0.1)
    # the worker hands the engine the same figures: a job's time left before its first run ends
    # is this deployment's too, not the reference machine's (the card's)
    from workers.context import WorkerContext
    from workers.runner import judge_request

    context = WorkerContext(settings=app.state.settings, engine=app.state.engine, sessions=app.state.sessionmaker,
                            worker_id="host:1", queue=None)  # type: ignore[arg-type]
    with app.state.sessionmaker() as session:
        job = insert_job(session, key_id(keys["agent"]))
        other = insert_job(session, key_id(keys["agent"]), track="tabular")
        session.commit()
        assert judge_request(job, context).timing == pytest.approx((card["fixed_s"], 2.5))
        assert judge_request(other, context).timing is None  # one job of its own: the card's, in the engine


def test_the_engines_time_left_before_a_run_ends_is_the_deployments_where_known() -> None:
    from bench.judge import judge
    from bench.protocol import Progress
    from tests.bench.scripted import TRACK, Scripted, by_lr, scripted_request

    def first_eta(timing: tuple[float, float] | None) -> float | None:
        seen: list[Progress] = []
        judge(scripted_request(n_seeds=2, job_key="eta", timing=timing), seen.append,
              executor=Scripted(by_lr({"idea": 1e-2, "baseline": 1e-2})), track=TRACK)
        return next(p.eta_s for p in seen if p.total and p.run is None and not p.done)

    assert "timing" not in TRACK.card and first_eta(None) is None  # no card figure: unknown until a run ends
    eta = first_eta((600.0, 30.0))  # this deployment's: ten minutes before training, 30 s a run
    assert eta is not None and eta > 600.0
