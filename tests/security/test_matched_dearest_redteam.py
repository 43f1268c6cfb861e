"""Red team (helper, session 38) of commit 1bfe528: in a matched baseline's job the idea's dearest
forward per example is held to ``compute_ratio`` x the track's canonical baseline's dearest
forward, measured in the matched baseline's check (``bench.judge.check_matched_baseline`` ->
``found["dearest"]`` -> ``Job.check_counts`` -> ``Reference.dearest`` -> ``decide.count_limits``).
Before, it was held to ``compute_ratio`` x the canonical cost per example (``base_dearest`` 0).

The question: can a matched baseline, the idea or a track raise the idea's allowance above what a
job against the track's own baseline allows? Driven through the scripted executor
(tests/bench/scripted.py), whose trainer counts per file (``Forwards``): no child.

Held (each test passes):

- the limit in a matched job is the one a job against the track's baseline gives, at the boundary,
  and a matched baseline padded to the most its check allows (its dearest forward 3.7 x the
  canonical's, in one config of several) lends its idea nothing
  (``test_a_matched_jobs_dearest_limit_is_the_track_jobs_and_the_matched_baseline_lends_none``);
- the check's baseline arm is the track's baseline with one config (``[{}]``), whatever grid the
  track's child claims and however many configs the idea declares (a densified check): no max over
  configs can reach it (``test_the_checks_baseline_arm_is_the_track_baseline_in_one_config``);
- a check whose track-baseline count is not finite ends ``internal``; a NaN beside a finite count is
  never the dearest (``test_a_non_finite_canonical_count_never_reaches_the_reference``);
- a missing, NaN, negative or -inf ``dearest`` in the check's answer gives the cost per example's
  limit, never more (``test_a_missing_or_odd_reference_dearest_is_never_looser``);
- the submitter cannot hand the job a ``canonical`` of its own
  (``test_the_submitter_cannot_supply_the_checks_answer``), and a custom track, whose baseline is
  its author's file, takes no matched baseline (``test_a_custom_track_takes_no_matched_baseline``);
- a job against the track's own baseline is unchanged
  (``test_a_job_against_the_tracks_baseline_holds_the_dearest_as_before``).

Found (the test fails): ``test_the_check_endpoint_holds_an_idea_to_the_canonical_baselines_counts``
(low, pre-existing, not from 1bfe528): ``POST /v1/ideas/check`` with a ``baseline_code`` holds the
idea to the *matched* baseline's counts.

Not reachable, noted: ``compute_error`` takes ``max(base_flops, base_dearest)``, so a ``Reference``
with ``dearest = inf`` lifts every limit; only a check whose canonical count was infinite could give
it, and that check ends ``internal`` (above). ``counts_error`` checks for finiteness only each
config's dearest forward: a NaN cost at any later row count is never its dearest (NaN compares
false) and is not reported either (only a broken trainer could count one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from bench import wire
from bench.card import TrackSettings
from bench.decide import FIXED_FREE, Counted, Reference, count_limits, counts_error
from bench.errors import BenchError, ErrorCode
from tests.bench.scripted import TRACK, by_lr, judge_scripted, scripted_request
from tests.security.test_matched_limits_redteam import CANONICAL, IDEA, MATCHED, SECRET, Counting

N = 7
BATCH = TRACK.card["defaults"]["batch_size"]
RATIO = TRACK.card["compute_ratio"]
FLOPS = 642.0  # every file's cost per example (the scripted default: 2 x its 321 parameters)
DEAR = 3000.0  # the track's baseline's dearest forward per example: above its cost per example
LIMIT = RATIO * DEAR  # what a job against the track's baseline allows an idea's dearest forward


def _batch(per_example: float) -> list[tuple[int, float]]:
    """A cheap 16-row forward and a batch-sized one costing ``per_example`` an example past FIXED_FREE."""
    return [(16, 16 * FLOPS), (BATCH, FIXED_FREE + BATCH * per_example)]


@dataclass
class Forwards(Counting):
    """``Counting`` whose trainer reports, per file, several forwards (``forwards``) or, per config,
    ``by_config(hparams)``'s; and which notes every check command (``seen``: file, configs)."""

    seen: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)

    def check(self, arm: str, command: wire.Check) -> wire.CheckReply:
        c = self.counted.get(self.files[arm], {})
        with self.lock:
            self.seen.append((self.files[arm], [dict(cfg) for cfg in command.configs]))
        by_config = c.get("by_config")
        forwards = [by_config(cfg) if by_config is not None else c.get("forwards", _batch(FLOPS))
                    for cfg in command.configs]
        n = len(command.configs)
        return wire.CheckReply(n_params=[321] * n, n_buffers=[0] * n, flops=[FLOPS] * n,
                               forward_rows=[[r for r, _ in f] for f in forwards],
                               forward_cost=[[x for _, x in f] for f in forwards], n_tensors=[4] * n,
                               vectorizable=True)


