"""The op allowlist as a list (issue 25.2, ``bench.oplist``): every op on it under a reason,
every op on it also through the schema rules, ordinary models' graphs all on it, and ops the
rules alone admitted refused because the list does not name them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from bench import graph
from bench.errors import BenchError
from bench.oplist import ALLOWED_OPS, KIND, REASONS
from tests.capture_helpers import capture_docs, through_capture

ROOT = Path(__file__).resolve().parents[2]


def test_every_kind_has_its_reason_and_every_op_one_kind() -> None:
    assert set(ALLOWED_OPS) == set(REASONS)
    assert all(len(reason) > 30 for reason in REASONS.values())
    assert sum(len(ops) for ops in ALLOWED_OPS.values()) == len(KIND)  # no op under two kinds
    assert all(name.startswith("aten.") and name.count(".") == 2 for name in KIND)


def test_every_listed_op_also_passes_the_schema_rules() -> None:
    """The list is inside the rules: each op exists in this torch, is core ATen, decomposed
    by it, a composite or on EXTRA_OPS, is not mutable and not what ``_impure`` finds."""
    for name in sorted(KIND):
        op = graph.resolve_op(name)
        assert isinstance(op, torch._ops.OpOverload), name
        assert not op._schema.is_mutable, name
        assert graph._impure(op) == "", name


# Ops the schema rules alone admitted (895 overloads in all): each refused now because the list
# does not name it, and each would pass if it did (so the list, not another rule, refuses it).
ADMITTED_BY_THE_RULES_ALONE = [
    "aten._cufft_set_plan_cache_max_size.default",  # changes the process's state
    "aten.sym_is_contiguous.default",  # a layout query: a row alone vs a batch
    "aten._unsafe_index.Tensor",  # no bounds check, by name
    "aten.unsafe_split.Tensor",  # views its schema does not declare
    "aten.convolution_backward.default",  # gradients inside a forward
    "aten.nonzero.default",  # a data-dependent size
    "aten._sobol_engine_draw.default",
    "aten.to.device",
    "aten.is_nonzero.default",
    "aten._add_batch_dim.default",
]


@pytest.mark.parametrize("name", ADMITTED_BY_THE_RULES_ALONE)
def test_an_op_the_rules_admit_but_the_list_does_not_name_is_refused(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BenchError, match="not on ideabench's op allowlist"):
        graph.resolve_op(name)
    monkeypatch.setattr(graph, "KIND", {**KIND, name: "pointwise"})
    assert isinstance(graph.resolve_op(name), torch._ops.OpOverload)


class Apply(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor], *modules: nn.Module) -> None:
        super().__init__()
        self.fn, self.parts = fn, nn.ModuleList(modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, *self.parts)


def _everyday() -> dict[str, tuple[nn.Module, list[int]]]:
    """Ordinary models an agent writes: every layer family the list was made for."""
    f = torch.nn.functional
    return {
        "mlp": (nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Dropout(0.1), nn.BatchNorm1d(16),
                              nn.SiLU(), nn.Linear(16, 16), nn.Tanh(), nn.Softplus(), nn.Mish(), nn.Hardswish(),
                              nn.RMSNorm(16), nn.PReLU(), nn.Linear(16, 1)), [8]),
        "conv": (nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(4, 4, 3, padding="same", groups=2), nn.GroupNorm(2, 4), nn.AvgPool2d(2),
                               nn.Upsample(scale_factor=2, mode="bilinear"), nn.ReflectionPad2d(1),
                               nn.PixelShuffle(2), nn.ConvTranspose2d(1, 2, 2, stride=2), nn.AdaptiveAvgPool2d(3),
                               nn.Flatten(), nn.Linear(18, 10)), [1, 8, 8]),
        "recurrent": (Apply(lambda x, gru, lstm, lin: lin(gru(x)[0][:, -1] + lstm(x)[0][:, -1]),
                            nn.GRU(4, 8, batch_first=True), nn.LSTM(4, 8, batch_first=True), nn.Linear(8, 1)), [6, 4]),
        "attention": (Apply(lambda x, mha, enc, lin: lin(mha(x, x, x)[0] + enc(x)).mean(1),
                            nn.MultiheadAttention(8, 2, batch_first=True),
                            nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), nn.Linear(8, 1)), [6, 8]),
        "tensor_ops": (Apply(lambda x, lin: lin(
            torch.einsum("bij,bjk->bik", x, x.transpose(1, 2) @ x) / 10 + torch.cdist(x, x) @ x
            + torch.cat([x, x], -1)[..., :8] + torch.stack([x, x]).mean(0) + x.roll(1, -1) + torch.sort(x, -1).values
            + torch.gather(x, 1, torch.zeros(x.shape[0], 6, 8, dtype=torch.long)) + x.masked_fill(x > 1, 0.0)
            + torch.tril(x[:, :, :6]) @ x[:, :6, :] + torch.softmax(x, -1) + x.cumsum(-1) + f.normalize(x, dim=-1)
            + torch.where(x > 0, x, 0.5 * x) + x.clamp(-1, 1).abs().sqrt() + torch.fft.irfft(torch.fft.rfft(x), n=8)
            + 0.1 * torch.randn_like(x)
        ).mean(1), nn.Linear(8, 1)), [6, 8]),
        "embedding": (Apply(lambda x, emb, lin: lin(emb((x.abs() * 10).long().clamp(0, 9)).mean(1)),
                            nn.Embedding(10, 8), nn.Linear(8, 1)), [5]),
    }


@pytest.mark.parametrize("label", list(_everyday()))
def test_ordinary_models_capture_to_listed_ops_only(label: str) -> None:
    model, shape = _everyday()[label]
    torch.manual_seed(0)
    docs, _ = capture_docs(model, shape)
    called = {node["target"] for doc in docs.values() for node in doc["nodes"] if node["op"] == "call_function"}
    aten = {name for name in called if name.startswith("aten.")}
    assert aten and aten <= set(KIND), sorted(aten - set(KIND))
    model.eval()
    rebuilt = through_capture(model, shape)  # and the trusted side rebuilds and runs them
    rebuilt.eval()
    x = torch.randn(3, *shape)
    assert rebuilt(x).shape == model(x).shape


# The red team of the list (session 12) found private kernels that trust what their public
# wrappers check. Those no model captures to are off the list; the others run behind a check.
@pytest.mark.parametrize("name", [
    "aten._fft_c2c.default",  # a dim out of range corrupted the heap (free(): invalid pointer)
    "aten._fft_r2c.default",
    "aten._fft_c2r.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",  # q's batch past k's: a neighbour row
    "aten._embedding_bag.default",  # negative offsets read the heap before the indices
    "aten.embedding_bag.default",
    "aten.embedding_bag.padding_idx",
])
def test_private_kernels_the_red_team_broke_are_off_the_list(name: str) -> None:
    with pytest.raises(BenchError, match="allowlist"):
        graph.resolve_op(name)


def _node(name: str, target: str, *args: object, **kwargs: object) -> dict[str, object]:
    return {"name": name, "op": "call_function", "target": target, "args": list(args), "kwargs": kwargs}


def _doc(calls: list[dict[str, object]], out: str) -> dict[str, object]:
    """A hand-written graph of one user input ``x`` (as a hostile capture child writes one)."""
    return {"format": 1, "inputs": [{"kind": "user", "name": "x", "target": ""}],
            "outputs": [{"kind": "user", "target": ""}],
            "nodes": [{"name": "x", "op": "placeholder"}, *calls,
                      {"name": "output", "op": "output", "args": [{"$tuple": [{"$node": out}]}]}]}


def _n(name: str) -> dict[str, str]:
    return {"$node": name}


def test_a_batch_norm_whose_statistics_are_not_one_per_channel_is_refused_when_it_runs() -> None:
    """The red team's reproducer: running statistics longer than the channels, taken from a view
    of the input, made row i answer x_eval[i+1], alone and in a batch alike."""
    width = 4
    calls = [
        _node("s", "aten.sym_size.int", _n("x"), 0),
        _node("bd", "operator.mul", _n("s"), width),
        _node("c", "operator.add", _n("bd"), width),
        _node("rm", "aten.reshape.default", _n("x"), [-1]),
        _node("rv", "aten.new_ones.default", _n("x"), [_n("c")]),
        _node("inp", "aten.new_zeros.default", _n("x"), [1, _n("c")]),
        _node("bn", "aten._native_batch_norm_legit_no_training.default", _n("inp"), None, None, _n("rm"), _n("rv"),
              0.1, 0.0),
        _node("y", "operator.getitem", _n("bn"), 0),
        _node("nxt", "aten.slice.Tensor", _n("y"), 1, width, _n("c")),
        _node("n2", "aten.reshape.default", _n("nxt"), [_n("s"), width]),
        _node("o", "aten.neg.default", _n("n2")),
    ]
    program, _ = graph.build_graph(_doc(calls, "o"), torch.device("cpu"))
    x_eval = torch.arange(40, dtype=torch.float32).reshape(10, width)
    with pytest.raises(RuntimeError, match="one value per channel"):
        program(x_eval[3:4])
    honest = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 1))
    rebuilt = through_capture(honest, [8])
    rebuilt.train()(torch.randn(5, 8))  # a real batch norm, both modes, passes its check
    rebuilt.eval()(torch.randn(5, 8))


GUARDED_CASES = {
    # weight norm with one gain for 8 slices: the kernel wrote the other 7 past its end
    "weight_norm": ([_node("v", "aten.new_ones.default", _n("x"), [8, 1]),
                     _node("g", "aten.new_ones.default", _n("x"), [1]),
                     _node("w", "aten._weight_norm_interface.default", _n("v"), _n("g"), 0),
                     _node("o", "operator.getitem", _n("w"), 0)], "one gain per slice"),
    # INT64_MIN / -1: SIGFPE, through an overload, keyword arguments and avg_pool's divisor
    "divide_overload": ([_node("c", "aten.divide.Tensor_mode", _n("a"), _n("b"), rounding_mode="trunc")],
                        "integer tensors"),
    "keywords": ([_node("c", "aten.div.Tensor_mode", self=_n("a"), other=_n("b"), rounding_mode="trunc")],
                 "integer tensors"),
    "avg_pool": ([_node("r", "aten.reshape.default", _n("a"), [1, 1, 1, 1]),
                  _node("c", "aten.avg_pool2d.default", _n("r"), [1, 1], [1, 1], [0, 0], False, True, -1)],
                 "integer tensors"),
}
# Weight norm's gain as a view (second red team): expanded (stride 0) it was written past a buffer
# (a segfault), strided it gave heap bytes; now the kernel gets dense copies and answers exactly.
DENSE_CASES = {
    "expanded_gain": [_node("v", "aten.new_ones.default", _n("x"), [4096, 8]),
                      _node("g1", "aten.new_ones.default", _n("x"), [1]),
                      _node("g", "aten.expand.default", _n("g1"), [4096]),
                      _node("w", "aten._weight_norm_interface.default", _n("v"), _n("g"), 0),
                      _node("o", "operator.getitem", _n("w"), 1)],
    "strided_gain": [_node("v", "aten.new_ones.default", _n("x"), [4, 8]),
                     _node("g1", "aten.new_ones.default", _n("x"), [8, 2]),
                     _node("g", "aten.select.int", _n("g1"), 1, 0),
                     _node("w", "aten._weight_norm_interface.default", _n("v"), _n("g"), 1),
                     _node("o", "operator.getitem", _n("w"), 1)],
}
INT64 = [_node("a", "aten.scalar_tensor.default", -(2**63), dtype={"$dtype": "int64"}),
         _node("b", "aten.scalar_tensor.default", -1, dtype={"$dtype": "int64"})]
RUN_CASES = """
import json, sys, torch
from bench import graph
for label, doc in json.load(open(sys.argv[1])).items():
    program, _ = graph.build_graph(doc, torch.device("cpu"))
    try:
        out = program(torch.ones(2, 2))[0]
        print(json.dumps([label, "ran", sorted(set(out.flatten().tolist()))]), flush=True)
    except RuntimeError as exc:
        print(json.dumps([label, str(exc)]), flush=True)
"""


def test_private_kernels_run_behind_their_checks(tmp_path: Path) -> None:
    """Each would crash the trainer (a segfault, SIGFPE) if it ran unchecked: so they run in a
    child process here, and each must be refused with its check's message."""
    docs = {}
    for label, (calls, _) in GUARDED_CASES.items():
        head = [] if label == "weight_norm" else INT64
        last = "o" if label == "weight_norm" else "c"
        docs[label] = _doc([*head, *calls], last)
    docs.update({label: _doc(calls, "o") for label, calls in DENSE_CASES.items()})
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(docs))
    done = subprocess.run([sys.executable, "-c", RUN_CASES, str(cases)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    answers = {line[0]: line[1:] for line in map(json.loads, done.stdout.splitlines())}
    for label, (_, words) in GUARDED_CASES.items():
        assert words in answers[label][0], (label, answers[label])
    assert answers["expanded_gain"][0] == "ran"  # each row's norm, and nothing else
    assert answers["expanded_gain"][1] == pytest.approx([math.sqrt(8)])
    assert answers["strided_gain"] == ["ran", [2.0]]
