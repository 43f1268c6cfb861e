"""Red team (helper, session 36): the limits and rules of a matched baseline's job that come from
what the matched baseline (an agent's own file) built or counted instead of from the track's
canonical baseline. Driven through the scripted executor (tests/bench/scripted.py): no child.

Holes found (each test failed before its fix, in this session: the hostile file got a better
verdict than it should):

- ``test_a_matched_baseline_weak_off_its_chosen_lr_does_not_clear_the_lr_confound``: the lr
  confound's guard (the baseline trained at the idea's lr) trains the *matched* baseline, at an lr
  its check never measured on test; one weak there turns ``lr_confounded`` into ``helps``.
- ``test_a_matched_baselines_probe_value_does_not_confirm_the_ideas_mechanism``: a bench probe's
  baseline side is the matched baseline's models, which its check never probed; one that fails
  the declared rule turns a signature the track's baseline shows too into ``worked``.
- ``test_a_comment_in_the_matched_baseline_opens_no_fresh_hypothesis_stream``: a matched job's
  q-value stream was keyed by the matched baseline's source text.

Fixed: against a matched baseline the arms' lrs must agree (``bench.decide.lr_matched``); a
probe's signature must also tell the idea from the track's baseline, which the matched
baseline's check probes on the same seeds (``bench.judge.declared_probe``,
``bench.assemble.against_track_baseline``); the stream is the matched baseline's graph family
(``app.reports.service.baseline_label``).

Sound (pinned): parameters, buffer words, forward FLOPs and the dearest forward of an idea in a
matched baseline's job are held to the canonical baseline's counts, whatever the matched one counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from bench import wire
from bench.decide import FIXED_FREE
from bench.errors import BenchError, ErrorCode
from bench.judge import judge
from bench.seeding import SeedSecret
from tests.bench.scripted import (
    TRACK,
    Asked,
    Scripted,
    ScriptedExecutor,
    by_lr,
    judge_scripted,
    scripted_request,
)

SECRET = SeedSecret(key=b"matched-limits-redteam-secret-00", epoch=1)
N = 7
MATCHED = "# a matched baseline (red team)\ndef build_model(spec, **hp):\n    raise AssertionError\n"
IDEA = "# an idea (red team)\ndef build_model(spec, **hp):\n    raise AssertionError\n"
CANONICAL = "the track scripted's baseline"  # what the scripted executor calls the track's own file
BATCH = TRACK.card["defaults"]["batch_size"]


@dataclass
class Counting(ScriptedExecutor):
    """A scripted executor whose trainer counts per file (``counted``: n_params, n_buffers, flops,
    n_tensors, forward = (rows, cost)) and whose bench probe reads per file (``probed``)."""

    counted: dict[str, dict[str, Any]] = field(default_factory=dict)
    probed: dict[str, float] = field(default_factory=dict)

    def check(self, arm: str, command: wire.Check) -> wire.CheckReply:
        c = self.counted.get(self.files[arm], {})
        n = len(command.configs)
        rows, cost = c.get("forward", (16, 642.0 * 16))
        return wire.CheckReply(n_params=[c.get("n_params", 321)] * n, n_buffers=[c.get("n_buffers", 0)] * n,
                               flops=[c.get("flops", 642.0)] * n, forward_rows=[[rows]] * n,
                               forward_cost=[[cost]] * n, n_tensors=[c.get("n_tensors", 4)] * n, vectorizable=True)

    def probe(self, arm: str, command: wire.Probe) -> list[float]:
        return [self.probed.get(self.files[arm], 0.1) for _ in command.runs]


def Factory(script: Any, options: dict[str, Any] | None = None) -> Scripted:  # noqa: N802 - read as a class
    return Scripted(script, options or {}, kind=Counting)


def judged(factory: Scripted, **request: Any) -> dict[str, Any]:
    request.setdefault("idea_code", IDEA)
    return judge_scripted(factory, seed_secret=SECRET, n_seeds=N, **request)


# -- sound: every count limit is the canonical baseline's ---------------------------------------------
PER_EXAMPLE = 2500.0  # a matched baseline's cost per example: within 4 x 642 (its check passes)


def _forward(per_example: float) -> tuple[int, float]:
    """One counted forward of one row whose cost per example (over a batch) is ``per_example``."""
    return 1, FIXED_FREE + BATCH * per_example


@pytest.mark.parametrize(("matched", "idea", "code", "says"), [
    ({"n_params": 350}, {"n_params": 380}, ErrorCode.PARAMETER_PARITY, "baseline's 321"),
    ({"n_buffers": 32}, {"n_buffers": 40}, ErrorCode.PARAMETER_PARITY, "allows 32"),
    ({"flops": PER_EXAMPLE}, {"flops": 2 * PER_EXAMPLE}, ErrorCode.COMPUTE_PARITY, "baseline's 642"),
    ({"forward": _forward(PER_EXAMPLE)}, {"forward": _forward(2 * PER_EXAMPLE)}, ErrorCode.COMPUTE_PARITY,
     "baseline's 642 per example"),
], ids=["params", "buffers", "flops", "dearest_forward"])
def test_a_matched_baselines_own_counts_raise_no_limit_of_its_idea(matched: dict[str, Any], idea: dict[str, Any],
                                                                   code: ErrorCode, says: str) -> None:
    """A matched baseline padded up to what its check allows (1.1 x the parameters, 32 buffer words,
    4 x the FLOPs, a dear small-rows forward) lends its idea nothing: each idea is within the limit
    the matched baseline's counts would give (1.1 x 350, 32 + 32, 4 x 2500) and over the canonical
    one's. Against a reference, ``base_dearest`` is the canonical baseline's dearest forward from its
    check (session 38; 0 before), so the dearest forward's limit is what a job against the track's
    baseline would give, never the matched baseline's."""
    factory = Factory(by_lr({"baseline": 0.03, "idea": 0.03}), {"counted": {MATCHED: matched, IDEA: idea}})
    with pytest.raises(BenchError) as caught:
        judged(factory, baseline_code=MATCHED)
    assert caught.value.code == code and says in caught.value.message, caught.value.message
    assert [job.checking for job in factory.jobs] == [True, False]  # the matched baseline passed its check