def _judged(counted: dict[str, Any], **request: Any) -> tuple[Any, dict[str, Any] | BenchError]:
    """The scripted executor and the job's report, or the error it ended with."""
    from tests.bench.scripted import Scripted

    factory = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}), {"counted": counted,
                                                                  "hparams_by_file": request.pop("hparams_by", {})},
                       kind=Forwards)
    request.setdefault("idea_code", IDEA)
    try:
        return factory, judge_scripted(factory, seed_secret=SECRET, n_seeds=N, **request)
    except BenchError as exc:
        return factory, exc


# -- the limit is the track job's, and a padded matched baseline lends nothing -----------------------
def test_a_matched_jobs_dearest_limit_is_the_track_jobs_and_the_matched_baseline_lends_none() -> None:
    """The track's baseline's dearest forward is 3000 an example (its cost per example 642). A job
    against it allows an idea's dearest forward up to 4 x 3000. The matched baseline is padded to
    what its check allows (11,000 an example, under 4 x 3000, in one of its two configs): a limit
    taken from it would be 44,000. At 12,000 the idea is judged in both jobs; at 12,120 refused in
    both, naming the canonical's 3000, and the check's answer carries 3000, not the matched 11,000."""
    padded = {"mode": ["lean", "dear"]}

    def matched(cfg: dict[str, Any]) -> list[tuple[int, float]]:
        return _batch(11_000.0 if cfg.get("mode") == "dear" else FLOPS)

    outcomes: dict[tuple[str, float], Any] = {}
    for per_example in (LIMIT, LIMIT * 1.01):
        counted = {CANONICAL: {"forwards": _batch(DEAR)}, MATCHED: {"by_config": matched},
                   IDEA: {"forwards": _batch(per_example)}}
        for job, extra in (("track", {}), ("matched", {"baseline_code": MATCHED, "hparams_by": {MATCHED: padded}})):
            factory, outcomes[job, per_example] = _judged(counted, **extra)
            if job == "matched":  # the matched baseline passed its check, both of its configs counted
                assert [cfgs for f, cfgs in factory.jobs[0].seen if f == MATCHED] == [
                    [{"mode": "lean"}, {"mode": "dear"}]]

    for job in ("track", "matched"):
        judged, refused = outcomes[job, LIMIT], outcomes[job, LIMIT * 1.01]
        assert isinstance(judged, dict), (job, judged)
        assert isinstance(refused, BenchError) and refused.code == ErrorCode.COMPUTE_PARITY, (job, refused)
        assert f"baseline's {DEAR:.4g} per example" in refused.message, refused.message
    report = outcomes["matched", LIMIT]["bench_report"]
    assert report["matched_baseline_check"]["dearest"] == DEAR
    assert outcomes["track", LIMIT]["bench_report"]["parameter_parity"]["dearest_per_example"]["baseline"] == DEAR


