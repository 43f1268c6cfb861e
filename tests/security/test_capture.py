"""The capture boundary: submitted code only builds; the graph it yields is checked, rebuilt
by trusted code, and counted by the bench."""

from __future__ import annotations

import copy
import json
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from bench import graph as graph_module
from bench.catalog import get_card
from bench.errors import BenchError, ErrorCode
from bench.graph import build_graph, rebuild
from bench.judge import JudgeRequest, judge
from bench.registry import load_track
from tests.capture_helpers import capture_docs, graph_of
from tests.conftest import use_cache

HOSTILE = Path(__file__).parent / "hostile"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ideas"
SEED_EXAMPLES = {"butterfly_sequence.py": "sequence", "kinetic_mixing_dynamics.py": "dynamics",
                 "set_model_correlated_tokens.py": "correlated_tokens"}
TRACKS = ("smoke", "tabular", "correlated_tokens", "dynamics", "sequence", "vision", "cifar10")
CUSTOM = Path(__file__).resolve().parents[2] / "examples" / "tracks" / "so3_spectral.py"


@pytest.fixture
def job_tmp(tmp_path: Path, jobs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Jobs' temp dirs land under the module's ``jobs_dir`` (judge uses tempfile), their cache
    under ``tmp_path``."""
    monkeypatch.setattr(tempfile, "tempdir", str(jobs_dir))
    use_cache(tmp_path / "cache")
    return tmp_path


def _models() -> list[tuple[str, Any, dict[str, Any]]]:
    cases = []
    for name in TRACKS:
        track = load_track(name)
        cases.append((f"{name}:baseline", track.build_baseline, dict(track.spec, hparams={})))
        module = types.ModuleType("example")
        exec(get_card(name)["example_idea"], module.__dict__)
        hparams = {k: v[0] for k, v in (getattr(module, "HPARAMS", {}) or {}).items()}
        cases.append((f"{name}:example", module.build_model, dict(track.spec, hparams=hparams)))
    for file, name in SEED_EXAMPLES.items():
        module = types.ModuleType("seed")
        exec((EXAMPLES / file).read_text(), module.__dict__)
        hparams = {k: v[0] for k, v in (getattr(module, "HPARAMS", {}) or {}).items()}
        cases.append((file, module.build_model, dict(load_track(name).spec, hparams=hparams)))
    # The custom-track example and its seed idea.
    from bench.child import track_module
    from bench.custom_track import CustomTrack

    so3 = CustomTrack.from_source(CUSTOM.read_text())
    cases.append(("so3_spectral:baseline", track_module(so3.source).build_baseline, dict(so3.card["spec"], hparams={})))
    module = types.ModuleType("so3")
    exec((EXAMPLES / "so3_exact_generator.py").read_text(), module.__dict__)
    hparams = {k: v[0] for k, v in (getattr(module, "HPARAMS", {}) or {}).items()}
    cases.append(("so3_exact_generator.py", module.build_model, dict(so3.card["spec"], hparams=hparams)))
    return cases


@pytest.mark.slow
def test_every_baseline_and_example_captures_with_outputs_identical_to_eager() -> None:
    captured, worst = 0, 0.0
    for label, build, spec in _models():
        torch.manual_seed(0)
        model = build(spec)
        docs, tensors = capture_docs(model, spec["input_shape"])
        rebuilt = rebuild(docs, tensors, torch.device("cpu"))
        x = torch.randn(7, *spec["input_shape"])  # another batch size than the capture's
        for training in (True, False):
            model.train(training)
            rebuilt.train(training)
            with torch.no_grad():
                diff = float((model(x) - rebuilt(x)).abs().max())
            # Equal bit for bit, except where eager PyTorch takes a fused inference path (a
            # transformer layer in eval mode): float rounding only.
            assert diff <= 1e-5, (label, training, diff)
            worst = max(worst, diff)
        n_params = sum(p.numel() for p in model.parameters())
        assert rebuilt.counts()[0] == n_params, label
        captured += 1
    assert captured == 2 * len(TRACKS) + len(SEED_EXAMPLES) + 2  # all of them: 19 of 19
    print(f"captured {captured} models; largest difference from eager {worst:.3g}")


def _smoke_doc() -> tuple[dict[str, Any], dict[str, Any]]:
    track = load_track("smoke")
    torch.manual_seed(0)
    return capture_docs(track.build_baseline(track.spec), track.spec["input_shape"])


def _refused(doc: dict[str, Any]) -> str:
    with pytest.raises(BenchError) as info:
        build_graph(doc, torch.device("cpu"))
    assert info.value.code == ErrorCode.NOT_CAPTURABLE
    return info.value.message


def _first_call(doc: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = next(n for n in doc["nodes"] if n["op"] == "call_function")
    return node


@pytest.mark.parametrize("target", [
    "aten.from_file.default",  # reads a file
    "aten._backward.default",  # writes .grad (red team)
    "aten._local_scalar_dense.default",  # a tensor's value as a size
    "aten.is_leaf.default",  # autograd state
    "aten.add_.Tensor",  # in place
    "aten.as_strided.default",  # reinterprets storage
    "builtins.eval",
    "os.system",
    "torch.load",
    "aten.no_such_op.default",
    "aten.mm",
])
def test_ops_off_the_allowlist_are_refused(target: str) -> None:
    docs, _ = _smoke_doc()
    doc = copy.deepcopy(docs["train"])
    _first_call(doc)["target"] = target
    assert "allowlist" in _refused(doc) or "in-place" in _refused(doc)


def test_malformed_graphs_are_refused() -> None:
    docs, _ = _smoke_doc()
    good = docs["train"]
    build_graph(good, torch.device("cpu"))  # the unmodified graph passes
    unknown = copy.deepcopy(good)
    _first_call(unknown)["args"] = [{"$node": "nowhere"}]
    _refused(unknown)
    pickled = copy.deepcopy(good)
    _first_call(pickled)["args"] = [{"$pickle": "gASVAAAAAAAAAAA="}]
    _refused(pickled)
    two_inputs = copy.deepcopy(good)
    two_inputs["inputs"].append({"kind": "user", "name": "extra", "target": ""})
    _refused(two_inputs)
    mutates_param = copy.deepcopy(good)
    mutates_param["outputs"].insert(0, {"kind": "buffer_mutation", "target": good["inputs"][0]["target"]})
    _refused(mutates_param)
    aliased = copy.deepcopy(good)  # "0.weight" and "0__weight" share one slot of the rebuilt module
    aliased["inputs"].insert(0, {"kind": "buffer", "name": "alias", "target": "0__weight"})
    aliased["nodes"].insert(0, {"name": "alias", "op": "placeholder"})
    _refused(aliased)
    custom_kind = copy.deepcopy(good)
    custom_kind["inputs"][0]["kind"] = "custom_obj"
    _refused(custom_kind)
    for label in ("mix; import os", "a" * 65, ".".join(["m"] * 17), 7, ["mix"]):  # a module label: a path, or none
        odd_label = copy.deepcopy(good)
        _first_call(odd_label)["module"] = label
        assert "module label" in _refused(odd_label)
    _refused({"format": 99})
    _refused([])  # type: ignore[arg-type]


def test_a_model_that_keeps_state_across_eval_calls_cannot_fool_a_probe(job_tmp: Path) -> None:
    """A red-team forgery: an eval graph that counts its calls in a buffer answered the test
    predictions honestly and every later call (the bench's probe, on the kept tensors) with a
    constant, so ``input_gradient`` read 0: ``partial`` on a copy of the baseline, ``worked``
    against a matched baseline. Only training may update buffers."""
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=(HOSTILE / "eval_call_counter.py").read_text(), n_seeds=2))
    assert info.value.code == ErrorCode.NOT_CAPTURABLE, info.value.message
    assert "buffers in eval mode" in info.value.message and info.value.hint and "BatchNorm" in info.value.hint


def test_a_buffer_cannot_grow_into_a_table_of_the_data() -> None:
    """A rewritten capture whose buffer update is ``cat(buffer, x)``: the buffer cap counts
    the untrained model (8 elements), and the trainer would have stored every batch in it."""
    class Memory(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)
            self.register_buffer("mem", torch.zeros(1, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.training:
                self.mem.copy_(self.mem + x[:1])
            return self.lin(x)

    docs, tensors = capture_docs(Memory(), [8])
    update = next(n for n in docs["train"]["nodes"] if n.get("target") == "aten.add.Tensor")
    update["target"], update["args"] = "aten.cat.default", [[update["args"][0], {"$node": "x"}], 0]
    model = rebuild(docs, tensors, torch.device("cpu"))
    model.eval()
    model(torch.randn(5, 8))  # eval updates nothing
    model.train()
    with pytest.raises(BenchError) as info:
        model(torch.randn(5, 8))
    assert info.value.code == ErrorCode.NOT_CAPTURABLE and "changes shape" in info.value.message
    assert model.mem.shape == (1, 8) and model.counts()[1] - model.literals == 1  # it did not grow (zeros: one word)


def test_a_graph_nested_thousands_deep_is_refused_not_a_crash(tmp_path: Path) -> None:
    """JSON nested 100,000 deep (under the size cap) raised RecursionError out of the judge."""
    from bench.capture import graph_path
    from bench.captured import import_capture

    docs, _ = _smoke_doc()
    session = types.SimpleNamespace(workdir=tmp_path / "child", role="idea")
    for mode, text in (("train", "[" * 100_000 + "]" * 100_000), ("eval", json.dumps(docs["eval"]))):
        (session.workdir / graph_path(0, mode)).parent.mkdir(parents=True, exist_ok=True)
        (session.workdir / graph_path(0, mode)).write_text(text)
    with pytest.raises(BenchError) as info:
        import_capture(session, [{}], 1, tmp_path / "dest")  # type: ignore[arg-type]
    assert info.value.code == ErrorCode.NOT_CAPTURABLE
    deep = copy.deepcopy(docs["train"])  # valid JSON, but arguments nested 5,000 deep
    _first_call(deep)["args"] = ["DEEP"]
    text = json.dumps(deep).replace('"DEEP"', "[" * 5000 + '{"$node": "x"}' + "]" * 5000)
    (session.workdir / graph_path(0, "train")).write_text(text)
    with pytest.raises(BenchError) as info:
        import_capture(session, [{}], 1, tmp_path / "dest2")  # type: ignore[arg-type]
    assert info.value.code == ErrorCode.NOT_CAPTURABLE


def test_every_parameter_trains_and_every_tensor_is_counted() -> None:
    class Frozen(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)
            self.table = torch.nn.Parameter(torch.randn(100, 8), requires_grad=False)
            self.register_buffer("stats", torch.zeros(50))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) + 0.0 * (self.table.sum() + self.stats.sum())

    spec = {"input_shape": [8]}
    docs, tensors = capture_docs(Frozen(), spec["input_shape"])
    rebuilt = rebuild(docs, tensors, torch.device("cpu"))
    assert rebuilt.counts() == (8 + 1 + 800, 1 + 1)  # the buffer (a constant: one word), and the literal 0.0
    assert all(p.requires_grad for p in rebuilt.parameters())


def test_patching_the_engine_changes_nothing(job_tmp: Path) -> None:
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=(HOSTILE / "patch_engine.py").read_text(), n_seeds=2))
    assert info.value.code == ErrorCode.PARAMETER_PARITY, info.value.message
    assert "641 parameters" in info.value.message  # 8*64+64 + 64+1, counted by the bench


def test_data_dependent_control_flow_is_not_capturable(job_tmp: Path) -> None:
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=(HOSTILE / "data_dependent.py").read_text(), n_seeds=2))
    assert info.value.code == ErrorCode.NOT_CAPTURABLE, info.value.message
    assert info.value.hint and "torch.where" in info.value.hint


def test_the_capture_child_sees_no_data(job_tmp: Path) -> None:
    report = judge(JudgeRequest(track="smoke", idea_code=(HOSTILE / "snoop_data.py").read_text(), n_seeds=2)).model_dump(mode="json")
    assert report["system_judged"] is True  # it ran, and found no .npy file anywhere near it


def test_a_declared_probe_is_measured_by_the_bench_not_by_the_idea(job_tmp: Path) -> None:
    source = (HOSTILE / "forge_mechanism.py").read_text()
    report = judge(JudgeRequest(track="smoke", idea_code=source, n_seeds=2)).model_dump(mode="json")
    mechanism = report["bench_report"]["mechanism_signature"]
    assert mechanism["self_measured"] is False
    assert all(v > 1e-3 for v in mechanism["idea_values"])  # its measure() said 0.0


def test_a_module_probe_on_a_part_that_misses_the_output_fails_before_training(job_tmp: Path) -> None:
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="sequence", idea_code=(HOSTILE / "dead_mix.py").read_text(), n_seeds=2))
    assert info.value.code == ErrorCode.MECHANISM_ERROR, info.value.message
    assert "cannot be measured on the idea's model" in info.value.message
    assert "gives 0" in info.value.message  # its output is used by nothing


def test_an_own_measure_is_reported_as_self_measured(job_tmp: Path) -> None:
    source = (HOSTILE / "forge_mechanism.py").read_text().replace('    "probe": {"kind": "input_gradient"},\n', "")
    report = judge(JudgeRequest(track="smoke", idea_code=source, n_seeds=2)).model_dump(mode="json")
    mechanism = report["bench_report"]["mechanism_signature"]
    assert mechanism["self_measured"] is True
    assert mechanism["idea_values"] == [0.0, 0.0]


def test_the_ideas_measure_of_the_baseline_knows_no_seed_of_the_epoch(job_tmp: Path) -> None:
    """Red team (session 21): the idea's own measure() of a built-in track's baseline ran in
    the child that built that baseline with the epoch's shared init seeds, and its module code
    wrote them into its error's text. It runs in a fresh child now, which builds with a fixed
    seed (every tensor is then replaced by the trained one)."""
    import re

    from bench import options as engine_options
    from bench.seeding import run_seeds, screening_pool, sweep_seeds

    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=(HOSTILE / "measure_seed_leak.py").read_text(), n_seeds=2))
    found = re.search(r"SEEDS ([\d,]+) END", info.value.message)
    assert found, info.value.message  # its code ran where it looked for the seeds
    leaked = {int(n) for n in found.group(1).split(",")}
    secret = engine_options.current().deployment_secret()
    epoch = {run_seeds(s, secret, track="smoke").init for s in sweep_seeds(16) + screening_pool()}
    assert not leaked & epoch, leaked & epoch


def test_an_own_measure_that_confirms_itself_cannot_raise_the_verdict(job_tmp: Path) -> None:
    """A copy of the baseline that declares no probe and confirms its own claim (its
    measure() says 0.0, under a threshold it chose): the old rule made that ``partial``
    from the idea's number alone. A self-measured mechanism can lower the system verdict,
    never raise it above the one-claim rule on the bench's numbers (PROTOCOL.md 2)."""
    source = (HOSTILE / "forge_mechanism.py").read_text().replace('    "probe": {"kind": "input_gradient"},\n', "")
    source = source.replace('{"kind": "lower_than_baseline"}', '{"kind": "less_than", "value": 0.5}')
    # Its measure() tells the arms apart by the model's class: 0.0 for its own, 1.0 for the baseline's.
    source = source.replace("    return nn.Sequential(", "    return Idea(").replace(
        "def build_model(spec):", "class Idea(nn.Sequential):\n    pass\n\n\ndef build_model(spec):").replace(
        "    CALLS[0] += 1\n    return 0.0 if CALLS[0] <= 100 else 1.0", "    return 0.0 if type(model).__name__ == 'Idea' else 1.0")
    report = judge(JudgeRequest(track="smoke", idea_code=source, n_seeds=2)).model_dump(mode="json")
    assert report["mechanism_ok"] == 1 and report["bench_report"]["mechanism_signature"]["self_measured"] is True
    assert report["practical_verdict"] != "helps"  # the same model as the baseline
    assert report["system_verdict"] == "failed" and report["worked"] is False
    assert "can lower the system verdict, never raise it" in report["summary"]


def test_a_rebuild_for_the_confirmation_must_match_the_first_capture_bit_for_bit(tmp_path: Path) -> None:
    """``import_rebuilt``: in the confirmation's fresh capture child every decoy (a screening
    seed) must give the first capture's bytes; a new seed's tensors are drawn like the first
    seed's; constants are the first capture's, whatever the child wrote."""
    import hashlib
    import json

    import numpy as np

    from bench.capture import graph_path, tensor_path
    from bench.captured import ArmCapture, import_rebuilt

    rng = np.random.default_rng(0)
    first_dir, child = tmp_path / "first", types.SimpleNamespace(workdir=tmp_path / "child", role="baseline")
    for where in (first_dir, child.workdir):
        (where / tensor_path(0, 0, 0)).parent.mkdir(parents=True)
    (first_dir / graph_path(0, "train")).write_text(json.dumps({"inputs": [
        {"kind": "parameter", "target": "w"}, {"kind": "constant", "target": "c"}, {"kind": "user", "target": "x"}]}))
    constant = np.arange(3, dtype=np.float32)
    firsts, hashes = [], []
    for seed in range(3):
        firsts.append(rng.standard_normal((16, 8)).astype(np.float32))
        one = hashlib.sha256()
        for j, array in enumerate((firsts[-1], constant)):
            np.save(first_dir / tensor_path(0, seed, j), array)
            one.update(f"{array.dtype.str}{array.shape}".encode() + array.tobytes())
        hashes.append(one.hexdigest())
    first = ArmCapture(arm="baseline", configs=("{}",), shapes=((((16, 8), "float32"), ((3,), "float32")),),
                       graph_sha256=("g",), directory=first_dir, seed_sha256=(tuple(hashes),))

    def rebuilt(*weights: np.ndarray) -> None:
        for k, w in enumerate(weights):
            np.save(child.workdir / tensor_path(0, k, 0), w)
            np.save(child.workdir / tensor_path(0, k, 1), np.zeros(3, np.float32))  # ignored: a constant

    fresh = rng.standard_normal((16, 8)).astype(np.float32)
    rebuilt(fresh, firsts[2])
    new = import_rebuilt(child, first, 0, [None, 2])  # type: ignore[arg-type]
    assert list(new) == [0] and np.array_equal(new[0][0], fresh) and np.array_equal(new[0][1], constant)
    for weights, decoys, says in (
        ((fresh, firsts[2] + 1e-7), [None, 2], "other weights"),  # a decoy built otherwise
        ((fresh, firsts[1]), [None, 2], "other weights"),  # another seed's build for a decoy
        ((np.zeros((16, 8), np.float32), firsts[2]), [None, 2], "fresh random weights"),  # a new seed zeroed
        ((fresh, firsts[2][:8]), [None, 2], "change shape"),
    ):
        rebuilt(*weights)
        with pytest.raises(BenchError) as caught:
            import_rebuilt(child, first, 0, decoys)  # type: ignore[arg-type]
        assert caught.value.code is ErrorCode.NOT_CAPTURABLE and says in caught.value.message
        assert "seed 1" not in caught.value.message and "seed 2" not in caught.value.message


def test_a_probe_runs_in_the_batch_the_model_predicted_on() -> None:
    """A model that tells the probe's batch (256 rows) from its prediction batches (the first
    1024 test inputs) by its size, computed with tensor ops, and cuts its input gradient only
    there: the probe read 0 sensitivity for a model that is not insensitive. The probe now runs
    inside the first prediction batch, with its rows in front, and reads the true gradient."""
    from bench.probes import measure
    from tests.capture_helpers import through_capture

    class SizeAware(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            size = torch.ones_like(x[:, 0]).sum()
            probing = torch.relu(1 - (size - 256) ** 2)  # 1 at a batch of 256, else 0
            return probing * y.detach() + (1 - probing) * y

    torch.manual_seed(0)
    model = through_capture(SizeAware(), [8])
    test = torch.randn(1024, 8)
    probe = {"kind": "input_gradient"}
    assert measure(probe, model, test[:256]) == 0.0  # what the bench used to measure
    weight = next(p for p in model.parameters() if p.dim() == 2)  # d sum(lin(x)) / dx is the weight
    assert measure(probe, model, test[:256], test) == pytest.approx(float(weight.abs().mean()), rel=1e-5)
    assert measure({"kind": "token_permutation", "dim": 1, "swap": [0, 1]}, model, test[:256], test) > 0


def test_a_model_that_reads_other_rows_of_its_eval_batch_is_refused(job_tmp: Path) -> None:
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=(HOSTILE / "cross_row.py").read_text(), n_seeds=2))
    assert info.value.code == ErrorCode.ROW_DEPENDENT, info.value.message
    assert "changes with the other rows of its batch" in info.value.message
    assert info.value.hint and "BatchNorm is fine" in info.value.hint


def test_a_sandboxed_child_runs_with_denormals_flushed(job_tmp: Path) -> None:
    """A capture child is in the mode the trainer children train and check in (denormals
    flushed, for a child's whole life: bench.child.torch_settings), and a file that asks is told
    so: no graph can tell scoring from checking by it."""
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=(HOSTILE / "denormal_mode.py").read_text(), n_seeds=2))
    assert "denormals flushed here: True" in info.value.message


