"""Red team 3 of matched baselines (after 796fdf6): the lr confound's guard against a pinned
matched baseline (``bench.decide.unchecked_at``) and the graph family's folds (``bench.family``).

Holes found, each closed in session 36 and its test passing since: a sandbag just under m at the
idea's lr was trusted (now no margin); ``1 == True`` matched another config's row (now by JSON);
``graph_family`` raised on keywords or a target of another type (now it checks them).

Threat model: the idea and the matched baseline are both an adversary's files. A scripted value
below stands for what a real file can do: its lr it reads off Adam's first step (red team
``lr_keyed_matched``), never ``run.split``/``run.checking`` for the matched file unless said.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from bench.decide import lr_matched, unchecked_at
from bench.errors import BenchError, ErrorCode
from bench.family import graph_family
from bench.seeding import SeedSecret
from tests.bench.scripted import (
    Asked,
    Scripted,
    by_lr,
    judge_scripted,
)

SECRET = SeedSecret(key=b"matched-guard-redteam-secret-000", epoch=1)
N = 7
MATCHED = "# a matched baseline (red team 3)\ndef build_model(spec, **hp):\n    raise AssertionError\n"
IDEA = "# an idea (red team 3)\ndef build_model(spec, **hp):\n    raise AssertionError\n"


Factory = Scripted


def judged(factory: Scripted, **request: Any) -> dict[str, Any]:
    request.setdefault("idea_code", IDEA)
    return judge_scripted(factory, seed_secret=SECRET, n_seeds=N, **request)


# -- hole: "within m" at the idea's lr is a free sandbag of up to m in the guard ------------------------
CANON_VAL = by_lr({"baseline": 0.03, "idea": 0.03})


def _track(run: Asked) -> float:
    """The track's model (an offset: the run scores offset²): chosen at 0.03 on validation; on
    test, 0.1 happens to do better than validation said (0.16 vs 0.25: noise between splits)."""
    if run.split == "test" and math.isclose(run.cfg["lr"], 0.1):
        return 0.4
    return CANON_VAL(run)


SANDBAG = 0.0045  # 0.9 m (m = 2% of the track's 0.25)


def _matched(run: Asked) -> float:
    """The hostile matched baseline: the track's model, but at lr 0.1 (which it reads off Adam's
    first step, on every split and seed alike: no sweep/final tell needed) worse by 0.9 m."""
    base = _track(run)
    return math.sqrt(base * base + SANDBAG) if math.isclose(run.cfg["lr"], 0.1) else base


def _idea(run: Asked) -> float:
    """The idea: best at 0.1 on validation; on test at 0.1 worse than the track's model at 0.1
    (0.162 vs 0.16) yet far better than the track's at 0.03 (0.25)."""
    if run.split == "test":
        return math.sqrt(0.4 ** 2 + 0.002)
    return by_lr({"idea": 0.1, "baseline": 0.1})(run)


def _script(run: Asked) -> float:
    if run.arm == "idea":
        return _matched(run) if run.checking else _idea(run)
    return _track(run) if run.checking else _matched(run)


def _control_script(run: Asked) -> float:
    return _idea(run) if run.arm == "idea" else _track(run)


def test_the_guard_trusts_a_matched_baseline_sandbagged_by_just_under_m_at_the_ideas_lr() -> None:
    """HOLE (closed in session 36: no margin, worse at all is untrusted). Against the track's baseline the idea is ``lr_confounded``: at its own lr the track's
    model beats it. The adversary's matched baseline is the track's model except 0.9 m worse at
    the idea's lr, on validation and test alike. Its check passes (at its chosen 0.03 it is the
    track's model: worse_by 0), ``unchecked_at(0.1)`` trusts it (0.9 m < m), and the guard's
    comparison at 0.1 is now against the sandbag, which the idea beats: ``helps``."""
    control = judged(Factory(_control_script))
    assert (control["practical_verdict"], control["practical_detail"]) == ("inconclusive", "lr_confounded")
    report = judged(Factory(_script), baseline_code=MATCHED)
    br = report["bench_report"]
    check = br["matched_baseline_check"]
    assert check["non_inferior"] and check["chosen"]["lr"] == 0.03 and br["idea"]["best_cfg"]["lr"] == 0.1
    assert unchecked_at(0.1, check, lower_is_better=True)  # closed: worse there at all, no guard
    # what the service should say: not helps, as against the track's baseline
    assert report["practical_verdict"] != "helps", (report["practical_verdict"], report["practical_detail"])