# -- hole: the lr confound's guard trains the matched baseline at an lr its check never tested --------
def _model(lr: float) -> float:
    """The track's model on test: better at 0.03 than at 0.01 (the sweep's validation picks 0.01)."""
    return 0.3 if lr == 0.03 else 0.5


def _is_matched(run: Asked) -> bool:
    """The matched baseline's runs: the idea's arm in its check, the baseline's in its job."""
    return run.arm == "idea" if run.checking else run.arm == "baseline"


def test_a_matched_baseline_weak_off_its_chosen_lr_does_not_clear_the_lr_confound() -> None:
    """The idea is the track's model: its only 'gain' is that its validation picked 0.03 where the
    baseline's picked 0.01, and 0.03 is better on test. Against the track's baseline the job trains
    the baseline at 0.03 too, finds it the idea's equal: ``lr_confounded`` (the control below).

    The matched baseline is an exact copy of the track's at 0.01, the lr its check chose and
    measured (worse_by 0: non-inferior, no shortfall), and 0.4 worse at every other lr (a file
    that reads its lr off Adam's first step, as earlier red teams did; it cannot see the split,
    so on validation too). The job's confound guard trains *it* at the idea's 0.03, an lr its
    check never measured on test: the idea 'beat the baseline at its own lr', and the lr
    confound was a ``helps`` (bench/protocol.py ``Job.matched_cfg`` / ``final`` run
    ``matched_config(self.best("baseline")...)`` on the matched baseline; bench/assemble.py
    ``lr_matched(tests, ...)`` trusted it). Closed: the guard counts only where the check's sweep
    had the matched baseline at that lr within m of the track's on validation
    (``bench.decide.unchecked_at``)."""

    def validation(run: Asked) -> float:
        best = 0.03 if run.arm == "idea" and not run.checking else 0.01
        return 0.5 + 0.2 * abs(math.log(run.cfg["lr"] / best))

    def honest(run: Asked) -> float:  # the track's baseline against the idea: no matched baseline
        return validation(run) if run.split == "val" else _model(run.cfg["lr"])

    control = judged(Factory(honest))
    assert (control["practical_verdict"], control["practical_detail"]) == ("inconclusive", "lr_confounded")

    def hostile(run: Asked) -> float:
        return honest(run) + (0.4 if _is_matched(run) and run.cfg["lr"] != 0.01 else 0.0)

    report = judged(Factory(hostile), baseline_code=MATCHED)
    br = report["bench_report"]
    check = br["matched_baseline_check"]
    assert check["non_inferior"] and check["worse_by"] == pytest.approx(0.0, abs=1e-9)
    assert check["chosen"]["lr"] == 0.01 and br["idea"]["best_cfg"]["lr"] == 0.03
    # the idea is the track's model: it would be lr_confounded against the track's baseline
    assert (report["practical_verdict"], report["practical_detail"]) == ("inconclusive", "lr_confounded")


