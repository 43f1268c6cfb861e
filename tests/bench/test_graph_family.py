"""The family of an idea is computed from its captured graph (issue 25.6): the trivial edits
the source family missed are one family; another architecture is another."""

from __future__ import annotations

import types

import torch

from bench.family import family_of, graph_family
from bench.graph import export_graph

BASE = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, n, width=32):
        super().__init__()
        self.a = nn.Linear(n, width)
        self.b = nn.Linear(n, width)
        self.out = nn.Linear(2 * width, 1)

    def forward(self, x):
        left = torch.tanh(self.a(x))
        right = torch.relu(self.b(x))
        return self.out(torch.cat([left, right], dim=-1))


def build_model(spec):
    return Net(spec["n_features"])
"""

TRIVIAL_EDITS = {
    "an import alias": BASE.replace("import torch\n", "import torch as T\ntorch = T\n", 1),
    "a no-op statement": BASE.replace("        left = torch.tanh", "        unused = x * 2\n        left = torch.tanh"),
    "reordered statements": BASE.replace(
        "        left = torch.tanh(self.a(x))\n        right = torch.relu(self.b(x))\n",
        "        right = torch.relu(self.b(x))\n        left = torch.tanh(self.a(x))\n"),
    "an added nn.Identity()": BASE.replace(
        "        self.out = nn.Linear(2 * width, 1)",
        "        self.out = nn.Sequential(nn.Identity(), nn.Linear(2 * width, 1), nn.Identity())"),
    "another width": BASE.replace("width=32", "width=48"),
    "a renamed class": BASE.replace("Net", "Model"),
}
OTHER_IDEAS = {
    "another activation": BASE.replace("torch.relu(self.b(x))", "torch.sigmoid(self.b(x))"),
    "another layer": BASE.replace("return self.out(torch.cat([left, right], dim=-1))",
                                  "return self.out(torch.cat([left, right * left], dim=-1))"),
}


def _family(code: str) -> str:
    module = types.ModuleType("idea")
    exec(compile(code, "idea.py", "exec"), module.__dict__)
    torch.manual_seed(0)
    doc, _ = export_graph(module.build_model({"n_features": 6}), torch.randn(4, 6))
    return graph_family(doc)


def test_trivial_edits_are_one_family_and_other_ideas_are_not() -> None:
    base = _family(BASE)
    assert base.startswith("graph-v1:") and len(base) == 25
    text_changed = []
    for what, code in TRIVIAL_EDITS.items():
        assert _family(code) == base, what
        text_changed.append(family_of(code) != family_of(BASE))
    assert sum(text_changed) >= 3  # the source family told these apart (the red team's re-rolls)
    for what, code in OTHER_IDEAS.items():
        assert _family(code) != base, what


def test_any_json_hashes_without_raising() -> None:
    for doc in ({}, {"nodes": [1, None, {"op": "output", "args": [{"$node": "nowhere"}]}]},
                {"inputs": [{"name": "x", "kind": "user"}], "nodes": [{"name": "x", "op": "placeholder"}] * 3}):
        assert graph_family(doc).startswith("graph-v1:")