# -- sound (unit): the row matching of unchecked_at ----------------------------------------------------
def _row(lr: float, mean: float, **hparams: Any) -> dict[str, Any]:
    return {"cfg": {"lr": lr, "epochs": 1, "batch_size": 64, "weight_decay": 0.0, **hparams}, "mean": mean}


def test_unchecked_at_rows_other_hparams_nan_and_near_lrs_do_not_vouch() -> None:
    """A row of another hparam config, a NaN row (``diverged``), an lr 1e-6 off, a row whose lr is
    a string, a missing ``canonical_sweep``: none vouches (each is ``True``, the safe side)."""
    canonical = [_row(0.01, 0.5), _row(0.1, 0.5)]
    check = {"chosen": {"lr": 0.01, "hparams": {"k": 2}}, "canonical_sweep": canonical,
             "sweep": [_row(0.01, 0.5, k=2), _row(0.1, 0.4, k=1), _row(0.1, 0.9, k=2)]}
    assert unchecked_at(0.1, check, True) is True  # k=1's good row is not the chosen k=2
    assert unchecked_at(0.1, {**check, "sweep": [_row(0.1, math.nan, k=2)]}, True) is True
    assert unchecked_at(0.1, {**check, "sweep": [_row(0.1, math.inf, k=2)]}, True) is True
    assert unchecked_at(0.1 * (1 + 1e-6), {**check, "sweep": [_row(0.1, 0.5, k=2)]}, True) is True
    assert unchecked_at(0.1, {k: v for k, v in check.items() if k != "canonical_sweep"}, True) is True
    # the chosen hparams can never name lr/epochs/batch_size/weight_decay (bench.contract.check_hparams
    # refuses them), so the stripped keys cannot make a row of another config match
    with_hp = {"chosen": {"lr": 0.01, "hparams": {}}, "canonical_sweep": canonical,
               "sweep": [_row(0.1, 0.5, k=1)]}
    assert unchecked_at(0.1, with_hp, True) is True
    # lr_matched: untrusted and the arms disagree -> False (lr_confounded); trusted -> the tests decide
    assert lr_matched([_Cmp(True), _Cmp(True)], 0.03, [0.01, 0.03, 0.1], pinned_baseline=True) is False


@dataclass(frozen=True)
class _Cmp:
    better: bool


def test_a_hparam_named_like_a_trainer_setting_is_refused() -> None:
    from bench.contract import check_hparams
    from bench.errors import BenchError
    for name in ("lr", "epochs", "batch_size", "weight_decay"):
        with pytest.raises(BenchError):
            check_hparams({name: [1, 2]}, max_configs=12)


# -- graph family: never raises on an unchecked doc's shape ------------------------------------------
SHAPES: list[dict[str, Any]] = [
    # kwargs a list, on an op INVERSE folds (new in _applied) and on one NEUTRAL folds (before)
    {"nodes": [{"name": "a", "op": "call_function", "target": "aten.mul.Tensor",
                "args": [{"$node": "x"}, 2.0], "kwargs": [1]}]},
    {"nodes": [{"name": "a", "op": "call_function", "target": "aten.sub.Tensor",
                "args": [{"$node": "x"}, 0], "kwargs": "alpha"}]},
    # an unhashable target (a list): ``target in PASS_THROUGH`` (before 796fdf6 too)
    {"nodes": [{"name": "a", "op": "call_function", "target": ["aten.neg.default"], "args": [{"$node": "x"}]}]},
]