# -- the check's baseline arm: the track's baseline, one config --------------------------------------
def test_the_checks_baseline_arm_is_the_track_baseline_in_one_config() -> None:
    """``dearest_cost`` is the max over an arm's configs. The idea declares 3 configs, so the check
    sweeps a densified grid; the track's baseline child claims a 4-config HPARAMS (as a hostile
    track file could). The check counts the track's baseline in one config, ``{}``, its own file's
    (never the matched one's), and the job's idea is held to that count: a dear idea config among
    three is refused, named."""
    dear_idea = {"width": [1, 2, 3]}

    def idea(cfg: dict[str, Any]) -> list[tuple[int, float]]:
        return _batch(LIMIT * 1.5 if cfg.get("width") == 3 else FLOPS)

    counted = {CANONICAL: {"forwards": _batch(DEAR)}, MATCHED: {"forwards": _batch(3.5 * DEAR)},
               IDEA: {"by_config": idea}}
    factory, outcome = _judged(counted, baseline_code=MATCHED, hparams=dear_idea,
                               hparams_by={"": {"width": [8, 16, 32, 64]}})
    assert isinstance(outcome, BenchError) and outcome.code == ErrorCode.COMPUTE_PARITY, outcome
    assert "'width': 3" in outcome.message and f"baseline's {DEAR:.4g} per example" in outcome.message
    check, job = factory.jobs
    assert [cfgs for f, cfgs in check.seen if f == CANONICAL] == [[{}]]
    assert sorted(f for f, _ in check.seen) == sorted([CANONICAL, MATCHED])  # its two arms, no other file
    assert {f for f, _ in job.seen} == {MATCHED, IDEA}


# -- odd values ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("forwards", [
    [(16, 16 * FLOPS), (BATCH, math.inf)],
    [(BATCH, math.nan), (16, 16 * FLOPS)],
], ids=["inf", "nan_first"])
def test_a_non_finite_canonical_count_never_reaches_the_reference(forwards: list[tuple[int, float]]) -> None:
    """A check whose track-baseline trainer counts an infinite forward (the only way to a
    ``Reference.dearest`` of inf, which lifts every limit) ends ``internal``: no job runs."""
    factory, outcome = _judged({CANONICAL: {"forwards": forwards}}, baseline_code=MATCHED)
    assert isinstance(outcome, BenchError) and outcome.code == ErrorCode.INTERNAL, outcome
    assert len(factory.jobs) == 1  # the check alone


def test_a_nan_beside_a_finite_canonical_count_is_never_the_dearest() -> None:
    """A NaN cost after a finite one is never a config's dearest forward (NaN compares false), so it
    is not the reference either: the idea is held to the finite forward's 3000."""
    forwards = [*_batch(DEAR), (1, math.nan)]
    _, outcome = _judged({CANONICAL: {"forwards": forwards}, IDEA: {"forwards": _batch(LIMIT * 1.01)}},
                         baseline_code=MATCHED)
    assert isinstance(outcome, BenchError) and outcome.code == ErrorCode.COMPUTE_PARITY, outcome
    assert f"baseline's {DEAR:.4g} per example" in outcome.message


def _counted(forwards: list[tuple[int, float]], flops: float = FLOPS) -> Counted:
    return Counted(n_params=(321,), n_buffers=(0,), n_tensors=(4,), flops=(flops,), forwards=(tuple(forwards),))


def _check_counts(canonical: dict[str, Any], matched: Counted, idea: Counted) -> BenchError | None:
    """``Job.check_counts`` on a job whose check answered ``canonical`` (no child)."""
    from bench.protocol import Job

    def reply(c: Counted) -> wire.CheckReply:
        return wire.CheckReply(n_params=list(c.n_params), n_buffers=list(c.n_buffers), flops=list(c.flops),
                               forward_rows=[[r for r, _ in f] for f in c.forwards],
                               forward_cost=[[x for _, x in f] for f in c.forwards], n_tensors=list(c.n_tensors))

    job = SimpleNamespace(request=SimpleNamespace(canonical=canonical), settings=TrackSettings.of(TRACK.card),
                          grids={"idea": [{}]})
    try:
        Job.check_counts(job, {"idea": reply(idea), "baseline": reply(matched)})  # type: ignore[arg-type]
    except BenchError as exc:
        return exc
    return None