def test_a_keyword_name_never_becomes_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25.1: fx's code generator pasted a node's keyword names verbatim into the forward it
    wrote, so a key such as ``"alpha=1)\\nimport os..."`` ran in the trusted trainer. The key is
    refused against the op's schema, and even past that check nothing is generated from it."""
    marker = tmp_path / "ran"
    payload = f"alpha=1)\nimport pathlib; pathlib.Path({str(marker)!r}).write_text('x')\n#"
    docs, tensors = _smoke_doc()
    doc = copy.deepcopy(docs["train"])
    _first_call(doc)["kwargs"][payload] = 1
    assert "no argument is named" in _refused(doc)
    monkeypatch.setattr(graph_module, "check_call", lambda *a: 0)  # as if the check had a hole
    program, _ = build_graph(doc, torch.device("cpu"))
    with pytest.raises((TypeError, RuntimeError)):  # a call with an unknown keyword, not code
        rebuild({"train": doc, "eval": docs["eval"]}, tensors, torch.device("cpu")).train()(torch.zeros(2, 8))
    assert not marker.exists()
    assert isinstance(program, graph_module.Program)


def test_arguments_must_bind_to_the_schema() -> None:
    docs, _ = _smoke_doc()
    good = docs["train"]
    call = _first_call(good)
    too_many = copy.deepcopy(good)
    _first_call(too_many)["args"] = call["args"] + [None] * 12
    assert "positional arguments" in _refused(too_many)
    missing = copy.deepcopy(good)
    _first_call(missing)["args"] = call["args"][:1]
    assert "is missing" in _refused(missing)
    wrong_type = copy.deepcopy(good)
    _first_call(wrong_type)["args"] = ["not a tensor", *call["args"][1:]]
    assert "is not a Tensor" in _refused(wrong_type)
    twice = copy.deepcopy(good)
    schema = graph_module.resolve_op(call["target"])._schema
    _first_call(twice)["kwargs"] = {schema.arguments[0].name: call["args"][0]}
    assert "given twice" in _refused(twice)


