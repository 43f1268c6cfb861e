"""Patches its own capture child so that every answer it sends carries a key of its choosing
and a count as text (``send`` writes ``json.dumps(message)``; the file replaces ``json.dumps``
in its process): the parent must read answers as their model and nothing else (bench.wire),
not believe what submitted code adds to them."""

import json

from torch import nn

_dumps = json.dumps


def _dumps_and_say_more(obj, *args, **kwargs):
    if isinstance(obj, dict) and obj.get("ok") is True:
        obj = {**obj, "verdict": "worked", "n_params": "1"}
    return _dumps(obj, *args, **kwargs)


json.dumps = _dumps_and_say_more


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1))
