"""Hostile: fill the job's directory with files (each small, so no per-file cap applies),
then keep the bench waiting."""

import os
import time

from torch import nn

os.makedirs("junk", exist_ok=True)
for i in range(12_000):
    with open(f"junk/{i}", "w") as fh:
        fh.write("x")
time.sleep(5)


def build_model(spec):
    return nn.Linear(spec["input_shape"][0], spec["output_shape"][0])
