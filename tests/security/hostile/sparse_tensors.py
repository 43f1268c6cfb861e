"""Hostile: patch numpy.save in the capture child so each tensor file is followed by a 255 MB hole
(issue 25.9: the child's disk check counts blocks, the parent's header check compared sizes, and
twelve such files took the parent to 3.5 GB of memory on 1.5 MB of disk)."""

import numpy as np
from torch import nn

_save = np.save


def _sparse(file, arr, *args, **kwargs):
    _save(file, arr, *args, **kwargs)
    with open(file, "r+b") as fh:
        fh.truncate(255 << 20)


np.save = _sparse


def build_model(spec):
    return nn.Linear(spec["input_shape"][0], spec["output_shape"][0])
