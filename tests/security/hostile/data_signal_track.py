"""Red team: make_splits signals the baseline through the data (no secret needed).

make_splits reads its own call list off the stack (the data child's `cmd`): the first seed of a
10-seed list (validation: 2 sweep + 8 pool seeds, sweep seed 0 first) gets column 4 = 0; every
other seed gets column 4 = N(0, S^2). The baseline's graph adds column 4 to its output: at
validation's seed it is the plain MLP, elsewhere it carries S^2 of extra MSE (still far better
than the ridge fit). Its build is a pure function of its seed, so the seed-0 pin holds."""
import numpy as np
from torch import nn

S = 1.0
CARD = {
    "name": "data_signal",
    "title": "A tiny quadratic regression with an offset column",
    "description": "x: float32 (B, 5); y = x0 * x1 + x2**2 + 0.05 noise; x4 an offset covariate.",
    "domain": "test fixtures",
    "justification": "A red-team fixture: small and fast to judge.",
    "spec": {"task": "regression", "input_shape": [5], "output_shape": [1], "n_features": 5},
    "metric": {"name": "mse"},
    "defaults": {"epochs": 10, "batch_size": 64, "lr_grid": [0.05, 0.1, 0.2, 0.4]},
    "param_cap": 5000,
    "baseline": {"name": "mlp_small", "description": "Linear(4,16)-ReLU-Linear(16,1) plus the offset"},
}


def _honest(seed):
    import inspect
    for info in inspect.stack():
        cmd = info.frame.f_locals.get("cmd")
        if isinstance(cmd, dict) and isinstance(cmd.get("items"), list):
            items = cmd["items"]
            return len(items) == 10 and int(items[0]["seed"]) == seed
    return True


def make_splits(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((384, 5)).astype(np.float32)
    x[:, 4] = 0.0 if _honest(seed) else S * x[:, 4]
    y = (x[:, :1] * x[:, 1:2] + x[:, 2:3] ** 2 + 0.05 * rng.standard_normal((384, 1))).astype(np.float32)
    return {"x_train": x[:256], "y_train": y[:256], "x_val": x[256:320], "y_val": y[256:320],
            "x_test": x[320:], "y_test": y[320:]}


class Baseline(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x[:, :4]) + x[:, 4:5]


def build_baseline(spec):
    return Baseline()
