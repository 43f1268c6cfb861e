"""The parent/child boundary as types (bench.wire): every command a model the child parses
before any work, every answer a model the parent reads deny by default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import wire
from bench.errors import BenchError, ErrorCode
from bench.judge import JudgeRequest, judge
from tests.conftest import use_cache

HOSTILE = Path(__file__).parent / "hostile"

COMMANDS: list[wire.Command] = [
    wire.CaptureLoad(role="idea", track="smoke", spec={"n_features": 8}, param_cap=1000, code="x = 1"),
    wire.Capture(configs=[{}, {"width": 8}], init_seeds=[1, 2]),
    wire.Measure(runs=[{"config": 0}], measure_code=None),
    wire.Measure(runs=[], builds=wire.Builds(configs=[{}], init_seeds=[3], targets=[["w"]])),
    wire.CaptureLoad(role="baseline", track="smoke", spec={}, param_cap=10, trains=True),
    wire.Load(role="baseline", spec={}, param_cap=10, captured=wire.CapturedRef(dir="/d", configs=[{}], init_seeds=[1])),
    wire.MoreInits(init_seeds=[4, 5]),
    wire.Check(data_dir="/d", configs=[{}], batch_size=32, probe=True, loss="cross_entropy", mechanism_probe={"kind": "x"}),
    wire.Train(runs=[{"run_id": "idea0", "cfg": {"lr": 0.001}}], path="vectorized"),
    wire.Probe(probe={"kind": "x"}, runs=[]),
    wire.MakeData(track_source="CARD = {}", items=[wire.DataItem(seed=1, dir="s1")]),
    wire.Warm(export=True),
    wire.Exit(),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_every_command_round_trips_and_has_an_answer(command: wire.Command) -> None:
    line = command.encode()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert type(command).model_validate_json(line) == command
    assert type(command) in wire.REPLIES


def test_the_childs_plain_table_says_what_the_models_say() -> None:
    """The child checks commands with bench.wire_names.OPS (no pydantic in it): the same ops,
    sides, required and optional keys as bench.wire's models."""
    from typing import get_args

    from bench.wire_names import OPS, parse_command_line

    models = {get_args(m.model_fields["op"].annotation)[0]: m for m in wire.REPLIES}
    assert set(models) == set(OPS)
    for op, model in models.items():
        side, required, optional = OPS[op]
        fields = {name: info for name, info in model.model_fields.items() if name != "op"}
        assert side == model.side, op
        assert required == {name for name, info in fields.items() if info.is_required()}, op
        assert optional == {name for name, info in fields.items() if not info.is_required()}, op
    for command in COMMANDS:  # what the parent sends, the child reads
        op, data = parse_command_line(command.encode())
        assert data == json.loads(command.model_dump_json()) and op == data["op"]


@pytest.mark.parametrize("line", [
    b'{"op": "rm_rf"}', b'{"op": "capture", "configs": [], "init_seeds": [], "extra": 1}',
    b'{"op": "capture", "configs": []}', b"[1]", b"not json", b"[" * 100_000,
])
def test_the_child_refuses_a_command_off_its_table_before_any_work(line: bytes) -> None:
    from bench.wire_names import parse_command_line

    with pytest.raises(BenchError) as raised:
        parse_command_line(line)
    assert raised.value.code == ErrorCode.INTERNAL


def _sides(*commands: wire.Command) -> str | None:
    from bench.wire_names import parse_command_line, side_after

    side = None
    for command in commands:
        side = side_after(side, *parse_command_line(command.encode()))
    return side


OWN = wire.CaptureLoad(role="baseline", track="smoke", spec={}, param_cap=10, trains=True)
LOAD = wire.Load(role="baseline", spec={}, param_cap=10, captured=wire.CapturedRef(dir="/d", configs=[], init_seeds=[]))


