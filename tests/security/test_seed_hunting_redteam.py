"""Red-team tests of "seed hunting does not pay" (issue 25.6): the graph family
(bench.family.graph_family) that groups an agent's re-rolls into one hypothesis
(app.reports.discoveries: one per key and family, Bonferroni over its attempts).

Both were holes in the first graph family (70801c8): an exact no-op in the forward, or a
job-dependent number of them, gave an unchanged model a new family, so each re-roll was a
fresh hypothesis with no attempts before it. Exact no-ops are now their input in the hash.
A file that builds another graph in every job (it reads the clock) still gets other
confirmation seeds per job (its graph, hence its model_key, differs): those re-rolls are
attempts of one family (docs/security.md).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from bench.family import graph_family
from bench.judge import JudgeRequest, judge
from tests.capture_helpers import capture_docs

IN, OUT, WIDTH = 8, 1, 32


class _Idea(nn.Module):
    """The smoke example's SiLU MLP, with ``extra`` applied to its output."""

    def __init__(self, extra: str = "", k: int = 1) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(IN, WIDTH), nn.SiLU(), nn.Linear(WIDTH, OUT))
        self.extra, self.k = extra, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        for _ in range(self.k if self.extra else 0):
            if self.extra == "add0":
                y = y + 0.0
            elif self.extra == "mul1":
                y = y * 1.0
            elif self.extra == "clone":
                y = y.clone()
        return y


def _family(model: nn.Module) -> str:
    docs, _ = capture_docs(model, (IN,))
    return graph_family(docs["train"])


def test_exact_no_ops_leave_the_family_unchanged() -> None:
    """Was a hole: ``y + 0.0``, ``y * 1.0`` or ``y.clone()`` (k times) computes exactly the same
    function, gradients and training run, yet each k is another graph family: an agent
    gets unboundedly many hypotheses (and model_keys) for one unchanged model."""
    torch.manual_seed(0)
    plain = _Idea()
    x = torch.randn(16, IN)
    variants = {"plain": plain}
    for extra in ("add0", "mul1", "clone"):
        for k in (1, 2, 3):
            v = _Idea(extra, k)
            v.load_state_dict(plain.state_dict())
            assert torch.equal(v(x), plain(x))  # the very same function
            variants[f"{extra}x{k}"] = v
    families = {name: _family(m) for name, m in variants.items()}
    assert len(set(families.values())) == 1, families


ROLL = '''
import time
from torch import nn

HPARAMS = {"width": [32]}
K = time.time_ns() // 1000 % 29 + 1  # read in the capture child: another K in every job (at most 29
# no-op nodes: 97 of them cost past the million a forward may spend, bench.cost.NODE_COST)


class Net(nn.Module):
    def __init__(self, i, w, o):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(i, w), nn.SiLU(), nn.Linear(w, o))

    def forward(self, x):
        y = self.body(x)
        for _ in range(K):
            y = y + 0.0
        return y


def build_model(spec):
    return Net(spec["input_shape"][0], spec["hparams"]["width"], spec["output_shape"][0])
'''


def test_one_file_resubmitted_keeps_its_family_and_graph(tmp_path: Path) -> None:
    """Was a hole: the identical file judged twice got two graph families: the capture child
    may build a job-dependent graph (time, os.urandom, the first build's init seed). Its
    no-ops are its input now, so both jobs are one family. (~30 s: two smoke jobs.)"""
    captures = []
    for _ in range(2):
        report = judge(JudgeRequest(track="smoke", idea_code=ROLL, n_seeds=2)).model_dump(mode="json")
        captures.append(report["bench_report"]["capture"]["idea"])
    assert captures[0]["family"] == captures[1]["family"], captures
