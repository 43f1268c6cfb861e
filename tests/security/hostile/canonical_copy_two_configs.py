"""The idea: a copy of the smoke track's canonical baseline, with a second config (width 31) that
changes nothing of substance -- it only gives the matched baseline a denser lr grid in the job."""

from torch import nn

HPARAMS = {"w": [32, 31]}


def build_model(spec):
    w = spec["hparams"]["w"]
    return nn.Sequential(nn.Linear(spec["n_features"], w), nn.ReLU(), nn.Linear(w, 1))
