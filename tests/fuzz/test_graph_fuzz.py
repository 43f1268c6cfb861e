"""A property-based fuzzer of the capture boundary (issue 25.2): hypothesis mutates the captured
graphs of real models (ops, arguments, keyword names, literal values, sizes, dtypes, node
references) as a hostile capture child could write them, and checks that

- the parent's ``build_graph`` either refuses the graph with ``not_capturable`` or builds it,
  never raising anything else (it runs no op);
- every graph it builds runs in a trusted child (a plain subprocess here, with a memory limit
  and a deadline) without killing it, hanging or exhausting memory: an op may raise (the
  trainer then ends the job ``training_error``), but the process lives.

The budget is fixed (``EXAMPLES`` graphs, derandomised), so CI is reproducible.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from bench.catalog import get_card
from bench.errors import BenchError, ErrorCode
from bench.graph import build_graph
from bench.registry import load_track
from tests.capture_helpers import capture_docs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 300
# Ops a hostile graph would reach for first: views and storage, in-place and uninitialised
# memory, layout queries, indexing, modes, integer division, randomness, and ordinary ones.
OPS = [
    "aten._reshape_alias.default", "aten.as_strided.default", "aten.batch_norm.default", "aten.empty.memory_format",
    "aten.empty_like.default", "aten.new_empty.default", "aten.storage_offset.default", "aten.stride.int",
    "aten.index_select.default", "aten.gather.default", "aten.index.Tensor", "aten.slice.Tensor",
    "aten.select.int", "aten.expand.default", "aten.narrow.default", "aten.unfold.default",
    "aten.grid_sampler_2d.default", "aten.div.Tensor_mode", "aten.remainder.Tensor", "aten.fmod.Tensor",
    "aten.bernoulli.default", "aten.add.Tensor", "aten.mul.Tensor", "aten.sum.dim_IntList",
    "aten.mean.dim", "aten.cumsum.default", "aten.roll.default", "aten.repeat.default",
    "aten.full.default", "aten.zeros_like.default", "aten.scalar_tensor.default", "aten.sym_size.int",
    "aten.alias.default", "aten.unsafe_split.Tensor", "aten.linear.default", "aten.addmm.default",
    "aten.view.default", "aten.permute.default", "aten.transpose.int", "aten.cat.default",
    "operator.pow", "operator.mul", "operator.getitem", "builtins.eval", "aten.add_.Tensor",
]
LITERALS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1), st.sampled_from([0, 1, -1, 2**31, -(2**63), 10**12]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=80), st.lists(st.integers(min_value=-(2**40), max_value=2**40), max_size=6),
    st.sampled_from([{"$dtype": d} for d in ("int64", "float64", "complex128", "bool", "uint8", "nope")]),
    st.sampled_from([{"$float": "nan"}, {"$float": "inf"}, {"$tuple": [1, 2]}, {"$pickle": "x"}]),
)
RUNNER = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
import torch
from bench.graph import build_graph
torch.set_num_threads(1)
docs = json.load(open(sys.argv[1]))
for index, (doc, shape) in enumerate(docs):
    print(index, flush=True)
    program, _ = build_graph(doc, torch.device("cpu"))
    names = [n for n in doc["nodes"] if n["op"] == "placeholder"]
    inputs = []
    for entry in doc["inputs"]:
        if entry["kind"] == "user":
            inputs.append(torch.randn(4, *shape))
        else:
            inputs.append(torch.randn(entry["shape"]) if "shape" in entry else torch.randn(8))
    try:
        program(*inputs)
    except Exception:
        pass  # the trainer ends such a job training_error; the process must live
print("done", flush=True)
"""


def _bases() -> list[tuple[dict[str, Any], list[int]]]:
    """Train- and eval-mode graphs of a few real models, with each parameter's shape noted."""
    models: list[tuple[nn.Module, list[int]]] = []
    for name in ("smoke", "tabular", "correlated_tokens"):
        track = load_track(name)
        torch.manual_seed(0)
        models.append((track.build_baseline(track.spec), list(track.spec["input_shape"])))
        namespace: dict[str, Any] = {}
        exec(get_card(name)["example_idea"], namespace)  # noqa: S102 - our own example file
        spec = {**track.spec, "hparams": {k: v[0] for k, v in namespace.get("HPARAMS", {}).items()}}
        models.append((namespace["build_model"](spec), list(track.spec["input_shape"])))
    models.append((nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1)), [8]))
    bases = []
    for model, shape in models:
        docs, tensors = capture_docs(model, shape)
        for doc in docs.values():
            for entry in doc["inputs"]:
                if entry["kind"] != "user":
                    entry["shape"] = list(tensors[entry["target"]].shape)
            bases.append((doc, shape))
    return bases


BASES = _bases()


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], list[int]]:
    base, shape = draw(st.sampled_from(BASES))
    doc = copy.deepcopy(base)
    calls = [n for n in doc["nodes"] if n["op"] == "call_function"]
    names = [n["name"] for n in doc["nodes"] if n["op"] != "output"]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        node = draw(st.sampled_from(calls))
        kind = draw(st.sampled_from(["op", "arg", "ref", "kwarg", "drop", "append"]))
        if kind == "op":
            node["target"] = draw(st.sampled_from(OPS))
        elif kind == "arg" and node["args"]:
            node["args"][draw(st.integers(min_value=0, max_value=len(node["args"]) - 1))] = draw(LITERALS)
        elif kind == "ref" and node["args"]:
            node["args"][draw(st.integers(min_value=0, max_value=len(node["args"]) - 1))] = {
                "$node": draw(st.sampled_from(names))}
        elif kind == "kwarg":
            key = draw(st.one_of(st.sampled_from(["alpha", "dim", "dtype", "out", "generator", "memory_format",
                                                  "rounding_mode", "alpha=1)\nimport os\n#"]), st.text(max_size=20)))
            node["kwargs"][key] = draw(LITERALS)
        elif kind == "drop" and node["args"]:
            node["args"].pop()
        else:
            node["args"].append(draw(LITERALS))
    return json.loads(json.dumps(doc)), shape


@pytest.mark.slow
def test_mutated_graphs_are_refused_or_run_without_harm(tmp_path: Path) -> None:
    built: list[tuple[dict[str, Any], list[int]]] = []

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated())
    def parent_side(case: tuple[dict[str, Any], list[int]]) -> None:
        doc, shape = case
        try:
            build_graph(doc, torch.device("cpu"))
        except BenchError as exc:
            assert exc.code is ErrorCode.NOT_CAPTURABLE, exc.to_dict()
            return
        built.append((doc, shape))

    parent_side()
    assert len(built) >= 20, f"only {len(built)} of {EXAMPLES} mutated graphs built: the fuzzer tests little"
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(built))
    done = subprocess.run([sys.executable, "-c", RUNNER, str(cases)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    lines = done.stdout.split()
    assert done.returncode == 0 and lines[-1:] == ["done"], (
        f"the trusted side died (rc {done.returncode}) on graph {lines[-1] if lines else '?'}: "
        f"{json.dumps(built[int(lines[-1])][0])[:3000] if lines and lines[-1].isdigit() else ''}\n{done.stderr[-2000:]}")
    print(f"{len(built)} of {EXAMPLES} mutated graphs built and ran without harm")