@pytest.mark.parametrize("doc", SHAPES)
def test_graph_family_never_raises_on_kwargs_or_a_target_of_another_type(doc: dict[str, Any]) -> None:
    """HOLE (robustness, pre-existing in NEUTRAL's branch, repeated in ``_applied``):
    ``(node.get("kwargs") or {}).get("alpha", 1)`` raises AttributeError on a list/str kwargs.
    Only reachable on a doc ``build_graph`` did not check (captured.py checks first)."""
    graph_family({"inputs": [{"name": "x", "kind": "input"}], **doc})


WEIRD: list[dict[str, Any]] = [
    {"nodes": [{"name": "a", "op": "call_function", "target": "aten.neg.default", "args": [{"$node": ["x"]}]}]},
    {"nodes": [{"name": "a", "op": "call_function", "target": "aten.neg.default", "args": [{"$node": "a"}]},
               {"name": "a", "op": "call_function", "target": "aten.neg.default", "args": [{"$node": "a"}]}]},
    {"nodes": [{"name": "b", "op": "call_function", "target": "aten.relu.default", "args": [{"$node": "c"}]},
               {"name": "c", "op": "call_function", "target": "aten.relu.default", "args": [{"$node": "b"}]},
               {"name": "o", "op": "output", "args": [{"$node": "c"}]}]},
    {"nodes": [{"name": "a", "op": "call_function", "target": "aten.add.Tensor", "args": [1.0, {"$node": "x"}],
                "kwargs": {"alpha": [1]}},
               {"name": "b", "op": "call_function", "target": "aten.sub.Tensor", "args": [{"$node": "a"}, True]}]},
    {"nodes": [{"name": None, "op": "call_function", "target": "aten.abs.default", "args": [{"$node": None}]},
               {"name": None, "op": "call_function", "target": "aten.abs.default", "args": [{"$node": None}]}]},
]


@pytest.mark.parametrize("doc", WEIRD)
def test_graph_family_folds_neither_raise_nor_loop_on_cycles_and_odd_refs(doc: dict[str, Any]) -> None:
    """Sound: self-references, forward references (a cycle), unhashable ``$node``, a list target,
    bool literals, a None name: the folds look one step back in ``made`` (no recursion)."""
    assert graph_family({"inputs": [{"name": "x", "kind": "input"}], **doc}).startswith("graph-v1:")


def _chain(*ops: tuple[str, list[Any]]) -> dict[str, Any]:
    nodes, prev = [{"name": "x", "op": "placeholder"}], "x"
    for i, (target, args) in enumerate(ops):
        nodes.append({"name": f"n{i}", "op": "call_function", "target": target,
                      "args": [{"$node": prev} if a == "$" else a for a in args], "kwargs": {}})
        prev = f"n{i}"
    nodes.append({"name": "out", "op": "output", "args": [{"$node": prev}]})
    return {"inputs": [{"name": "x", "kind": "input"}], "nodes": nodes}


def test_the_folds_merge_only_toward_more_attempts() -> None:
    """Sound: h * 3 / 2 folds into h (two different models, one family: more attempts counted,
    never fewer). Two orderings that are really different models stay apart: relu(-h) vs
    -relu(h) and -(relu(-h)) (no fold across ops)."""
    plain = graph_family(_chain())
    assert graph_family(_chain(("aten.mul.Tensor", ["$", 3.0]), ("aten.div.Tensor", ["$", 2.0]))) == plain
    a = graph_family(_chain(("aten.neg.default", ["$"]), ("aten.relu.default", ["$"])))
    b = graph_family(_chain(("aten.relu.default", ["$"]), ("aten.neg.default", ["$"])))
    c = graph_family(_chain(("aten.neg.default", ["$"]), ("aten.relu.default", ["$"]), ("aten.neg.default", ["$"])))
    assert len({a, b, c, plain}) == 4


def test_baseline_label_reads_nothing_a_submitter_writes() -> None:
    from app.reports.service import baseline_label
    assert baseline_label(None) == "canonical"
    assert baseline_label("") == "matched" and baseline_label("x" * 10_000) == "matched"


