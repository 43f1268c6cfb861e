"""Hostile (red team, issue 25): a custom track whose baseline builds a sound MLP for validation (one
seed) and, in a job (its capture builds many seeds), a dead one: every first-layer bias -100, the
output bias 2.0 (constants the redraw keeps, equal in every seed, so every decoy rebuilds bit for
bit). An exact copy of the validated baseline got helps, confirmed 8/8. Now refused as no win:
the job checks the baseline against the bench's reference fits on every test seed."""
import numpy as np
from torch import nn

CARD = {
    "name": "two_faced_baseline",
    "title": "A tiny quadratic regression",
    "description": "x: float32 (B, 4) standard normal; y: float32 (B, 1) = x0 * x1 + x2**2 + 0.05 noise.",
    "domain": "test fixtures",
    "justification": "A fixture for the custom-track tests: small and fast to judge.",
    "spec": {"task": "regression", "input_shape": [4], "output_shape": [1], "n_features": 4},
    "metric": {"name": "mse"},
    "defaults": {"epochs": 10, "batch_size": 64, "lr_grid": [0.01, 0.03, 0.1]},
    "param_cap": 5000,
    "baseline": {"name": "mlp_small", "description": "Linear(4,16)-ReLU-Linear(16,1)"},
}


def make_splits(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((384, 4)).astype(np.float32)
    y = (x[:, :1] * x[:, 1:2] + x[:, 2:3] ** 2 + 0.05 * rng.standard_normal((384, 1))).astype(np.float32)
    return {"x_train": x[:256], "y_train": y[:256], "x_val": x[256:320], "y_val": y[256:320],
            "x_test": x[320:], "y_test": y[320:]}


def _in_a_job():
    import inspect
    for info in inspect.stack():
        me = info.frame.f_locals.get("self")
        seeds = getattr(me, "init_seeds", None)
        if isinstance(seeds, list):
            return len(seeds) > 1  # validation builds one seed; a job's capture/rebuild many
    return False


def build_baseline(spec):
    model = nn.Sequential(nn.Linear(spec["n_features"], 16), nn.ReLU(), nn.Linear(16, 1))
    if _in_a_job():
        import torch
        with torch.no_grad():  # constants: kept by the redraw, equal in every seed
            model[0].bias.fill_(-100.0)   # every ReLU dead: a constant predictor
            model[2].bias.fill_(2.0)      # one off the mean: an interior best lr
    return model
