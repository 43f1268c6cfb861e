"""One cold matched smoke job (the idea with two ``width`` configs, a copy of the canonical
baseline as the matched one, ``n_seeds=4``, the public secret): the runs it trained, its wall
time, the machine's busy CPU-seconds over it (``/proc/stat``) and what it decided, as one JSON
line. Compare two checkouts by running it with each one first on ``PYTHONPATH``:

    PYTHONPATH=/path/to/checkout .venv/bin/python benchmarks/matched_job.py
"""

from __future__ import annotations

import json
import time

from bench.judge import JudgeRequest, judge
from bench.seeding import public_secret

COPY = ("from torch import nn\n"
        "def build_model(spec):\n"
        "    return nn.Sequential(nn.Linear(spec['n_features'], 32), nn.ReLU(), nn.Linear(32, 1))\n")
IDEA = ("from torch import nn\nHPARAMS = {'width': [30, 32]}\n"
        "def build_model(spec):\n"
        "    w = spec['hparams']['width']\n"
        "    return nn.Sequential(nn.Linear(spec['n_features'], w), nn.ReLU(), nn.Linear(w, 1))\n")


def busy() -> float:
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(f) - f[3] - f[4]) / 100


events: list = []
b0, t0 = busy(), time.monotonic()
report = judge(JudgeRequest(track="smoke", idea_code=IDEA, baseline_code=COPY, n_seeds=4, job_key="matched-bench",
                            seed_secret=public_secret()), events.append).model_dump(mode="json")
wall, cpu = time.monotonic() - t0, busy() - b0
br = report["bench_report"]
print(json.dumps({"runs": events[-1].done, "wall_s": round(wall, 1), "busy_cpu_s": round(cpu, 1),
                  "verdict": [report["system_verdict"], report["practical_verdict"]],
                  "p": br["comparison"]["p_value"], "delta": br["comparison"]["delta_mean"],
                  "budget": br["budget"]}))
