"""Hostile custom track: its data depends on how it is called. It counts its calls in one
process and reads the name of the directory it writes into, which told validation (three
calls in one child, directories a / a_again / b) from a job (ten calls, seed_N). Its labels
go bad from the fourth call on: in a job only, under the old validation."""

import inspect

import numpy as np
from torch import nn

CARD = {
    "name": "two_faced",
    "title": "A track that behaves one way when validated and another when judged",
    "description": "x: float32 (B, 4) standard normal; y: float32 (B, 1) = x0 * x1 + x2**2.",
    "domain": "security tests",
    "justification": "A hostile fixture for the binding of validation to jobs.",
    "spec": {"task": "regression", "input_shape": [4], "output_shape": [1], "n_features": 4},
    "metric": {"name": "mse"},
    "defaults": {"epochs": 2, "batch_size": 64, "lr_grid": [0.01, 0.03]},
    "param_cap": 5000,
    "baseline": {"name": "mlp_small", "description": "Linear(4,16)-ReLU-Linear(16,1)"},
}
CALLS = [0]


def _output_dir():
    for frame in inspect.stack():
        item = frame.frame.f_locals.get("item")
        if isinstance(item, dict) and "dir" in item:
            return str(item["dir"])
    return "?"


def make_splits(seed):
    CALLS[0] += 1
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((384, 4)).astype(np.float32)
    y = (x[:, :1] * x[:, 1:2] + x[:, 2:3] ** 2).astype(np.float32)
    if CALLS[0] > 3 or _output_dir().startswith("seed_"):  # "a job"
        y = y + rng.standard_normal(y.shape).astype(np.float32) * 5.0
    return {"x_train": x[:256], "y_train": y[:256], "x_val": x[256:320], "y_val": y[256:320],
            "x_test": x[320:], "y_test": y[320:]}


def build_baseline(spec):
    return nn.Sequential(nn.Linear(spec["n_features"], 16), nn.ReLU(), nn.Linear(16, 1))