@pytest.mark.parametrize("dearest", ["missing", 0.0, -1.0, math.nan, -math.inf])
def test_a_missing_or_odd_reference_dearest_is_never_looser(dearest: Any) -> None:
    """A check's answer with no ``dearest`` (an older one), or 0, gives the limit of the canonical
    cost per example (4 x 642), never the matched baseline's (it is padded here to a dearest forward
    of 10,000 an example): an idea just over 4 x 642 is refused, one at it judged. ``.get(..., 0.0)``
    falls back to the stricter limit. A negative, NaN or infinite one (no path makes one) ends the
    job ``internal`` before anything is judged (``Job.check_counts``, session 38)."""
    canonical = {"n_params": 321, "n_buffers": 0, "n_tensors": 4, "flops": FLOPS}
    if dearest != "missing":
        canonical["dearest"] = dearest
    matched = _counted(_batch(10_000.0), flops=2_000.0)
    over = _check_counts(canonical, matched, _counted(_batch(RATIO * FLOPS * 1.01)))
    at = _check_counts(canonical, matched, _counted(_batch(RATIO * FLOPS)))
    if dearest in ("missing", 0.0):
        assert over is not None and over.code == ErrorCode.COMPUTE_PARITY, over
        assert at is None
    else:
        assert over is not None and at is not None and over.code == at.code == ErrorCode.INTERNAL, (over, at)
    # and the check's own fallback: a report with no dearest_per_example reads 0
    parity: dict[str, Any] = {}
    assert float((parity.get("dearest_per_example") or {}).get("baseline", 0.0)) == 0.0


def test_a_job_against_the_tracks_baseline_holds_the_dearest_as_before() -> None:
    """No ``Reference``: the limits are the baseline's own counts, its dearest forward the max over
    its configs (``Counted.dearest_cost``, as ``count_limits`` computed it inline before 1bfe528)."""
    from bench.decide import dearest_per_example

    base = Counted(n_params=(321, 321), n_buffers=(0, 0), n_tensors=(4, 4), flops=(FLOPS, FLOPS),
                   forwards=(tuple(_batch(DEAR)), tuple(_batch(2 * DEAR))))
    limits = count_limits(base, reference=None, parity_ratio=1.1, buffer_cap=None, compute_ratio=RATIO,
                          batch_size=BATCH, buffer_room=32)
    inline = max(dearest_per_example(*f, batch_size=BATCH) for f in base.dearest(BATCH))
    assert limits.base_dearest == inline == 2 * DEAR and limits.base_flops == FLOPS
    assert counts_error(limits, [{}], _counted(_batch(RATIO * 2 * DEAR)), base) is None
    refused = counts_error(limits, [{}], _counted(_batch(RATIO * 2 * DEAR * 1.01)), base)
    assert refused is not None and refused.code == ErrorCode.COMPUTE_PARITY
    # a Reference replaces the baseline's dearest, whatever it is (here lower than the padded baseline's)
    held = count_limits(base, reference=Reference(n_params=321, n_buffers=0, flops=FLOPS, n_tensors=4, dearest=DEAR),
                        parity_ratio=1.1, buffer_cap=None, compute_ratio=RATIO, batch_size=BATCH, buffer_room=32)
    assert held.base_dearest == DEAR


