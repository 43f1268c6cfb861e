"""Hostile (found by a red-team pass): an honest tiny track whose baseline counts its builds.
Validation builds it once and sees a sound MLP; a job builds one per init seed in one capture
child, and every build after the first is zeroed: a dead baseline that any idea beats
('worked'). Refused: every init seed's tensors must be drawn like the first seed's."""
import numpy as np
from torch import nn

CARD = {
    "name": "counting_baseline",
    "title": "A tiny quadratic regression",
    "description": "x: float32 (B, 4) standard normal; y: float32 (B, 1) = x0 * x1 + x2**2 + 0.05 noise.",
    "domain": "test fixtures",
    "justification": "A fixture for the custom-track tests: small and fast to judge.",
    "spec": {"task": "regression", "input_shape": [4], "output_shape": [1], "n_features": 4},
    "metric": {"name": "mse"},
    "defaults": {"epochs": 4, "batch_size": 64, "lr_grid": [0.01, 0.03]},
    "param_cap": 5000,
    "baseline": {"name": "mlp_small", "description": "Linear(4,16)-ReLU-Linear(16,1)"},
}


def make_splits(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((384, 4)).astype(np.float32)
    y = (x[:, :1] * x[:, 1:2] + x[:, 2:3] ** 2 + 0.05 * rng.standard_normal((384, 1))).astype(np.float32)
    return {"x_train": x[:256], "y_train": y[:256], "x_val": x[256:320], "y_val": y[256:320],
            "x_test": x[320:], "y_test": y[320:]}


BUILDS = [0]


def build_baseline(spec):
    BUILDS[0] += 1
    model = nn.Sequential(nn.Linear(spec["n_features"], 16), nn.ReLU(), nn.Linear(16, 1))
    if BUILDS[0] > 1:
        for p in model.parameters():
            p.data.zero_()
    return model
