"""The whole protocol end to end on the smoke track, and the error taxonomy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.catalog import get_card
from bench.errors import BenchError
from bench.judge import JudgeRequest, judge
from bench.report import Report
from tests.conftest import count_launches, fresh_children

SMOKE = get_card("smoke")
GOOD_HEADER = "import torch\nfrom torch import nn\n"


@pytest.fixture(scope="module")
def smoke_report() -> dict:
    events = []
    report = judge(JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"]), events.append).model_dump(mode="json")
    report["_events"] = events
    return report


def test_smoke_protocol_end_to_end(smoke_report: dict) -> None:
    events = smoke_report.pop("_events")
    Report.model_validate(smoke_report)
    br = smoke_report["bench_report"]
    c = br["comparison"]
    assert br["n_seeds"] == 8 and c["n_pairs"] == 8
    assert (c["p_value"] * 256) == pytest.approx(round(c["p_value"] * 256))
    assert set(br["seeds"]["sweep"]).isdisjoint(br["seeds"]["final"])
    for arm in ("baseline", "idea"):
        block = br[arm]
        assert len(block["full"]["per_seed"]) == 8
        lrs = {row["cfg"]["lr"] for row in block["sweep"]}
        assert lrs == set(br["lr_grid"])  # both arms swept on the same union grid
        assert block["best_cfg"] in [row["cfg"] for row in block["sweep"]]
    diffs = [i - b for i, b in zip(br["idea"]["per_seed"], br["baseline"]["full"]["per_seed"], strict=True)]
    assert diffs == pytest.approx(c["per_seed_diffs"])
    assert smoke_report["worked"] == (smoke_report["system_verdict"] == "worked")
    assert smoke_report["mechanism_ok"] in (0, 1)
    assert len(br["mechanism_signature"]["idea_values"]) == 8
    assert {e.stage for e in events} >= {"sweep", "final", "mechanism"}
    assert events[-1].done == events[-1].total
    assert br["versions"]["torch"].startswith("2.13")


def test_reruns_give_identical_numbers_with_fresh_or_warm_children() -> None:
    """Warm children: the slot a host without fork servers keeps (tests/bench/test_forkserver.py
    has the slot that holds one)."""
    from bench import sandbox, warm

    fresh_children()

    # one job (its key): the same screening draw and capture order, so the same numbers
    request = JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2, job_key="rerun")
    cold = judge(request).model_dump(mode="json")
    assert warm.peek() is None
    judge(request, keep_warm=True)  # no slot yet: starts its own children, then the next job's
    slot = warm.peek()  # waits for the launch
    assert slot is not None and slot.alive
    # the own baseline's child captures and trains it (issue 26.9); the fourth is for a measure()
    assert sorted(slot.launched) == ["baseline", "capture_idea", "idea", "measure_baseline_1"]
    adopted = judge(request, keep_warm=True).model_dump(mode="json")
    assert all(proc.poll() is not None for proc, _ in slot.launched.values())  # used, then killed
    assert not Path(slot.tmp.name).exists()
    for arm in ("baseline", "idea"):
        assert cold["bench_report"][arm]["full"]["per_seed"] == adopted["bench_report"][arm]["full"]["per_seed"]
        assert cold["bench_report"][arm]["sweep"] == adopted["bench_report"][arm]["sweep"]
    assert adopted["bench_report"]["isolation"] == cold["bench_report"]["isolation"]
    # A slot whose child died is not used; discard() kills what is left.
    replacement = warm.peek()
    assert replacement is not None and replacement is not slot
    sandbox.kill(replacement.launched["idea"][0])
    assert warm.take(sandbox.Limits(memory_mb=request.memory_mb)) is None
    assert all(proc.poll() is not None for proc, _ in replacement.launched.values()) or not replacement.launched
    warm.discard()


def _fails_with(code: str, source: str, **kwargs: object) -> BenchError:
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=source, n_seeds=2, **kwargs))  # type: ignore[arg-type]
    assert info.value.code.value == code, info.value.message
    assert info.value.hint
    return info.value


BAD_IDEAS = {
    "invalid_code": "def build_model(spec):\n    return nn.Linear(8, 1\n",
    "missing_build_model": GOOD_HEADER + "def make(spec):\n    return nn.Linear(8, 1)\n",
    "not_a_module": "def build_model(spec):\n    return 42\n",
    "bad_output_shape": GOOD_HEADER + "def build_model(spec):\n    return nn.Linear(8, 3)\n",
    "too_many_parameters": GOOD_HEADER + "def build_model(spec):\n    return nn.Sequential(nn.Linear(8, 4000), nn.Linear(4000, 1))\n",
    "training_error": GOOD_HEADER + (
        "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.l = nn.Linear(8, 1)\n"
        "    def forward(self, x):\n        if self.training:\n            raise ValueError('boom in forward')\n"
        "        return self.l(x)\n"
        "def build_model(spec):\n    return M()\n"
    ),
    "crashed": "import os\nos._exit(3)\ndef build_model(spec):\n    pass\n",
    # issue 27: a key the model never reads doubled the sweep silently
    "hparam_no_effect": GOOD_HEADER + 'HPARAMS = {"width": [16], "unused": [1, 2]}\n'
    'def build_model(spec):\n    w = spec["hparams"]["width"]\n'
    '    return nn.Sequential(nn.Linear(8, w), nn.ReLU(), nn.Linear(w, 1))\n',
}


@pytest.mark.parametrize("code", sorted(BAD_IDEAS))
def test_bad_ideas_get_their_error_code(code: str) -> None:
    error = _fails_with(code, BAD_IDEAS[code])
    if code == "hparam_no_effect":  # the key that changed nothing is named (issue 27.8)
        assert "'unused'" in error.message and "no effect" in error.message, error.message


SELF_MEASURED = """
from torch import nn