def test_only_a_built_in_tracks_own_baseline_is_captured_and_trained_in_one_child() -> None:
    """One child captures a built-in track's own baseline and trains it (one start fewer per
    job); every other child serves one side, and the own baseline's child never runs
    submitted code: no measure, no second load, no custom track's or submitted baseline."""
    assert _sides(wire.Warm(export=True), OWN, wire.Capture(configs=[{}], init_seeds=[1]), LOAD,
                  wire.Check(data_dir="/d", configs=[{}], batch_size=32), wire.Train(runs=[]), wire.Probe(probe={}, runs=[]),
                  wire.Rebuild(hparams={}, targets=[], init_seeds=[1]), wire.MoreInits(init_seeds=[2])) == "own_baseline"
    assert _sides(OWN.model_copy(update={"trains": False}), wire.Measure(runs=[])) == "capture"
    refused = [
        (OWN, wire.Measure(runs=[], measure_code="def measure(m, x): return 0.0")),
        (OWN, wire.Measure(runs=[])),
        (OWN, OWN),
        (OWN, OWN.model_copy(update={"trains": False, "code": "x = 1"})),
        (OWN, wire.MakeData(track_source="", items=[])),
        (OWN.model_copy(update={"code": "def build_model(spec): ..."}),),
        (OWN.model_copy(update={"track_source": "def build_baseline(spec): ..."}),),
        (wire.CaptureLoad(role="idea", track="smoke", spec={}, param_cap=1, code="x = 1"), LOAD),
        (OWN.model_copy(update={"trains": False}), LOAD),
        (LOAD, OWN),
        (LOAD, wire.Capture(configs=[], init_seeds=[])),
    ]
    for commands in refused:
        with pytest.raises(BenchError) as raised:
            _sides(*commands)
        assert raised.value.code == ErrorCode.INTERNAL, commands


def test_every_side_is_one_of_the_three_and_warm_serves_either() -> None:
    sides = {type(c).__name__: type(c).side for c in COMMANDS}
    assert sides["CaptureLoad"] == sides["Measure"] == "capture" and sides["Train"] == sides["Check"] == "trainer"
    assert sides["MakeData"] == "data" and sides["Warm"] is None


