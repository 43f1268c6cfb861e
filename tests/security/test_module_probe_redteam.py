"""Red-team tests of the norm_ratio module probe (bench.probes, CapturedModel.submodule_io).

The capture side is the attacker's: it writes the graph JSON, node "module" labels included.
Tests whose docstring starts with "Was a HOLE" assert the secure behaviour and failed on the
commit they were written against (7ee9aef); they pass since the fix. Tests marked PIN fix
today's behaviour (a limitation that is accepted or not exploitable). Everything here calls rebuild / check_applies / measure /
ArmRunner methods directly: no judge() job runs.
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from torch import fx, nn

from bench.contract import check_probe
from bench.errors import BenchError, ErrorCode
from bench.graph import build_graph, rebuild
from bench.probes import check_applies, measure
from tests.capture_helpers import capture_docs, through_capture
from tests.mixers import NORM, Rotate, Scale

CPU = torch.device("cpu")


# -- small models ------------------------------------------------------------------------
class Attention(nn.Module):
    """A real token mixer over (B, T, 4): single-head self-attention (not an isometry)."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.q(z) @ self.k(z).transpose(1, 2), -1)
        return weights @ self.v(z)


class ComplexExit(Attention):
    """"mix" = attention, but its result leaves as a complex tensor; the float it also gives
    is its input (the residual), so the probe reads ||z|| / ||z|| = 1."""

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        m = super().forward(z)
        return z.clone(), torch.complex(m, torch.zeros_like(m))


class ComplexExitModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.value, self.mix, self.head = nn.Linear(4, 4), ComplexExit(), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r, c = self.mix(self.value(x))
        return self.head(r + torch.real(c)).sum(1)  # an ordinary residual attention block


class ComplexEntry(nn.Module):
    """"mix" takes a second activation, smuggled in as a complex tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.tensor(1.0))

    def forward(self, z: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.gain * z + torch.real(c)


class ComplexEntryModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.value, self.other, self.mix, self.head = nn.Linear(4, 4), Attention(), ComplexEntry(), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.value(x)
        h = self.other(z)
        return self.head(self.mix(z, torch.complex(h, torch.zeros_like(h)))).sum(1)


class TupleExit(Attention):
    """"mix" = attention; its result leaves inside a list (aten.split), not as a tensor."""

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, Any]:  # type: ignore[override]
        m = super().forward(z)
        return z.clone(), torch.cat([z, m], -1).split(4, -1)


class TupleExitModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.value, self.mix, self.head = nn.Linear(4, 4), TupleExit(), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r, (_, m) = self.mix(self.value(x))
        return self.head(r + m).sum(1)


class ShapeOnlyJoin(nn.Module):
    """An isometric "mix" whose only use is zeros_like: no value of it reaches the output."""

    def __init__(self) -> None:
        super().__init__()
        self.mix, self.real = Rotate(), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.real(x.flatten(1)) + torch.zeros_like(self.mix(x)).sum((1, 2)).unsqueeze(1)


class TimesZeroJoin(ShapeOnlyJoin):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.real(x.flatten(1)) + 0.0 * self.mix(x).sum((1, 2)).unsqueeze(1)


class OneDimensional(nn.Module):
    """"mix" takes and gives (B,) tensors: measure's flatten(1) raises IndexError."""

    def __init__(self) -> None:
        super().__init__()
        self.mix, self.real = Scale(2.0), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.real(x.flatten(1)) + self.mix(x.sum((1, 2))).unsqueeze(1)


class Swap(Scale):
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.gain * z.transpose(0, 1)


class BatchNotFirst(nn.Module):
    """"mix" gives (T, B, d) for a (B, T, d) input: at the check's batch of 2 (= T) the
    per-sample norms broadcast; at the probe batch they do not (RuntimeError)."""

    def __init__(self) -> None:
        super().__init__()
        self.mix, self.real = Swap(2.0), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.real(self.mix(x).transpose(0, 1).flatten(1))


