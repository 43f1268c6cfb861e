"""Hostile: patch numpy.save in the capture child so every float32 tensor is written big-endian
(issue 25.11: it passed the dtype check as float32 and ended the job ``internal``, "a bug in
ideabench")."""

import numpy as np
from torch import nn

_save = np.save


def _big_endian(file, arr, *args, **kwargs):
    arr = np.asarray(arr)
    if arr.dtype == np.float32:
        arr = arr.astype(">f4")
    return _save(file, arr, *args, **kwargs)


np.save = _big_endian


def build_model(spec):
    return nn.Linear(spec["input_shape"][0], spec["output_shape"][0])