def test_an_honest_matched_baseline_guards_an_idea_that_chose_another_lr() -> None:
    """The guard keeps honest work judgeable: a matched baseline that is the track's model at
    every lr (its check's sweep shows it level with the track's at the idea's 0.03) is trusted
    there, and an idea better than the track's model at every lr is ``helps`` although the arms
    chose different lrs."""

    def validation(run: Asked) -> float:
        best = 0.03 if run.arm == "idea" and not run.checking else 0.01
        return 0.5 + 0.2 * abs(math.log(run.cfg["lr"] / best))

    def script(run: Asked) -> float:
        if run.split == "val":
            return validation(run)
        return _model(run.cfg["lr"]) - (0.1 if run.arm == "idea" and not run.checking else 0.0)

    report = judged(Factory(script), baseline_code=MATCHED)
    br = report["bench_report"]
    assert br["matched_baseline_check"]["chosen"]["lr"] == 0.01 and br["idea"]["best_cfg"]["lr"] == 0.03
    assert br["screening"]["matched_lr"] is not None  # the guard ran: the matched baseline at 0.03
    assert report["practical_verdict"] == "helps", (report["practical_verdict"], report["practical_detail"])


# -- hole: a bench probe's baseline side is the matched baseline's models -----------------------------
PROBED = {"quantity": "input sensitivity", "prediction": "the idea's output barely moves with its input",
          "expect": {"kind": "less_than", "value": 0.5}, "probe": {"kind": "input_gradient"}}


def test_a_matched_baselines_probe_value_does_not_confirm_the_ideas_mechanism() -> None:
    """The idea helps (MSE 0.09 against 0.25) and declares a signature the track's baseline shows
    too (input gradient 0.1 < 0.5 on both): against the track's baseline the signature tells
    nothing (``baseline_meets_it``), so the verdict is ``partial``. The matched baseline, as good
    as the track's on the metric (its check passes), reads 1.0 on the probe: the signature now
    'tells the idea from the baseline', and the same idea is ``worked``. Its check ran no probe
    (``check_matched_baseline`` clears the mechanism), so nothing ties that value to the canonical
    baseline's (bench/protocol.py ``Job._probe_arm`` on the matched baseline's models;
    bench/assemble.py ``mechanism_confirmed(..., measured["baseline"])``)."""
    tuned = by_lr({"baseline": 0.03, "idea": 0.03})

    def script(run: Asked) -> float:  # the idea, in its job, is better; everyone else is the track's model
        return 0.3 if run.arm == "idea" and not run.checking and run.split == "test" else tuned(run)

    probed = {CANONICAL: 0.1, IDEA: 0.1, MATCHED: 1.0}
    control = judged(Factory(script, {"probed": probed}), mechanism=PROBED)
    assert control["practical_verdict"] == "helps" and control["system_verdict"] == "partial"
    assert control["bench_report"]["mechanism_signature"]["confirmed"] is False

    report = judged(Factory(script, {"probed": probed}), baseline_code=MATCHED, mechanism=PROBED)
    assert report["bench_report"]["matched_baseline_check"]["non_inferior"]
    assert report["practical_verdict"] == "helps"
    signature = report["bench_report"]["mechanism_signature"]
    assert signature["baseline_values"] == [1.0] * N and signature["self_measured"] is False
    # the idea's signature is the track's baseline's: no mechanism was shown
    assert report["system_verdict"] != "worked" and signature["confirmed"] is False
    # the check probed the track's baseline on the job's seeds: it meets the signature too
    track = signature["detail"]["track_baseline"]
    assert track["confirmed"] is False and track["baseline_mean"] == pytest.approx(0.1)
    assert report["bench_report"]["matched_baseline_check"]["probe"]["values"] == [0.1] * N


def test_a_signature_the_track_baseline_lacks_is_confirmed_against_a_matched_baseline() -> None:
    """The fix keeps an honest mechanism confirmable: the matched baseline's check probes the
    track's baseline on the same seeds, and a signature that neither baseline shows (0.1 against
    1.0 on both) is confirmed, ``worked``. A probe the job learns only from the file it loads (no
    ``mechanism`` field, no literal ``MECHANISM``: the check cannot know it) is shown, not
    confirmed (``not_confirmable``): ``partial``."""
    tuned = by_lr({"baseline": 0.03, "idea": 0.03})

    def script(run: Asked) -> float:
        return 0.3 if run.arm == "idea" and not run.checking and run.split == "test" else tuned(run)

    probed = {CANONICAL: 1.0, IDEA: 0.1, MATCHED: 1.0}
    report = judged(Factory(script, {"probed": probed}), baseline_code=MATCHED, mechanism=PROBED)
    signature = report["bench_report"]["mechanism_signature"]
    assert (report["practical_verdict"], report["system_verdict"], signature["confirmed"]) == ("helps", "worked", True)
    assert signature["detail"]["track_baseline"]["confirmed"] is True

    unseen = judged(Factory(script, {"probed": probed, "mechanism": PROBED}), baseline_code=MATCHED)
    signature = unseen["bench_report"]["mechanism_signature"]
    assert signature["confirmed"] is False and "not_confirmable" in signature["detail"]
    assert (unseen["practical_verdict"], unseen["system_verdict"]) == ("helps", "partial")
    assert "probe" not in unseen["bench_report"]["matched_baseline_check"]


