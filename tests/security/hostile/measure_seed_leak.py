"""Hostile (red team, session 21): the idea's own measure() of a built-in track's baseline runs
in a child that builds that baseline. Its module code reads that child's init seeds (a built-in
baseline builds with the epoch's shared init seeds, the same for every job of the epoch) and
writes them into its error's text, which reaches the agent (``invalid_code``). Learnt, they
would tell a confirmation's decoys from its new seeds."""
import gc

from torch import nn

MECHANISM = {"quantity": "mean output", "prediction": "finite", "expect": {"kind": "greater_than", "value": -1e9}}


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["input_shape"][0], 32), nn.ReLU(), nn.Linear(32, spec["output_shape"][0]))


def measure(model, x):
    return float(model(x).mean())


gc.unfreeze()  # what a child made before it was ready is frozen (bench.child.started): out of get_objects()
for _obj in gc.get_objects():
    if type(_obj).__name__ == "Capturer" and getattr(_obj, "filename", "") == "baseline (track)":
        raise ValueError("SEEDS " + ",".join(str(s) for s in _obj.init_seeds) + " END")