class Loud(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.lin(z) * 1e10


class ZeroInput(nn.Module):
    """"mix" is entered by an all-zero activation (0 * x): ||in|| is 0, so the ratio is not
    finite; the model itself stays finite and trains."""

    def __init__(self) -> None:
        super().__init__()
        self.mix, self.real = Loud(), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.real(x.flatten(1)) + 1e-10 * self.mix(0.0 * x).sum((1, 2)).unsqueeze(1)


class Wide(nn.Module):
    """value (4 -> W) -> mix (a gain) -> head, over (B, 2, 4); output (B, 1)."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.value, self.mix, self.head = nn.Linear(4, width), Scale(), nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mix(self.value(x))).sum(1)


def _chain(doc: dict[str, Any], n: int) -> dict[str, Any]:
    """``doc`` with ``n`` aten.neg nodes (labelled "value") between the value layer and mix: a
    graph the attacker writes by hand; n even, so the model computes the same function."""
    doc = copy.deepcopy(doc)
    nodes = doc["nodes"]
    at = next(k for k, d in enumerate(nodes) if d.get("name") == "linear")
    prev, new = "linear", []
    for j in range(n):
        new.append({"name": f"neg_chain_{j}", "op": "call_function", "target": "aten.neg.default",
                    "args": [{"$node": prev}], "kwargs": {}, "module": "value"})
        prev = f"neg_chain_{j}"
    nodes[at + 1: at + 1] = new
    mul = nodes[at + 1 + n]
    assert mul["target"] == "aten.mul.Tensor" and mul.get("module") == "mix"
    mul["args"] = [mul["args"][0], {"$node": prev}]
    return doc


def _refused_by_check(model: nn.Module, x: torch.Tensor) -> str | None:
    """check_applies' ValueError message, or None when it lets the part through."""
    try:
        check_applies(NORM, model, x[:7])  # as bench.child's check op does
    except ValueError as exc:
        return str(exc)
    return None


# -- 1. parts that pass the probe's checks without being what the probe claims -----------------
@pytest.mark.parametrize("build", [ComplexExitModel, ComplexEntryModel], ids=["complex-out", "complex-in"])
def test_an_activation_of_a_non_float_dtype_counts_as_one_entering_or_leaving_the_part(build: type) -> None:
    """Was a HOLE (fixed in the commit after 7ee9aef). submodule_io keeps only floating-point tensors among the values that
    enter and leave the labelled part (``tensors()``: ``t.is_floating_point()``), so a second
    activation that enters or leaves as a *complex* tensor is not counted, and "takes or gives
    more than one activation" (docs/idea-contract.md) is not refused. No graph tampering is
    needed: a plain submission through torch.export does it. With ``ComplexExitModel`` the
    part is a real (trained) attention mixer whose result leaves as complex while its input
    leaves as the float: the probe reads exactly 1.0 ("an isometry"). End to end on the
    sequence track (the baseline's own architecture, the attention returned this way) the
    report said idea_values [1.0, 1.0] vs baseline [0.97, 0.85], confirmed, self_measured false.
    Fix: count every value that enters or leaves (any dtype, tensors or not) and refuse unless
    exactly one each, which must then be floating point."""
    torch.manual_seed(0)
    model = through_capture(build(), (8, 4))
    x = torch.randn(16, 8, 4)
    why = _refused_by_check(model, x)
    measured = measure(NORM, model, x) if why is None else None
    assert why is not None, f"a part with two activations passed the check; norm_ratio measured {measured}"


def test_an_activation_leaving_inside_a_list_valued_node_counts_as_leaving() -> None:
    """Was a HOLE (fixed in the commit after 7ee9aef). The same filter drops non-tensor values: an attacker-written graph
    whose part ends in ``aten.split`` (a list value) with the ``getitem`` nodes labelled outside
    the part lets the attention's result leave uncounted; the probe reads 1.0 (the residual).
    Fix: as above (a list- or tuple-valued node leaving or entering the part is a refusal)."""
    torch.manual_seed(0)
    docs, tensors = capture_docs(TupleExitModel(), (8, 4))
    for doc in docs.values():
        splits = {n["name"] for n in doc["nodes"] if n.get("target") == "aten.split.Tensor"}
        for node in doc["nodes"]:
            if node.get("target") == "operator.getitem" and node["args"][0].get("$node") in splits:
                node.pop("module", None)  # the attacker's label: "made by the model's own forward"
    model = rebuild(docs, tensors, CPU)
    x = torch.randn(16, 8, 4)
    why = _refused_by_check(model, x)
    measured = measure(NORM, model, x) if why is None else None
    assert why is not None, f"an attention whose output leaves in a list passed; norm_ratio measured {measured}"


def test_a_part_whose_output_feeds_only_a_shape_op_does_not_reach_the_output() -> None:
    """Was a HOLE (fixed in the commit after 7ee9aef). docs/security.md: a part "unused by the model's output (an isometry
    on a dead branch)" is refused. The check is structural (``needed`` follows every fx edge),
    so ``zeros_like(mix(x))`` added to the output makes a dead isometric branch "reach" it:
    check_applies passes and the probe reads 1.0, though no value of mix affects the output
    (and mix never trains: its gradient is zero). Fix: do not propagate "needed" through ops
    whose result ignores the input's values (``*_like``, ``new_*``, ``sym_size``...), or better
    require a nonzero gradient of the model's output with respect to the leaving activation
    (which also catches ``0 * mix(x)``, see the PIN below)."""
    torch.manual_seed(0)
    model = through_capture(ShapeOnlyJoin(), (2, 4))
    x = torch.randn(16, 2, 4)
    why = _refused_by_check(model, x)
    measured = measure(NORM, model, x) if why is None else None
    assert why is not None and "does not depend" in why, f"a dead branch passed; norm_ratio {measured}"


def test_a_dead_branch_joined_by_a_zero_multiple_is_refused() -> None:
    """Was a PIN of a limitation: ``out + 0 * mix(x)`` uses the branch structurally (the probe
    read 1.0, mix's parameter got a zero gradient). The check's gradient test refuses it now."""
    torch.manual_seed(0)
    model = through_capture(TimesZeroJoin(), (2, 4))
    x = torch.randn(16, 2, 4)
    why = _refused_by_check(model, x)  # now refused: the output has no gradient with respect to it
    assert why is not None and "does not depend" in why


class RescaledAttention(Attention):
    """Attention whose output is rescaled to its input's norm, per sample: a real trained mixer
    that is not an isometry (it does not preserve distances), with norm ratio 1 exactly."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        m = super().forward(z)
        return m * ((z * z).sum((1, 2), keepdim=True) / (m * m).sum((1, 2), keepdim=True)).sqrt()


class RescaledModel(nn.Module):
    def __init__(self, rescale: bool = True) -> None:
        super().__init__()
        self.value, self.mix, self.head = nn.Linear(4, 4), RescaledAttention() if rescale else Attention(), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mix(self.value(x))).sum(1)


def test_pin_norm_ratio_does_not_distinguish_an_isometry_from_a_norm_restoring_mixer() -> None:
    """PIN (passes today): a limitation of the quantity, not of the code. ``norm_ratio`` is 1 for
    any map followed by a per-sample rescale to the input's norm (here attention), so
    "ratio 1.0" confirms "norm-preserving on the probe batch", not "an isometry" (the seed
    003 prediction's word). docs/idea-contract.md says "1 for an isometry" but not that 1
    can come from anything else. If the bench wants to certify isometries: measure distance
    ratios ||f(a) - f(b)|| / ||a - b|| on pairs (or Jacobian-vector norms on random
    directions) of the part, rerunning only the part with a substituted entering value."""
    torch.manual_seed(0)
    x = torch.randn(16, 8, 4)
    fake = through_capture(RescaledModel(), (8, 4))
    assert _refused_by_check(fake, x) is None
    assert measure(NORM, fake, x) == pytest.approx(1.0, abs=1e-5)
    torch.manual_seed(0)
    plain = through_capture(RescaledModel(rescale=False), (8, 4))
    assert abs(measure(NORM, plain, x) - 1.0) > 0.05  # the same attention without the rescale


# -- 2. the trusted side: errors, memory, time --------------------------------------------------
def _broken_eval_model() -> Any:
    """Wide(): the train graph is the capture's, the eval graph sums over a dimension that does
    not exist (an attacker-written graph): it fails whenever it runs."""
    docs, tensors = capture_docs(Wide(), (2, 4))
    total = next(n for n in docs["eval"]["nodes"] if n.get("target") == "aten.sum.dim_IntList")
    total["args"][1] = [7]
    return rebuild(docs, tensors, CPU)


def test_the_check_op_reports_an_eval_graph_that_fails_as_the_ideas_error_not_internal() -> None:
    """Was a HOLE (fixed in the commit after 7ee9aef). ArmRunner.check runs the train graph (check_output_shape), then
    check_applies runs the *eval* graph and catches only ValueError. An eval graph that raises
    (IndexError / RuntimeError from a shape error, an allocation failure) escapes ``check``;
    bench.child.main then answers ``internal`` ("This is a bug in ideabench, not in the idea;
    retry later"). Without the probe the same graph fails in training as training_error.
    Fix: in ``check``, map any other exception of check_applies with ``classify(exc, ...,
    ErrorCode.MECHANISM_ERROR or TRAINING_ERROR)``, as the train path does."""
    from bench.child import ArmRunner

    model = _broken_eval_model()
    runner = ArmRunner()
    runner.spec, runner.init_seeds = {"output_shape": [1]}, [0]
    runner.data["d"] = {"x_train": torch.randn(8, 2, 4), "x_val": torch.randn(8, 2, 4), "x_test": torch.randn(8, 2, 4)}
    runner._build = lambda hparams, init_seed: model  # type: ignore[method-assign]
    try:
        runner.check({"data_dir": "d", "configs": [{}], "batch_size": 4, "mechanism_probe": NORM})
    except BenchError as exc:
        assert exc.code is not ErrorCode.INTERNAL, exc.message
    except Exception as exc:  # noqa: BLE001 - what bench.child.main turns into "internal"
        pytest.fail(f"{type(exc).__name__} escapes ArmRunner.check (the child reports it as internal): {exc}")
    else:
        pytest.fail("a model whose eval graph cannot run passed the check")


@pytest.mark.parametrize("build", [OneDimensional, BatchNotFirst], ids=["1-d", "batch-not-first"])
def test_what_check_applies_lets_through_can_be_measured(build: type) -> None:
    """Was a HOLE (fixed in the commit after 7ee9aef). child.check promises "a probe the arm cannot have measured fails now,
    not after training", but check_applies only runs submodule_io, never the ratio: a part
    whose activations are 1-d (``flatten(1)`` -> IndexError) or whose batch is not the first
    dimension (per-sample norms of different lengths -> RuntimeError at the probe batch of 256;
    at the check's 2 samples they broadcast) passes, trains, and fails in the ``probe`` op
    after every run. Fix: in submodule_io, require both tensors to have >= 2 dims and
    ``in.shape[0] == out.shape[0] == x.shape[0]`` (and let check_applies compute the ratio)."""
    torch.manual_seed(0)
    model = through_capture(build(), (2, 4))
    x = torch.randn(16, 2, 4)
    if _refused_by_check(model, x) is not None:
        return  # refused before training: the secure behaviour
    try:
        value = measure(NORM, model, x)
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"check_applies passed, then measure raised {type(exc).__name__}: {exc}")
    assert math.isfinite(value)


def test_a_non_finite_norm_ratio_is_a_mechanism_error_not_a_crash_of_the_judge(tmp_path: Path) -> None:
    """Was a HOLE (fixed in the commit after 7ee9aef). A part entered by an all-zero activation had
    ||in|| clamped to 1e-30, and the ratio overflowed to inf while the model trained normally. The
    child's probe op returns it, bench.protocol.Job._probe_arm keeps it (unlike the idea's
    own measure path, it has no isfinite check), and build_report's mechanism_confirmed
    raises ValueError("idea mechanism values must be finite") after all training: judge()
    crashes and the worker stores internal "The judge failed unexpectedly (ValueError)".
    Fix: refuse non-finite probe values as mechanism_error in ArmRunner.probe or _probe_arm
    (as measure_arm does), and drop the clamp or refuse a zero-norm input."""
    from bench import wire, wire_names
    from bench.child import ArmRunner
    from bench.protocol import Job
    from bench.verdicts import mechanism_confirmed

    torch.manual_seed(0)
    model = through_capture(ZeroInput(), (2, 4))
    x = torch.randn(16, 2, 4)
    why = _refused_by_check(model, x)  # refused before training now; and after training too:
    assert why is not None and "norm 0" in why
    probe_path = tmp_path / "probe.npy"
    np.save(probe_path, x.numpy())
    for name in ("x_train", "y_train", "x_val", "x_test"):  # the seed's data, as the trainer reads it
        np.save(tmp_path / f"{name}.npy", x.numpy())
    runner = ArmRunner()
    runner._build = lambda hparams, init_seed: through_capture(ZeroInput(), (2, 4))  # type: ignore[method-assign]

    def request(cmd: wire.Command) -> wire.Reply:  # the child, behind its typed JSON boundary
        answer = runner.probe(wire_names.parse_command_line(cmd.encode())[1])
        return wire.parse_reply(cmd, json.loads(json.dumps({"ok": True, **answer})), "idea")

    job = SimpleNamespace(
        mechanism={"probe": NORM}, workdir=tmp_path, kept={"r0": [t.detach().numpy().copy() for t in model.tensors()]},
        seeds=lambda seed: SimpleNamespace(init=0), seed_data={0: SimpleNamespace(probe_path=probe_path, data_dir=tmp_path)},
        executor=SimpleNamespace(probe=lambda arm, cmd: list(request(cmd).values)),  # as SandboxExecutor.probe
    )
    record = SimpleNamespace(run_id="r0", cfg={"hparams": {}}, seed=0)
    try:
        values = Job._probe_arm(job, "idea", [record])  # type: ignore[arg-type]
    except BenchError as exc:
        assert exc.code is ErrorCode.MECHANISM_ERROR, exc.message
        return
    if all(math.isfinite(v) for v in values):
        return
    with pytest.raises(ValueError):  # what build_report then does with it
        mechanism_confirmed({"kind": "close_to", "target": 1.0, "rtol": 0.05}, values, [0.9])
    pytest.fail(f"the probe gave {values} to the report, where mechanism_confirmed raises ValueError")


def _retained_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch fx.Interpreter to record, after each node, the bytes of tensors its env holds."""
    peaks: list[int] = [0]
    original = fx.Interpreter.run_node

    def run_node(self: fx.Interpreter, node: fx.Node) -> Any:
        result = original(self, node)
        storages = {}
        for value in list(self.env.values()) + [result]:
            if isinstance(value, torch.Tensor):
                storage = value.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        peaks[0] = max(peaks[0], sum(storages.values()))
        return result

    monkeypatch.setattr(fx.Interpreter, "run_node", run_node)
    return peaks


def test_measuring_a_long_graph_keeps_no_more_than_a_few_activations_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """Was a HOLE (fixed in the commit after 7ee9aef). submodule_io runs the eval graph with
    ``fx.Interpreter(module, garbage_collect_values=False)``: every intermediate of the graph
    stays alive, where the model's own forward (fx codegen frees each value after its last
    use) holds two. A hand-written chain of N cheap ops multiplies the probe's memory by ~N:
    measured here, 300 nodes -> 300 activations; measured in a scratch run, 2,000 nodes of
    1 MiB (probe batch 256) -> +2.0 GB RSS for measure vs +3 MB for the forward, so 20,000
    nodes (MAX_NODES) of a model whose forward needs a few MB ask the trusted trainer for
    tens of GB. The check at 2 samples passes; it fails after training at the probe batch; on
    CUDA nothing but the device's memory bounds it (the cgroup limit covers host memory).
    Fix: run with garbage collection and keep only the entering/leaving values (an
    Interpreter subclass that copies env[n] for those nodes in run_node)."""
    torch.manual_seed(0)
    docs, tensors = capture_docs(Wide(256), (2, 4))
    model = rebuild({"train": docs["train"], "eval": _chain(docs["eval"], 300)}, tensors, CPU)
    x = torch.randn(16, 2, 4)
    activation = 16 * 2 * 256 * 4  # bytes of one (16, 2, 256) float32 activation
    peaks = _retained_bytes(monkeypatch)
    measure(NORM, model, x)
    assert peaks[0] <= 16 * activation, (
        f"the probe held {peaks[0] / activation:.0f} activations alive at once (a forward holds ~2)")


def test_pin_the_graph_walks_of_submodule_io_are_linear_in_the_graph() -> None:
    """PIN (passes today): no quadratic walk. A 19,980-node chain (MAX_NODES is 20,000)
    rebuilds in ~1 s and check_applies + measure take ~0.3 s each on a 2-CPU machine."""
    docs, tensors = capture_docs(Wide(), (2, 4))
    model = rebuild({"train": docs["train"], "eval": _chain(docs["eval"], 19_980)}, tensors, CPU)
    x = torch.randn(64, 2, 4)
    started = time.perf_counter()
    check_applies(NORM, model, x[:2])
    assert measure(NORM, model, x) == pytest.approx(0.5, abs=1e-6)
    assert time.perf_counter() - started < 10


# -- 3./4. what the probe names, and the label's validation ------------------------------------
@pytest.mark.parametrize("label", [
    "mix\n", "mix.", ".mix", "mi x", "mix/0", "mix\u0663", "\uff4d\uff49\uff58", "mix..a",
    "a" * 65, ".".join(["m"] * 17), "", {"$node": "x"}, None,
])
def test_pin_module_labels_and_names_off_the_path_grammar_are_refused(label: Any) -> None:
    """PIN (passes today): MODULE_PATH is fullmatched (no trailing-newline ``$`` gap, ASCII
    classes only), on the graph's labels (None / "" mean "no label": allowed only as ""
    or absent) and on the probe's name."""
    docs, _ = capture_docs(Wide(), (2, 4))
    doc = copy.deepcopy(docs["eval"])
    next(n for n in doc["nodes"] if n["op"] == "call_function")["module"] = label
    if label != "":
        with pytest.raises(BenchError, match="module label"):
            build_graph(doc, CPU)
    with pytest.raises(BenchError):
        check_probe({"kind": "norm_ratio", "module": label})


def test_pin_a_name_matches_a_whole_path_or_its_whole_last_part() -> None:
    """PIN (passes today): "mix" finds "blocks.0.mix" (its last part) and "mix.inner"'s parent
    "mix", never "premix", "mixer" or "mix_2"; "0.mix" (two trailing parts) finds nothing."""
    docs, tensors = capture_docs(Wide(), (2, 4))
    x = torch.randn(4, 2, 4)
    for label, name, found in [("premix", "mix", False), ("mixer", "mix", False), ("mix_2", "mix", False),
                               ("blocks.0.mix", "mix", True), ("blocks.0.mix", "0.mix", False),
                               ("blocks.0.mix", "blocks.0", True), ("mix.inner", "mix", True)]:
        tampered = copy.deepcopy(docs)
        for doc in tampered.values():
            for node in doc["nodes"]:
                if node.get("module") == "mix":
                    node["module"] = label
        model = rebuild(tampered, tensors, CPU)
        probe = check_probe({"kind": "norm_ratio", "module": name})
        if found:
            assert measure(probe, model, x) == pytest.approx(0.5, abs=1e-6), (label, name)
        else:
            with pytest.raises(ValueError, match="no submodule named"):
                check_applies(probe, model, x)