MECHANISM = {"quantity": "mean output", "prediction": "finite", "expect": {"kind": "greater_than", "value": -1e9}}


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["input_shape"][0], 32), nn.ReLU(), nn.Linear(32, spec["output_shape"][0]))


def measure(model, x):
    return float(model(x).mean())
"""


def test_a_warm_slot_holds_the_child_an_ideas_own_measure_of_the_baseline_runs_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The idea's measure() of a built-in track's own baseline runs in a fresh child (its capture
    child trains); the warm slot starts that child too, so a warm job starts none
    (benchmarks/protocol_speed.py: tabular's example paid 0.6 s for it cold)."""
    from bench import warm

    fresh_children()  # a slot of warm children (a fork server's slot forks the measure child when asked)
    request = JudgeRequest(track="smoke", idea_code=SELF_MEASURED, n_seeds=2, job_key="warm_measure")
    judge(request, keep_warm=True)
    slot = warm.peek()
    assert slot is not None and sorted(slot.launched) == ["baseline", "capture_idea", "idea", "measure_baseline_1"]
    started = count_launches(monkeypatch)
    report = judge(request, keep_warm=True).model_dump(mode="json")
    assert report["bench_report"]["mechanism_signature"]["self_measured"] is True
    assert started == [] and all(proc.poll() is not None for proc, _ in slot.launched.values())
    warm.discard()


def test_missing_module_is_invalid_code_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """...and a file that fails to load costs no trainer: the trainers start once both files
    loaded (issue 26.9: most broken and hostile ideas end here)."""
    started = count_launches(monkeypatch)
    error = _fails_with("invalid_code", "import not_a_real_module_xyz\ndef build_model(spec):\n    pass\n")
    assert "not_a_real_module_xyz" in error.message
    assert sorted(started) == ["baseline", "capture_idea"], started  # the own baseline: one child


def test_training_error_names_the_line() -> None:
    error = _fails_with("training_error", BAD_IDEAS["training_error"])
    assert "idea.py line" in error.message and "boom in forward" in error.message
    assert "raise ValueError('boom in forward')" in error.message  # the line's text (issue 27.8)


def test_an_uncapturable_branch_is_named_by_its_line_and_its_fix() -> None:
    """Issue 27.8: not_capturable led with ~1,000 characters of exporter output cut mid-word."""
    source = GOOD_HEADER + (
        "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.l = nn.Linear(8, 1)\n"
        "    def forward(self, x):\n        if x.sum() > 0:\n            return self.l(x)\n"
        "        return -self.l(x)\n"
        "def build_model(spec):\n    return M()\n")
    error = _fails_with("not_capturable", source)
    assert error.message.startswith("idea: idea.py line 8: `if x.sum() > 0:`: a branch"), error.message
    assert "torch.where" in error.hint and len(error.message) < 600
    assert error.message.endswith(" ...") or error.message[-1] not in " ,"


def test_timeout_kills_the_child() -> None:
    source = "def build_model(spec):\n    while True:\n        pass\n"
    _fails_with("timeout", source, timeout_s=15.0)


def test_memory_bomb_is_out_of_memory() -> None:
    source = "import torch\ndef build_model(spec):\n    x = torch.ones(8_000_000_000)\n    return x\n"
    _fails_with("out_of_memory", source, memory_mb=2048)


def test_unknown_track() -> None:
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="nope", idea_code=SMOKE["example_idea"]))
    assert info.value.code.value == "unknown_track"


