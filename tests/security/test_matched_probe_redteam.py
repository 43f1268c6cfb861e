"""Red team (helper, session 36, second pass): the three fixes of eec8efa / 58f6f6b attacked as a
hostile agent whose every file (the idea AND its matched baseline) is written against the source.

Holes found (each failed before its fix in this session):

- ``test_an_exact_no_op_in_the_matched_baseline_opens_no_fresh_hypothesis_stream``: the matched
  q-value stream is keyed by the matched baseline's graph family (``baseline_label``), but that
  family only folds the no-ops ``bench.family._identity_of`` lists (copies, views, +0, *1, /1,
  dropout(0)). ``-(-h)``, ``relu(relu(h))`` or ``h * 2 / 2`` are bit-for-bit the same model and
  each a fresh family: a one-line edit per re-roll opens a fresh stream again (Bonferroni over
  1 attempt, BH over 1 hypothesis: q = p), which is what the fix was to stop.
- ``test_the_same_no_op_splits_an_ideas_family_too``: the same root in the canonical stream (an
  idea's re-roll is a fresh family: its Bonferroni attempts restart at one).

Fixed: every matched baseline's ideas share one stream (``baseline_label``: ``matched``), and
the graph family folds an op undone or repeated (``bench.family``: ``INVOLUTIONS``,
``IDEMPOTENT``, ``INVERSE``). Other exact no-ops still make a family (docs/security.md, Still
open): the family is an accounting key, so folding more is the conservative side.

Sound (pinned): the probe the check measured must equal the job's (a literal MECHANISM changed
at run time is not confirmable; a changed ``expect`` is judged on both sides with the job's own);
a ``lower_than_baseline`` signature is paired with the track's values by seed; a probe failing on
purpose on the matched baseline reruns its check on the very same seeds and builds (its only cost
is a second check); a self-measured mechanism never raises a matched job's verdict; the lr rule
at the edge of the grid the check swept; ``canonical`` cannot come from a client. Pinned at a
price (not a hostile gain): an honest idea of several configs cannot match a pinned lr that its
check chose on the denser grid, so its every win is ``lr_confounded``.
"""

from __future__ import annotations

import json
import math
import types
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from bench import wire
from bench.errors import BenchError, ErrorCode
from bench.execution import MeasureRun
from bench.judge import declared_probe
from bench.seeding import SeedSecret
from tests.bench.scripted import (
    Asked,
    Scripted,
    ScriptedExecutor,
    by_lr,
    judge_scripted,
    scripted_request,
)

SECRET = SeedSecret(key=b"matched-probe-redteam-secret-000", epoch=1)
N = 7
MATCHED = "# a matched baseline (red team 2)\ndef build_model(spec, **hp):\n    raise AssertionError\n"
IDEA = "# an idea (red team 2)\ndef build_model(spec, **hp):\n    raise AssertionError\n"
CANONICAL = "the track scripted's baseline"  # what the scripted executor calls the track's own file
PROBED = {"quantity": "input sensitivity", "prediction": "the idea's output barely moves with its input",
          "expect": {"kind": "less_than", "value": 0.5}, "probe": {"kind": "input_gradient"}}


@dataclass
class Probing(ScriptedExecutor):
    """A scripted executor whose bench probe reads ``probed(file, init_seed, checking)`` and
    which can fail the probe (``fail_probe(file, checking)``) after training, as a model whose
    probe value is not finite does (bench/child.py: MECHANISM_ERROR)."""

    probed: Any = None
    fail_probe: Any = None

    def probe(self, arm: str, command: wire.Probe) -> list[float]:
        file = self.files[arm]
        if self.fail_probe is not None and self.fail_probe(file, self.checking):
            raise BenchError(ErrorCode.MECHANISM_ERROR, f"the probe failed on the {arm}'s model: nan")
        return [float(self.probed(file, int(run["init_seed"]), self.checking)) for run in command.runs]


def Factory(script: Any, options: dict[str, Any] | None = None) -> Scripted:  # noqa: N802 - read as a class
    return Scripted(script, options or {}, kind=Probing)


def judged(factory: Scripted, **request: Any) -> dict[str, Any]:
    request.setdefault("idea_code", IDEA)
    return judge_scripted(factory, seed_secret=SECRET, n_seeds=N, **request)


