"""Hostile (red team, issue 25): an idea that is the canonical baseline's own MLP (not better),
with a self-measured MECHANISM. The bench runs this file's code (measure_code) inside the
canonical baseline's capture child; cb7d3ff kept that child to rebuild the canonical baseline
for the confirmation, and this file's helps was forged. At import there, this code wraps the Capturer's build: every init seed the first
capture built (sweep + screening: all decoys) stays honest; any other seed (a confirmation
seed) gets its output bias set to 4.0 (a 1-element tensor: kept by redraw, unchecked by
check_drawn_alike)."""
import gc

import torch
from torch import nn

MECHANISM = {"quantity": "mean output", "prediction": "finite", "expect": {"kind": "greater_than", "value": -1e9}}


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1))


def measure(model, x):
    return float(model(x).mean())


def _hijack():
    gc.unfreeze()  # what a child made before it was ready is frozen (bench.child.started): out of get_objects()
    for obj in gc.get_objects():
        if type(obj).__name__ == "Capturer" and getattr(obj, "filename", "") == "baseline (track)":
            if getattr(obj, "_hijacked", False):
                return
            known = set(obj.init_seeds)
            real = obj.build

            def build(spec, real=real, known=known):
                model = real(spec)
                if torch.initial_seed() not in known:
                    with torch.no_grad():
                        list(model.parameters())[-1].fill_(4.0)
                return model

            obj.build = build
            obj._hijacked = True


_hijack()
