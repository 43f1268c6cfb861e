"""The trainer child's start: counting a model's compute imports no ``torch._dynamo``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COUNT = """
import json, sys
import torch
import bench.trainer as trainer
if sys.argv[1] == "wrapped":
    trainer._never_compiled = lambda mode: None  # torch's own path: its disable wrapper imports dynamo
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
flops = trainer.flops_per_example(model, torch.randn(32, 6))
print(json.dumps({"flops": flops, "dynamo": "torch._dynamo" in sys.modules}))
"""


def _count(mode: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", COUNT, mode], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_counting_compute_imports_no_dynamo_and_counts_the_same() -> None:
    """``torch._disable_dynamo`` imported all of ``torch._dynamo`` (about 1 CPU-second, most of
    a trainer child's start after ``import torch``) on the first call of a dispatch mode's
    ``__torch_dispatch__``; the trainer skips it, and the count is the one torch's path gives."""
    fast, wrapped = _count("fast"), _count("wrapped")
    assert wrapped["dynamo"] is True, "torch no longer imports dynamo here: _never_compiled can go"
    assert fast["dynamo"] is False
    assert fast["flops"] == wrapped["flops"] and isinstance(fast["flops"], float) and fast["flops"] > 0