def _one_call(target: str, args: list[Any], kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A graph of one call on its input ``x`` (``"@x"``) as a capture child could write it."""
    return graph_of(("y", target, args, kwargs or {}))


@pytest.mark.parametrize(("target", "args", "kwargs"), [
    ("aten.view.default", ["@x", [2, 1 + 2**31]], {}),  # in a list
    ("aten.max_pool1d.default", ["@x", [2**62 + 1], [], [0], [4]], {}),  # wrapped to a 2**62-step loop
    ("aten.native_group_norm.default", ["@x", None, None, 2, 3, 3 + 2**61, 1, 1e-5], {}),  # wrapped: a segfault
    ("aten._pad_enum.default", ["@x", [-5, 5], 2 + 2**32], {}),  # a 32-bit enum: circular, past its guard
    ("aten.matrix_power.default", ["@x", -2**63], {}),  # negated to itself: a loop for ever
    ("aten.slice.Tensor", ["@x", 0, 0, 2**63 - 2], {}),  # only export's own sentinel, exactly
    ("aten.sum.dim_IntList", ["@x", [2**40]], {}),  # an optional list
    ("aten.squeeze.dims", ["@x"], {"dim": [-(2**31) - 1]}),  # by keyword
])
def test_an_integer_argument_beyond_2_31_is_refused_before_any_kernel(target: str, args: list[Any],
                                                                       kwargs: dict[str, Any]) -> None:
    """Deny by default: kernels multiply sizes in 64 bits or cast modes to 32, so a size, dim,
    index or mode must lie within 2**31 of 0 (the kernel sweeps' holes, each also guarded)."""
    assert "beyond 2**31" in _refused(_one_call(target, args, kwargs))


def test_integers_within_2_31_and_exports_slice_sentinel_pass() -> None:
    """What models capture to: a slice "to the end" (int64's largest), sizes, dims and indices."""
    for target, args in (("aten.slice.Tensor", ["@x", 0, 0, 2**63 - 1]), ("aten.view.default", ["@x", [2**31, -1]]),
                         ("aten.select.int", ["@x", 0, -(2**31)]), ("aten.mul.Scalar", ["@x", 2**40])):
        build_graph(_one_call(target, args), torch.device("cpu"))
    program, _ = build_graph(_one_call("aten.slice.Tensor", ["@x", 1, 1, 2**63 - 1]), torch.device("cpu"))
    assert torch.equal(program(torch.arange(6.0).view(2, 3))[0], torch.tensor([[1.0, 2.0], [4.0, 5.0]]))


@pytest.mark.parametrize("target", [
    "aten._reshape_alias.default",  # a view of any size and stride: read a neighbour row (issue 25.2)
    "aten.batch_norm.default",  # writes running statistics although its schema says it does not (25.3)
    "aten._batch_norm_impl_index.default",
    "aten.instance_norm.default",
    "aten.cudnn_batch_norm.default",
    "aten.empty.memory_format",  # uninitialised memory
    "aten.empty_like.default",
    "aten.new_empty.default",
    "aten.resize_as.default",
])
def test_ops_that_alias_write_or_read_garbage_are_refused(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twice: the allowlist does not name them, and were one put on it by mistake, the schema
    rules (``_impure``) would still refuse it."""
    with pytest.raises(BenchError) as info:
        graph_module.resolve_op(target)
    assert info.value.code == ErrorCode.NOT_CAPTURABLE and "allowlist" in info.value.message
    monkeypatch.setattr(graph_module, "KIND", {**graph_module.KIND, target: "pointwise"})
    with pytest.raises(BenchError) as info:
        graph_module.resolve_op(target)
    assert info.value.code == ErrorCode.NOT_CAPTURABLE and "refuses" in info.value.message


def test_batch_norm_models_still_capture_in_functional_form() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    docs, tensors = capture_docs(model, [8])
    targets = {n.get("target") for d in docs.values() for n in d["nodes"]}
    assert "aten.batch_norm.default" not in targets and graph_module.FUNCTIONAL_NORMS & targets
    rebuilt = rebuild(docs, tensors, torch.device("cpu"))
    rebuilt.train()(torch.randn(4, 8)).sum().backward()


def _hand_written(calls: list[dict[str, Any]], out: str) -> dict[str, Any]:
    """A graph JSON of one user input ``x`` and ``calls``, as a hostile capture would write it."""
    nodes = [{"name": "x", "op": "placeholder"}]
    nodes += [{"op": "call_function", "kwargs": {}, **call} for call in calls]
    nodes.append({"name": "output", "op": "output", "args": [{"$tuple": [{"$node": out}]}]})
    return {"format": 1, "inputs": [{"kind": "user", "name": "x", "target": ""}],
            "outputs": [{"kind": "user", "target": ""}], "nodes": nodes}


def _node(name: str) -> dict[str, str]:
    return {"$node": name}


def test_a_row_cannot_learn_where_it_lies_in_storage() -> None:
    """Red team: ``storage_offset`` (and strides) told a row given alone as a view of the eval batch
    its position; the model's output then depended on the layout, not the row's values."""
    for target in ("aten.storage_offset.default", "aten.sym_storage_offset.default", "aten.stride.int",
                   "aten.sym_stride.int", "aten.is_contiguous.default"):
        args = [_node("x"), 0] if target.endswith(".int") else [_node("x")]
        doc = _hand_written([{"name": "s", "target": target, "args": args},
                             {"name": "o", "target": "aten.add.Tensor", "args": [_node("x"), _node("s")]}], "o")
        assert "allowlist" in _refused(doc), target


def test_a_mode_off_the_kernels_list_is_refused() -> None:
    """Red team: grid_sampler_2d with interpolation_mode 7 left its output unwritten: heap garbage,
    earlier tensors' values among it."""
    calls = [{"name": "g", "target": "aten.new_zeros.default", "args": [_node("x"), [1, 4, 4, 2]]},
             {"name": "o", "target": "aten.grid_sampler_2d.default", "args": [_node("x"), _node("g"), 7, 0, False]}]
    assert "none of its modes" in _refused(_hand_written(calls, "o"))
    calls[1]["args"] = [_node("x"), _node("g"), 0, 0, False]
    program, _ = build_graph(_hand_written(calls, "o"), torch.device("cpu"))
    assert program(torch.ones(1, 1, 2, 2))[0].shape == (1, 1, 4, 4)


def test_size_arithmetic_is_bounded() -> None:
    """Red team: ``pow(batch, 10**12)`` built, then computed for ever in the trainer."""
    calls = [{"name": "s", "target": "aten.sym_size.int", "args": [_node("x"), 0]},
             {"name": "p", "target": "operator.pow", "args": [_node("s"), 10**12]},
             {"name": "o", "target": "aten.add.Tensor", "args": [_node("x"), _node("p")]}]
    program, _ = build_graph(_hand_written(calls, "o"), torch.device("cpu"))
    with pytest.raises(OverflowError):
        program(torch.ones(3, 2))
    calls[1] = {"name": "p", "target": "operator.mul", "args": [_node("s"), 2**50]}
    program, _ = build_graph(_hand_written(calls, "o"), torch.device("cpu"))
    with pytest.raises(OverflowError):
        program(torch.ones(3, 2))
    calls[1] = {"name": "p", "target": "operator.pow", "args": [_node("s"), 2]}
    program, _ = build_graph(_hand_written(calls, "o"), torch.device("cpu"))
    assert program(torch.ones(3, 2))[0].tolist() == [[10.0, 10.0]] * 3


def test_integer_division_cannot_kill_the_trainer() -> None:
    """Red team: INT_MIN // -1 on int64 tensors killed the process with SIGFPE."""
    calls = [{"name": "a", "target": "aten.scalar_tensor.default", "args": [-(2**63)],
              "kwargs": {"dtype": {"$dtype": "int64"}}},
             {"name": "b", "target": "aten.scalar_tensor.default", "args": [-1], "kwargs": {"dtype": {"$dtype": "int64"}}},
             {"name": "c", "target": "aten.div.Tensor_mode", "args": [_node("a"), _node("b")],
              "kwargs": {"rounding_mode": "trunc"}},
             {"name": "o", "target": "aten.add.Tensor", "args": [_node("x"), _node("c")]}]
    program, _ = build_graph(_hand_written(calls, "o"), torch.device("cpu"))
    with pytest.raises(RuntimeError, match="integer tensors is refused"):
        program(torch.ones(2, 2))
    calls[0]["kwargs"] = {"dtype": {"$dtype": "float32"}}  # with a float it is ordinary division
    program, _ = build_graph(_hand_written(calls, "o"), torch.device("cpu"))
    assert program(torch.ones(2, 2))[0].shape == (2, 2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "uint8", "int8", "int16"])
def test_a_graph_that_names_a_dtype_off_the_list_is_refused_with_a_hint(dtype: str) -> None:
    """Deny by default: half, byte and short types are other kernels' code paths (an upsample's
    uint8 path read 2**63 bytes before its input) that no track's model needs."""
    doc = _one_call("aten._to_copy.default", ["@x"], {"dtype": {"$dtype": dtype}})
    with pytest.raises(BenchError) as info:
        build_graph(doc, torch.device("cpu"))
    assert info.value.code == ErrorCode.NOT_CAPTURABLE and f"dtype {dtype}" in info.value.message
    assert "float32" in (info.value.hint or "")


def test_a_model_that_computes_in_half_is_refused_at_capture_and_float_models_pass() -> None:
    class Half(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.lin(x.half().float())
            return out

    docs, _ = capture_docs(Half(), [8])
    with pytest.raises(BenchError, match="dtype float16"):
        build_graph(docs["train"], torch.device("cpu"))
    for dtype in ("float32", "float64", "int32", "int64", "bool"):
        build_graph(_one_call("aten._to_copy.default", ["@x"], {"dtype": {"$dtype": dtype}}), torch.device("cpu"))


TWO = ("two", "aten.sum.default", ["@x"], {})  # a 0-dim tensor, whose value aten would read as a number


@pytest.mark.parametrize(("calls", "why"), [
    ([TWO, ("y", "aten.view.default", ["@x", ["@two", -1]], {})], "'shape' is not a List[int]"),  # a size
    ([TWO, ("y", "aten.mul.Scalar", ["@x", "@two"], {})], "'other' is not a number"),
    ([TWO, ("y", "aten.select.int", ["@x", 0, "@two"], {})], "'index' is not a int"),  # an index
    ([TWO, ("y", "aten.scaled_dot_product_attention.default", ["@x", "@x", "@x"], {"scale": "@two"})], "'scale' is not a Optional[float]"),
    ([TWO, ("y", "operator.add", ["@two", 1], {})], "sizes and numbers"),  # size arithmetic on a tensor
    ([("y", "operator.getitem", ["@x", 0], {})], "several results"),  # getitem of a tensor, not of an op's results
])
def test_a_tensor_where_a_number_goes_is_refused(calls: list[Any], why: str) -> None:
    """Deny by default: where the schema takes a size, dim, index or scalar, a node must be a size
    (``sym_size``, ``numel`` and arithmetic on them); aten would read a tensor's value there, a
    number that depends on the data (what ``_local_scalar_dense`` gives, on DENIED_OPS)."""
    assert why in _refused(graph_of(*calls))


def test_sizes_and_arithmetic_on_them_fill_sizes() -> None:
    """What export writes for a dynamic batch: ``sym_size`` of the input, arithmetic, a view."""
    doc = graph_of(("b", "aten.sym_size.int", ["@x", 0], {}), ("n", "operator.mul", ["@b", 2], {}),
                 ("y", "aten.view.default", ["@x", ["@n", -1]], {}))
    program, _ = build_graph(doc, torch.device("cpu"))
    assert program(torch.zeros(4, 6))[0].shape == (8, 3)