def _helps(run: Asked) -> float:
    """The idea, in its job, is better on test; everyone else is the track's model at lr 0.03."""
    tuned = by_lr({"baseline": 0.03, "idea": 0.03})
    return 0.3 if run.arm == "idea" and not run.checking and run.split == "test" else tuned(run)


def per_file(values: dict[str, float]) -> Any:
    return lambda file, seed, checking: values.get(file, 0.1)


# -- hole: the graph family folds only the no-ops it lists ---------------------------------------------
NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.a = nn.Linear(n, 32)
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.out(h)


def build_model(spec, **hp):
    return Net(spec["n_features"])
"""
# each is the same model, bit for bit (same parameters, same outputs): a re-roll's "new" baseline
RE_ROLLS = {
    "a double negation": NET.replace("return self.out(h)", "return self.out(-(-h))"),
    "an idempotent relu": NET.replace("h = torch.relu(self.a(x))", "h = torch.relu(torch.relu(self.a(x)))"),
    "times two, halved": NET.replace("return self.out(h)", "return self.out(h * 2.0 / 2.0)"),
}


def _captured(code: str) -> tuple[str, torch.Tensor]:
    """The graph family the engine reports for ``code``'s model (bench.graph.export_graph, as the
    capture child exports it; in-process here), and its output on a fixed batch."""
    from bench.family import graph_family
    from bench.graph import export_graph

    module = types.ModuleType("matched")
    exec(compile(code, "matched.py", "exec"), module.__dict__)
    torch.manual_seed(0)
    model = module.build_model({"n_features": 8})
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    doc, _ = export_graph(model, x)
    with torch.no_grad():
        return graph_family(doc), model(x)


@pytest.mark.parametrize("edit", list(RE_ROLLS))
def test_an_exact_no_op_in_the_matched_baseline_opens_no_fresh_hypothesis_stream(edit: str) -> None:
    """A matched job's hypotheses are counted in the stream of its ``baseline`` label
    (app.reports.discoveries ``_keys``: the label is in the hypothesis key too, so the idea's
    attempts restart at 1 as well). Since eec8efa the label is ``matched:`` + the matched
    baseline's captured graph family (app/reports/service.py ``baseline_label``), so a comment no
    longer opens a fresh stream. But ``bench.family.graph_family`` folds only the no-ops
    ``_identity_of`` knows; a double negation, an idempotent relu or ``* 2 / 2`` compute the same
    numbers bit for bit (the matched baseline still passes its check, and the idea's comparison is
    the same) and hash as a new family: one line per re-roll, and each re-roll of a null idea is
    the first hypothesis of a stream of one, q = p (the hole the fix closed for comments)."""
    from app.reports.service import baseline_label

    family, out = _captured(NET)
    re_rolled, re_out = _captured(RE_ROLLS[edit])
    assert torch.equal(out, re_out)  # the same model: nothing a verdict sees has changed
    # closed twice: nothing of the file keys the matched stream, and the family folds these edits
    assert baseline_label(RE_ROLLS[edit]) == baseline_label(NET) == "matched"
    assert re_rolled == family, f"{edit}: a fresh family ({re_rolled} against {family})"



def test_the_same_no_op_splits_an_ideas_family_too() -> None:
    """The root of the hole above is ``bench.family.graph_family`` itself: an idea's re-roll with
    one ``-(-h)`` more is another family (app/reports/service.py ``adopt_graph_family``), so its
    attempts restart at one (``_hypothesis_p``: Bonferroni over the family's attempts) in the
    canonical stream too, which issue 25.6's graph family was to stop (its red team's ``y + 0.0``
    is folded; a double negation is not)."""
    family, out = _captured(NET)
    re_rolled, re_out = _captured(RE_ROLLS["a double negation"])
    assert torch.equal(out, re_out)
    assert re_rolled == family

# -- sound: the check's probe must be the job's ----------------------------------------------------------
def test_a_literal_mechanism_changed_at_run_time_is_not_confirmable() -> None:
    """The idea's file declares a literal MECHANISM whose probe is input_gradient (what
    ``declared_probe`` reads, and the check measures on the track's baseline), and at run time
    swaps it for another probe (a mutation ``MECHANISM['probe'] = ...`` the literal parse does not
    see; the scripted executor's loaded ``mechanism``). The job's probe differs from the checked
    one (bench/assemble.py ``against_track_baseline``: ``found['probe'] != ...``): shown, not
    confirmed, ``partial``, though the matched baseline reads far from the idea on both."""
    literal = IDEA + f"MECHANISM = {PROBED!r}\nMECHANISM['probe'] = {{'kind': 'norm_ratio', 'module': 'a'}}\n"
    swapped = {**PROBED, "probe": {"kind": "norm_ratio", "module": "a"}}
    assert declared_probe(scripted_request(idea_code=literal, baseline_code=MATCHED))["probe"] == PROBED["probe"]
    probed = per_file({CANONICAL: 0.1, MATCHED: 1.0})

    def values(file: str, seed: int, checking: bool) -> float:  # the idea file is `literal`
        return 0.01 if file == literal else probed(file, seed, checking)

    report = judged(Factory(_helps, {"probed": values, "mechanism": swapped}), idea_code=literal,
                    baseline_code=MATCHED)
    signature = report["bench_report"]["mechanism_signature"]
    assert report["bench_report"]["matched_baseline_check"]["probe"]["probe"] == PROBED["probe"]
    assert signature["probe"] == swapped["probe"] and "not_confirmable" in signature["detail"]
    assert (report["practical_verdict"], report["system_verdict"]) == ("helps", "partial")


def test_an_expect_changed_at_run_time_is_judged_against_the_track_with_the_jobs_own() -> None:
    """Only the probe is compared: the check stores raw values, and the job applies its own
    ``expect`` to the track's values as to the matched baseline's. A literal ``less_than 0.5``
    (the track's baseline, 0.1, meets it) swapped at run time for ``less_than 0.05`` is judged
    with 0.05 on both sides: confirmed only because the track's 0.1 misses it, which is true."""
    literal = IDEA + f"MECHANISM = {PROBED!r}\n"
    strict = {**PROBED, "expect": {"kind": "less_than", "value": 0.05}}

    def values(file: str, seed: int, checking: bool) -> float:
        return {literal: 0.01, CANONICAL: 0.1, MATCHED: 1.0}[file]

    loose = judged(Factory(_helps, {"probed": values, "mechanism": PROBED}), idea_code=literal, baseline_code=MATCHED)
    assert loose["system_verdict"] == "partial"  # the track's baseline meets 0.5 too
    assert loose["bench_report"]["mechanism_signature"]["detail"]["track_baseline"]["baseline_meets_it"] is True
    report = judged(Factory(_helps, {"probed": values, "mechanism": strict}), idea_code=literal, baseline_code=MATCHED)
    track = report["bench_report"]["mechanism_signature"]["detail"]["track_baseline"]
    assert track["rule"].startswith("idea mean < 0.05") and track["confirmed"] is True
    assert report["system_verdict"] == "worked"


# -- sound: the track's values pair with the idea's by seed --------------------------------------------
def _spread(seed: int) -> float:
    return (seed % 9973) / 997.3  # 0..10: far wider across seeds than the paired difference


def test_a_lower_than_baseline_signature_pairs_the_track_values_by_seed() -> None:
    """``lower_than_baseline`` is a paired exact test. The idea reads 0.05 below the track's
    baseline on every seed, with a spread across seeds 200 times that: paired, 7 of 7 below
    (p = 1/128); unpaired or misaligned it would be noise. The check's seeds and value order are
    the job's (same secret, job key and n_seeds; ``list(found['seeds']) == screening.seeds``), so
    it is confirmed; and an idea 0.05 *above* on every seed is not."""
    expect = {**PROBED, "expect": {"kind": "lower_than_baseline"}}

    def values(shift: float) -> Any:
        def read(file: str, seed: int, checking: bool) -> float:
            return _spread(seed) + {IDEA: shift, CANONICAL: 0.0, MATCHED: 1.0}[file]
        return read

    report = judged(Factory(_helps, {"probed": values(-0.05)}), baseline_code=MATCHED, mechanism=expect)
    check = report["bench_report"]["matched_baseline_check"]
    assert check["probe"]["seeds"] == report["bench_report"]["seeds"]["final"]
    signature = report["bench_report"]["mechanism_signature"]
    assert [round(b - i, 9) for b, i in zip(check["probe"]["values"], signature["idea_values"], strict=True)] == [0.05] * N
    track = signature["detail"]["track_baseline"]
    assert track["confirmed"] is True and track["p_value"] == pytest.approx(1 / 128)
    assert report["system_verdict"] == "worked"

    above = judged(Factory(_helps, {"probed": values(+0.05)}), baseline_code=MATCHED, mechanism=expect)
    detail = above["bench_report"]["mechanism_signature"]["detail"]
    assert detail["track_baseline"]["confirmed"] is False and above["system_verdict"] == "partial"


# -- sound: a probe failed on purpose reruns the check, on the same seeds and builds --------------------
def test_a_probe_failed_on_purpose_reruns_the_check_on_the_same_seeds_and_builds() -> None:
    """The matched baseline makes the idea's probe fail in its check, after training (a model
    whose probe reads NaN): the check runs again without the probe (bench/judge.py
    ``check_matched_baseline``). The second check is the first one again: the same runs, seeds
    and builds (nothing re-rolled: screening seeds and builds come from the secret and the job
    key, which the check fixes before its first try), so no second draw of the non-inferiority
    test; the job's signature is not confirmable. Its one cost is a second check's runs, within
    the job's time left (6f05ebc: and counted on in its progress)."""
    factory = Factory(_helps, {"probed": per_file({CANONICAL: 1.0, IDEA: 0.1, MATCHED: 1.0}),
                               "fail_probe": lambda file, checking: checking and file == MATCHED})
    report = judged(factory, baseline_code=MATCHED, mechanism=PROBED)
    first, second, job = factory.jobs
    assert (first.checking, second.checking, job.checking) == (True, True, False)

    def runs(executor: Probing) -> list[tuple[Any, ...]]:
        return sorted((c["cfg"]["lr"], json.dumps(c["cfg"], sort_keys=True), c["eval"], c["init_seed"],
                       c["order_seed"]) for c in executor.commands)

    assert runs(first) == runs(second) and first.builds == second.builds
    assert sorted(repr((a.arm, a.cfg, a.split)) for a in first.trained) == sorted(
        repr((a.arm, a.cfg, a.split)) for a in second.trained)
    assert len(first.trained) == len(second.trained) > 0  # a second check's worth of runs
    signature = report["bench_report"]["mechanism_signature"]
    assert "not_confirmable" in signature["detail"] and "probe" not in report["bench_report"]["matched_baseline_check"]
    assert (report["practical_verdict"], report["system_verdict"]) == ("helps", "partial")


# -- sound: a self-measured mechanism never raises a matched job's verdict ------------------------------
def test_a_self_measured_mechanism_against_a_matched_baseline_raises_nothing() -> None:
    """A mechanism with no probe, measured by the idea's own ``measure`` on both arms (the
    matched baseline's models too): ``declared_probe`` is None, the check probes nothing, and
    the verdict is at most what the idea gets with no mechanism at all (``system_verdict``:
    self-measured only lowers)."""
    own = {k: v for k, v in PROBED.items() if k != "probe"}
    assert declared_probe(scripted_request(idea_code=IDEA, baseline_code=MATCHED, mechanism=own)) is None
    plain = judged(Factory(_helps), baseline_code=MATCHED)

    def measured(arm: str, run: MeasureRun) -> float:
        return 0.01 if arm == "idea" else 1.0

    report = judged(Factory(_helps, {"measured": measured}), baseline_code=MATCHED, mechanism=own)
    signature = report["bench_report"]["mechanism_signature"]
    assert signature["self_measured"] is True and "probe" not in report["bench_report"]["matched_baseline_check"]
    order = ["failed", "partial", "worked"]
    assert order.index(report["system_verdict"]) <= order.index(plain["system_verdict"])


# -- sound: the lr rule at the edge of the grid the check swept ----------------------------------------
def test_an_idea_at_a_pinned_lr_on_the_checked_grids_edge_is_lr_confounded() -> None:
    """The matched baseline's check chose the lowest lr of the grid it swept (its check extends
    both edges: 0.005), where its optimum may lie below; the idea chose the same lr and helps.
    The arms agree (``lr_matched``'s pinned rule does not apply) but the pinned lr is at the edge
    of ``lr_grids['baseline']`` (the check's grid, ``Job.checked_grid``): ``lr_confounded``, as
    against the track's baseline at the edge of its own extended grid."""
    best = {"baseline": 0.03, "idea": 0.005}

    def script(run: Asked) -> float:
        if run.checking:  # the check: the matched baseline (its idea arm) best at 0.005, as good as the track's
            return by_lr(best)(run)
        if run.arm == "idea" and run.split == "test":
            return 0.3 + 0.2 * abs(math.log(run.cfg["lr"] / 0.005))
        return by_lr({"baseline": 0.005, "idea": 0.005})(run)

    report = judged(Factory(script), baseline_code=MATCHED)
    br = report["bench_report"]
    assert br["matched_baseline_check"]["chosen"]["lr"] == 0.005 and br["idea"]["best_cfg"]["lr"] == 0.005
    assert br["matched_baseline_check"]["non_inferior"]
    assert (report["practical_verdict"], report["practical_detail"]) == ("inconclusive", "lr_confounded")


# -- sound: `canonical` (chosen, probe values, built) never comes from a client ------------------------
def test_a_client_cannot_hand_in_the_checks_findings() -> None:
    """``judge`` skips the matched baseline's check when the request already holds ``canonical``
    (bench/judge.py ``_run``). A submission cannot carry one (``IdeaSubmission`` forbids extra
    fields), and the worker's request (workers/runner.py ``judge_request``) names no ``canonical``:
    an agent cannot hand in its own probe values, ``chosen`` config or build."""
    import inspect

    from pydantic import ValidationError

    from app.jobs.schemas import IdeaSubmission
    from workers import runner

    body = {"track": "smoke", "code": IDEA, "baseline_code": MATCHED}
    IdeaSubmission.model_validate(body)
    with pytest.raises(ValidationError):
        IdeaSubmission.model_validate({**body, "canonical": {"chosen": {"lr": 0.01, "hparams": {}},
                                                             "probe": {"values": [9.0] * N}}})
    assert "canonical" not in inspect.getsource(runner.judge_request)


# -- sound, at a price: an idea of several configs against a matched baseline on a denser grid --------
DENSE = 0.02498049532966812  # a point of the check's grid for an idea of 4 configs (densify(..., 4, "grid"))


def test_an_honest_idea_of_several_configs_cannot_match_a_pinned_lr_off_its_grid() -> None:
    """Not a hostile gain, the fix's price (reported, pinned as it is; since the guard of
    ``bench.decide.unchecked_at`` only where the check's sweep shows the matched baseline worse
    than the track's at the idea's lr by more than m on validation, as here): an idea of 4 configs makes
    its matched baseline's check sweep a grid 4 times denser (``tuned_for``), whose best lr may lie
    between the track's 0.01, 0.03, 0.1, where no idea's sweep runs (it sweeps the track's grid
    and its edges). ``lr_matched(..., pinned_baseline=True)`` then makes every win of an honest
    idea ``lr_confounded``: the same idea, as much better, is ``helps`` against the track's
    baseline (whose confound guard is trained at the idea's lr). A guard that keeps helps
    reachable without trusting the matched file off its checked lr: the track's own baseline
    trained at the idea's lr (trusted code), as in a job against it."""
    hparams = {"k": [1, 2, 3, 4]}

    def script(run: Asked) -> float:
        if run.arm == "idea" and not run.checking:
            return 0.3 if run.split == "test" else by_lr({"idea": 0.03, "baseline": 0.03})(run)
        if run.checking and run.arm == "idea" or not run.checking and run.arm == "baseline":  # the matched file
            return by_lr({"idea": DENSE, "baseline": DENSE})(run)
        return by_lr({"baseline": 0.03, "idea": 0.03})(run)  # the track's baseline

    control = judged(Factory(script), hparams=hparams)
    assert control["practical_verdict"] == "helps"
    report = judged(Factory(script), baseline_code=MATCHED, hparams=hparams)
    check = report["bench_report"]["matched_baseline_check"]
    assert check["non_inferior"] and check["tuned_for"] == 4 and check["chosen"]["lr"] == pytest.approx(DENSE)
    assert (report["practical_verdict"], report["practical_detail"]) == ("inconclusive", "lr_confounded")
