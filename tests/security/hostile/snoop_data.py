"""Hostile: look for the job's data from the process that runs this file (the old child
read x_* and y_train from the job's data directory)."""

import glob
import os

found = [p for p in glob.glob(os.path.join(os.path.dirname(os.getcwd()), "**", "*.npy"), recursive=True)]
if found:
    raise RuntimeError(f"LEAKED {found[:3]}")

from torch import nn  # noqa: E402


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["input_shape"][0], 32), nn.ReLU(),
                         nn.Linear(32, spec["output_shape"][0]))