# -- the check's answer is the engine's own ------------------------------------------------------------
def test_the_submitter_cannot_supply_the_checks_answer() -> None:
    """``JudgeRequest.canonical`` skips the check (``judge``: only where it is None does the check
    run). A submission cannot carry one (``extra="forbid"``), and the worker's request leaves it None."""
    import inspect

    from pydantic import ValidationError

    from app.jobs.schemas import IdeaSubmission
    from workers import runner

    with pytest.raises(ValidationError):
        IdeaSubmission.model_validate({"track": "smoke", "code": IDEA, "baseline_code": MATCHED,
                                       "canonical": {"dearest": 1e30}})
    assert "canonical" not in inspect.getsource(runner.judge_request)


def test_a_custom_track_takes_no_matched_baseline() -> None:
    """A custom track's canonical baseline is its author's file: a matched baseline there is refused
    before any child (``check_baseline_allowed``), so no check's answer comes from it."""
    from pathlib import Path

    from bench.custom_track import CustomTrack
    from bench.judge import judge
    from tests.bench.scripted import Scripted

    source = (Path(__file__).parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text()
    factory = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}), kind=Forwards)
    with pytest.raises(BenchError) as refused:
        judge(scripted_request(seed_secret=SECRET, custom_track=CustomTrack.from_source(source),
                               baseline_code=MATCHED), executor=factory)
    assert refused.value.code == ErrorCode.MATCHED_BASELINE_UNSUPPORTED and factory.jobs == []


# -- finding: the check endpoint ---------------------------------------------------------------------
def test_the_check_endpoint_holds_an_idea_to_the_canonical_baselines_counts() -> None:
    """FINDING (low; pre-existing, not from 1bfe528): ``POST /v1/ideas/check`` with a
    ``baseline_code`` (``bench.judge.check`` -> ``_run(check_only=True)``) runs no matched check
    (``request.canonical`` stays None), so ``Job.check_counts`` builds no ``Reference`` and
    ``count_limits`` takes every limit from the *matched baseline's* counts. A matched baseline
    whose dearest forward is 11,000 an example (within its check's 4 x 3000) makes the check answer
    ``passed`` for an idea whose dearest forward is 20,000 (allowed 4 x 11,000), which the job
    refuses ``compute_parity`` against the canonical's 3000: docs/api.md promises "the error a job
    would end with". (The answer shows ``limit`` 2568 beside ``idea_dearest`` 20,000 and still
    ``passed``: it shows no dearest limit.) The same holds for parameters, buffers, tensors and
    FLOPs per example, and both ways: a matched baseline smaller than the canonical one makes the
    check refuse an idea the job judges. No verdict moves (the job holds), but the check misleads
    an agent about its allowance.

    Suggested fix: in a check-only request with a ``baseline_code``, count the track's baseline
    too (a third trainer, or the counts the track's card/cache keeps for it) and pass them as the
    ``Reference``, as the job does; or refuse ``baseline_code`` on the check endpoint / mark the
    counts in ``check_answer`` as the matched baseline's, not the job's limits."""
    from bench.judge import _run
    from tests.bench.scripted import Scripted

    counted = {CANONICAL: {"forwards": _batch(DEAR)},
               MATCHED: {"forwards": _batch(11_000.0)},
               IDEA: {"forwards": _batch(20_000.0)}}
    # the job refuses this idea (the canonical's dearest: 4 x 3000 = 12,000 < 20,000)
    _, job = _judged(counted, baseline_code=MATCHED)
    assert isinstance(job, BenchError) and job.code == ErrorCode.COMPUTE_PARITY, job
    factory = Scripted(by_lr({"baseline": 0.03, "idea": 0.03}), {"counted": counted}, kind=Forwards)
    request = scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", idea_code=IDEA,
                               baseline_code=MATCHED, check_only=True)
    try:
        answer: Any = _run(request, None, None, executor=factory, track=TRACK)
    except BenchError as exc:
        answer = exc
    assert isinstance(answer, BenchError) and answer.code == job.code, (
        f"the check passed an idea its job refuses: {answer if isinstance(answer, BenchError) else answer['flops_per_example']}")
