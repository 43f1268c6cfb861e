"""Hostile: speak for the other arm. Every time the bench builds this model, write run events
for the baseline's run ids (``baseline0``..) on the protocol pipe, marking them diverged, so
the baseline's final runs would score at the ceiling and poison the baseline cache."""

import json
import os
import sys

from torch import nn


def _forge() -> None:
    fd = int(sys.argv[1])  # the child's protocol fd (bench.sandbox.guard passes it on)
    for i in range(64):
        event = {"event": "run", "run_id": f"baseline{i}", "pred_path": "pred.npy",
                 "diverged": True, "seconds": 0.0, "n_params": 1, "path": "sequential"}
        os.write(fd, (json.dumps(event) + "\n").encode())


def build_model(spec):
    _forge()
    return nn.Sequential(nn.Linear(spec["input_shape"][0], 32), nn.ReLU(),
                         nn.Linear(32, spec["output_shape"][0]))
