"""Hostile: write an endless line (no newline) on the protocol pipe, so a parent that buffers
until a newline grows without bound."""

import os
import sys

from torch import nn

fd = int(sys.argv[1])
chunk = b"x" * (1 << 16)
for _ in range(64):  # 4 MiB, past the parent's bound of one message
    os.write(fd, chunk)


def build_model(spec):
    return nn.Linear(spec["input_shape"][0], spec["output_shape"][0])