# -- hole: 1 == True == 1.0 in unchecked_at's hparams match ---------------------------------------------
TYPED = ('# a matched baseline whose configs differ only by a value\'s type (red team 3)\n'
         'HPARAMS = {"mode": [1, True]}\n'
         'def build_model(spec, mode):\n    raise AssertionError\n')


def _typed_matched(run: Asked) -> float:
    """The hostile file: ``mode is True`` (a real file tells ``True`` from ``1`` by type) is the
    track's model, a hair better, at its chosen lr 0.03 and ruined (+0.5) at every other lr, which
    it reads off Adam's first step; ``mode == 1`` (the int) is the honest track's model."""
    mode = run.cfg.get("hparams", {}).get("mode")
    base = _track(run)
    if mode is True:
        return base - 0.01 if math.isclose(run.cfg["lr"], 0.03) else base + 0.5
    return base


def _typed_idea(run: Asked) -> float:
    """Best at 0.1 on validation; on test at 0.1 worse than the track's model there (0.2025 vs
    0.16): against the track's baseline, lr_confounded."""
    return 0.45 if run.split == "test" else by_lr({"idea": 0.1, "baseline": 0.1})(run)


def _typed_script(run: Asked) -> float:
    if run.arm == "idea":
        return _typed_matched(run) if run.checking else _typed_idea(run)
    return _track(run) if run.checking else _typed_matched(run)


def test_a_row_of_mode_1_vouches_for_the_chosen_mode_true_at_the_ideas_lr() -> None:
    """HOLE (closed in session 36: rows matched by their JSON). ``unchecked_at``'s ``mean_at`` compares the row's cfg with the chosen hparams by
    ``==``: ``{"mode": 1} == {"mode": True}``. The sweep table keeps both configs apart (by
    ``str``) and sorts ``mode: 1`` first, so at the idea's lr the honest ``mode=1`` row vouches
    for the chosen ``mode=True`` config, which the job trains (``config_index`` keys by JSON) and
    which is ruined there (not within m: by 0.5 offset). The guard passes against the sandbag."""
    control = judged(Factory(lambda run: _typed_idea(run) if run.arm == "idea" else _track(run)))
    assert (control["practical_verdict"], control["practical_detail"]) == ("inconclusive", "lr_confounded")
    factory = Factory(_typed_script, options={"hparams_by_file": {TYPED: {"mode": [1, True]}}})
    # closed twice: a grid of values Python holds equal is refused (bench.contract.check_hparams),
    # and the guard matches rows by their JSON (test_unchecked_at_matches_types_loosely)
    with pytest.raises(BenchError) as caught:
        judged(factory, baseline_code=TYPED)
    assert caught.value.code == ErrorCode.INVALID_HPARAMS and "equal values" in caught.value.message


def test_unchecked_at_matches_types_loosely() -> None:
    """The unit form of the hole above: a row of ``k=1`` (or ``1.0``) vouches for chosen ``k=True``."""
    canonical = [_row(0.1, 0.5)]
    for honest in (1, 1.0):
        check = {"chosen": {"lr": 0.03, "hparams": {"k": True}}, "canonical_sweep": canonical,
                 "sweep": [_row(0.1, 0.5, k=honest), _row(0.1, 9.0, k=True)]}
        assert unchecked_at(0.1, check, True) is True, honest


def test_the_same_file_with_values_of_one_type_is_lr_confounded() -> None:
    """Sound, the control of the hole above: ``HPARAMS = {"mode": [2, True]}`` (``2 != True``): the
    chosen ``mode=True`` row at 0.1 is its own (0.5 offset worse): untrusted, lr_confounded."""
    typed = TYPED.replace("[1, True]", "[2, True]")
    factory = Factory(_typed_script, options={"hparams_by_file": {typed: {"mode": [2, True]}}})
    report = judged(factory, baseline_code=typed)
    check = report["bench_report"]["matched_baseline_check"]
    assert check["chosen"]["hparams"] == {"mode": True} and check["non_inferior"]
    assert unchecked_at(0.1, check, lower_is_better=True)
    assert (report["practical_verdict"], report["practical_detail"]) == ("inconclusive", "lr_confounded")
