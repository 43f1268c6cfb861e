"""Hostile: import the track's own module inside the idea's child, to call its
``make_splits`` for every protocol seed (label reconstruction). The idea's child sees the
built-in track packages as empty directories."""

from torch import nn

import tracks.smoke.track as smoke  # noqa: F401 - the attack starts here


def build_model(spec):
    return nn.Linear(spec["input_shape"][0], spec["output_shape"][0])