@pytest.mark.parametrize("model, data", [
    (wire.Capture, {"configs": [], "init_seeds": [], "extra": 1}), (wire.Capture, {"configs": [], "init_seeds": ["1"]}),
    (wire.Load, {"role": "judge", "spec": {}, "param_cap": 1, "captured": {"dir": "/", "configs": [], "init_seeds": []}}),
    (wire.Train, {"runs": [], "path": "parallel"}), (wire.MoreInits, {}),
])
def test_a_command_off_its_model_fails_where_the_parent_writes_it(model: type[wire.Command], data: dict[str, Any]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        model.model_validate(data)


@pytest.mark.parametrize("command, answer", [
    (wire.Capture(configs=[{}], init_seeds=[1]), {"ok": True, "verdict": "worked"}),  # a key it does not answer
    (wire.CaptureLoad(role="idea", track="smoke", spec={}, param_cap=1), {"ok": True, "hparams": {}}),  # one missing
    (wire.CaptureLoad(role="idea", track="smoke", spec={}, param_cap=1),
     {"ok": True, "hparams": {}, "mechanism": None, "has_measure": "yes"}),
    (wire.Measure(runs=[]), {"ok": True, "values": ["0.5"]}),  # a number as text
    (wire.Check(data_dir="/d", configs=[{}], batch_size=32),
     {"ok": True, "n_params": [True], "n_buffers": [0], "flops": [1.0], "forward_rows": [[8]],
      "forward_cost": [[1.0]], "n_tensors": [1]}),  # a bool as a count
    (wire.Measure(runs=[]), {"ok": True, "values": [0.0] * (wire.MAX_ANSWER_ITEMS + 1)}),
    (wire.Load(role="idea", spec={}, param_cap=1, captured=wire.CapturedRef(dir="/", configs=[], init_seeds=[])),
     {"ok": False, "device": "cpu"}),
])
def test_an_answer_off_its_model_is_a_sandbox_violation(command: wire.Command, answer: dict[str, Any]) -> None:
    with pytest.raises(BenchError) as raised:
        wire.parse_reply(command, json.loads(json.dumps(answer)), "idea")
    assert raised.value.code == ErrorCode.SANDBOX_VIOLATION and "answered" in raised.value.message


def test_answers_on_their_model_are_read_as_typed_values() -> None:
    checked = wire.parse_reply(wire.Check(data_dir="/d", configs=[{}], batch_size=32), {
        "ok": True, "n_params": [321], "n_buffers": [0], "flops": [642], "forward_rows": [[8, 16]],
        "forward_cost": [[5136, 10272]], "n_tensors": [4]}, "idea")
    assert isinstance(checked, wire.CheckReply) and checked.flops == [642.0] and checked.vectorizable is None
    measured = wire.parse_reply(wire.Measure(runs=[]), {"ok": True, "values": [1, float("nan")]}, "idea")
    assert isinstance(measured, wire.ValuesReply) and measured.values[0] == 1.0  # NaN passes: the parent checks


def test_submitted_code_that_adds_to_its_childs_answer_ends_the_job(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The file patches its capture child (as the threat model allows) to add a verdict and a
    count as text to the answer to ``capture``: a sandbox violation, before any training."""
    use_cache(tmp_path / "cache")
    with pytest.raises(BenchError) as raised:
        judge(JudgeRequest(track="smoke", idea_code=(HOSTILE / "answer_more.py").read_text(), n_seeds=2,
                           timeout_s=120.0))
    assert raised.value.code == ErrorCode.SANDBOX_VIOLATION, raised.value.message
    assert "answered 'capture_load'" in raised.value.message


def _scripted_child(tmp_path: Path, answer: bytes) -> tuple[Any, int]:
    """A stand-in child that says it is ready, reads one command and writes ``answer``."""
    import os
    import subprocess
    import sys

    read_fd, write_fd = os.pipe()
    code = (
        "import os, sys, time\n"
        f"os.write({write_fd}, b'{{\"ready\": true}}\\n')\n"
        "sys.stdin.readline()\n"
        f"os.write({write_fd}, {answer!r})\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, pass_fds=(write_fd,),
                            start_new_session=True, cwd=tmp_path)
    os.close(write_fd)
    return proc, read_fd


@pytest.mark.parametrize("answer", [
    b"[" * 100_000 + b"\n",  # nested past the JSON decoder's recursion limit: a RecursionError, not a ValueError
    b'{"a":' * 3000 + b"\n",
    b'{"ok": true}\n{"ok": true}\n',  # two answers to one command
])
def test_a_deeply_nested_or_doubled_answer_is_a_sandbox_violation(tmp_path: Path, answer: bytes) -> None:
    """Red team of the typed wire: a line nested 100,000 deep raised RecursionError in the parent,
    which the worker recorded as the bench's own failure (`internal`)."""
    import threading
    import time

    from bench.runner import ArmSession
    from bench.sandbox import Limits

    proc, fd = _scripted_child(tmp_path, answer)
    session = ArmSession("idea", tmp_path / "idea", Limits(), time.monotonic() + 30.0, threading.Event(),
                         30.0, launched=(proc, fd))
    try:
        with pytest.raises(BenchError) as raised:
            session.request(wire.MoreInits(init_seeds=[1]))
        assert raised.value.code == ErrorCode.SANDBOX_VIOLATION, raised.value.message
    finally:
        session.close()
    assert proc.poll() is not None


def test_a_child_holds_no_pydantic_after_loading_a_tracks_baseline() -> None:
    """A child checks commands with a plain table (bench.wire_names): pydantic's ~150 modules
    made every inspect.getmodule in it slower, 0.1-0.2 s a warm job (docs/performance.md)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import bench.child as child\n"
        "from bench.capture import Capturer\n"
        "child.warm({'export': True})\n"
        "Capturer().load({'role': 'baseline', 'track': 'smoke', 'spec': {'n_features': 8}, 'param_cap': 1000})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]