# -- hole (accounting): the matched stream was keyed by the matched baseline's text -------------------
def test_a_comment_in_the_matched_baseline_opens_no_fresh_hypothesis_stream() -> None:
    """A matched job's hypotheses are counted in the stream of its ``baseline`` label
    (app.reports.discoveries ``_keys``). It was the sha256 of the matched baseline's source text
    (app.reports.service ``baseline_label``): one comment more and the idea's next re-roll was the
    first attempt of a fresh stream (Bonferroni over 1, BH over 1: q = p), where a canonical job's
    re-rolls stay one hypothesis per graph family (issue 25.6). The graph family did not hold
    either (a second red team: ``-(-h)``; tests/security/test_matched_probe_redteam.py). Closed:
    every matched baseline's ideas share one stream, ``matched``: nothing the file holds keys it."""
    from app.reports.service import baseline_label

    assert baseline_label(MATCHED) == baseline_label(MATCHED + "# re-roll 1\n") == baseline_label(IDEA) == "matched"
    assert baseline_label(None) == "canonical"


def test_a_probe_the_track_baseline_lacks_checks_the_matched_baseline_without_it() -> None:
    """A probe that does not apply to the track's baseline (its submodule is the matched one's
    alone) fails the check's probe; the check runs again without it, the job goes on, and the
    signature is not confirmable: the matched baseline is still checked, and nothing of the
    idea's declaration makes its check fail."""

    @dataclass
    class NoSubmodule(Counting):
        def check(self, arm: str, command: wire.Check) -> wire.CheckReply:
            if command.mechanism_probe and self.files[arm] == CANONICAL:
                raise BenchError(ErrorCode.MECHANISM_ERROR, "the probe cannot be measured on the baseline's model")
            return super().check(arm, command)

    tuned = by_lr({"baseline": 0.03, "idea": 0.03})

    def script(run: Asked) -> float:
        return 0.3 if run.arm == "idea" and not run.checking and run.split == "test" else tuned(run)

    factory = Scripted(script, {"probed": {CANONICAL: 1.0, IDEA: 0.1, MATCHED: 1.0}}, kind=NoSubmodule)
    events: list[Any] = []
    report = judge(scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", idea_code=IDEA,
                                    baseline_code=MATCHED, mechanism=PROBED), events.append,
                   executor=factory, track=TRACK).model_dump(mode="json")
    assert [job.checking for job in factory.jobs] == [True, True, False]  # the check, again without the probe, the job
    done = [e.done for e in events]
    assert done == sorted(done) and events[-1].done == events[-1].total  # one count, never going back
    signature = report["bench_report"]["mechanism_signature"]
    assert signature["confirmed"] is False and "not_confirmable" in signature["detail"]
    assert (report["practical_verdict"], report["system_verdict"]) == ("helps", "partial")


def test_the_smallest_effect_is_a_share_of_the_track_baselines_mean_not_the_matched_ones() -> None:
    """The track's smallest effect m is 2 % of the baseline's mean. In a matched baseline's job
    it was the matched baseline's mean, an agent's file's: on a higher-is-better metric a sandbag
    within the non-inferiority margin lowered the bar (helper-60 measured it negligible: at most
    2 % of a shortfall itself at most m). Deny by default: m is the track's baseline's, from the
    check on the same seeds (``matched_baseline_check.canonical_mean``)."""
    tuned = by_lr({"baseline": 0.03, "idea": 0.03})

    def script(run: Asked) -> float:  # the matched baseline 0.004 worse than the track's (within m = 0.005)
        worse = 0.004 if run.split == "test" and ((run.checking and run.arm == "idea") or
                                                   (not run.checking and run.arm == "baseline")) else 0.0
        return tuned(run) + worse

    report = judged(Factory(script), baseline_code=MATCHED)
    br = report["bench_report"]
    check = br["matched_baseline_check"]
    assert check["non_inferior"] and check["matched_mean"] != pytest.approx(check["canonical_mean"])
    assert br["smallest_effect"] == pytest.approx(0.02 * check["canonical_mean"])
    assert br["comparison"]["baseline_mean"] == pytest.approx(check["matched_mean"])