def test_cli_track_json_and_failing_run(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "track", "smoke", "--json"], capture_output=True, text=True, check=True
    )
    card = json.loads(out.stdout)
    assert "build_model" in card["example_idea"] and card["id"] == "smoke@1"
    bad = tmp_path / "bad.py"
    bad.write_text(BAD_IDEAS["bad_output_shape"])
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", str(bad), "--track", "smoke", "--seeds", "2"],
        capture_output=True, text=True,
    )
    assert run.returncode == 2 and "bad_output_shape" in run.stderr


def test_cli_run_reports_a_sandbox_violation(tmp_path: Path) -> None:
    idea = tmp_path / "net.py"
    idea.write_text(
        "import socket\nfrom torch import nn\n"
        "def build_model(spec):\n"
        "    socket.create_connection(('127.0.0.1', 6379), timeout=2)\n"
        "    return nn.Linear(8, 1)\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", str(idea), "--track", "smoke", "--seeds", "2",
         "--timeout", "120"],
        capture_output=True, text=True,
    )
    assert run.returncode == 2 and "sandbox_violation" in run.stderr, run.stderr


def test_densify_spreads_more_learning_rates_over_the_same_range() -> None:
    from bench.decide import dense_size, densify

    assert densify([0.01, 0.03, 0.1], 1, "grid") == [0.01, 0.03, 0.1]
    dense = densify([0.01, 0.03, 0.1], 2, "grid")
    # at least twice as many, the track's own rates among them (a matched baseline sharp at 0.03
    # was never run there on a grid of six from end to end: red team), geometric inside each interval
    assert len(dense) == dense_size(3, 2) == 7 and dense == sorted(dense) and {0.01, 0.03, 0.1} <= set(dense)
    assert dense[1] == pytest.approx((0.01**2 * 0.03) ** (1 / 3)) and dense[4] == pytest.approx((0.03**2 * 0.1) ** (1 / 3))
    for n, factor in ((2, 2), (3, 3), (5, 2), (5, 4), (6, 12)):
        grid = [0.001 * 3**i for i in range(n)]
        dense = densify(grid, factor, "grid")
        assert len(dense) == dense_size(n, factor) >= factor * n and set(grid) <= set(dense)
        assert dense == sorted(dense) and len(set(dense)) == len(dense)
    below = densify([0.005], 3, "below")
    assert len(below) == 3 and below[0] == pytest.approx(0.005) and max(below) < 0.01
    above = densify([0.2], 2, "above")
    assert len(above) == 2 and min(above) > 0.1 and above[-1] == pytest.approx(0.2)


@pytest.mark.parametrize("path", ["vectorized", "sequential"])
def test_a_cards_repeats_run_through_real_children_from_each_seeds_build(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``defaults.repeats`` 2 through the sandboxed trainer: each test seed's second run starts
    from the seed's captured build (``build_init``) with its own initial values and order, so
    the seed's value is the mean of two different runs, the first of which is the seed's run
    in a job of one repeat. (The rule that skips the repeats of futile first runs is the
    parent's, tested in test_protocol_rules.py; here the repeats always run.)"""
    import dataclasses

    from bench import protocol

    monkeypatch.setattr(protocol, "repeats_futile", lambda *_: False)
    from bench.options import EngineOptions
    from bench.registry import load_track

    smoke = load_track("smoke")
    repeated = dataclasses.replace(smoke, card={**smoke.card, "defaults": {**smoke.card["defaults"], "repeats": 2}})
    request = JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2, job_key="repeats", confirm=False,
                           options=EngineOptions(execution="auto" if path == "vectorized" else "sequential"))
    events: list = []
    twice = judge(request, events.append, track=repeated).model_dump(mode="json")
    once = judge(request).model_dump(mode="json")
    Report.model_validate(twice)
    br, single = twice["bench_report"], once["bench_report"]
    assert br["budget"]["repeats"] == 2 and "repeats" not in single["budget"]
    assert br["execution"]["path"] == single["execution"]["path"] == path
    assert br["seeds"]["final"] == single["seeds"]["final"] and br["n_seeds"] == 2
    for arm in ("baseline", "idea"):
        assert br[arm]["best_cfg"] == single[arm]["best_cfg"]  # the sweep is the same
        assert len(br[arm]["full"]["per_seed"]) == 2
        assert br[arm]["full"]["per_seed"] != single[arm]["full"]["per_seed"]  # each the mean with another run
    runs = [e.run for e in events if e.run is not None and e.run["stage"] == "screening"]
    assert len(runs) == 2 * 2 * 2 + (2 * 2 if br["screening"].get("matched_lr") else 0)
    assert events[-1].done == events[-1].total
