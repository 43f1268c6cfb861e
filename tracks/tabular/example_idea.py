"""Example idea for the tabular track: a wide-and-deep MLP (linear path + ReLU path).

Disease progression in the diabetes data is close to linear in the standardised
features, with small nonlinear corrections. The baseline must build the linear part
out of ReLU pieces; here a direct linear map carries it and a slightly narrower
one-hidden-layer ReLU MLP (width 31, no output bias) adds the correction, for about
the baseline's parameter count (383 vs 385).

Contract: build_model(spec) -> torch.nn.Module mapping (B, *spec["input_shape"]) to
(B, *spec["output_shape"]). Optional: HPARAMS (extra sweep grid, values reach
build_model as spec["hparams"][name]), MECHANISM + measure(model, x) -> float.
"""

import torch
from torch import nn

HPARAMS = {"width": [31]}

MECHANISM = {
    "quantity": "nonlinear share of the output: 1 - R^2 of the least-squares linear fit "
    "(with intercept) of the model's outputs on its inputs, over the probe batch",
    "prediction": "with a linear path available, the trained model is closer to linear "
    "than the ReLU-only baseline",
    "expect": {"kind": "lower_than_baseline"},
}


class WideAndDeep(nn.Module):
    def __init__(self, n_features, width, n_out):
        super().__init__()
        self.linear = nn.Linear(n_features, n_out)
        self.deep = nn.Sequential(
            nn.Linear(n_features, width), nn.ReLU(), nn.Linear(width, n_out, bias=False)
        )

    def forward(self, x):
        return self.linear(x) + self.deep(x)


def build_model(spec):
    return WideAndDeep(spec["n_features"], spec["hparams"]["width"], spec["output_shape"][0])


def measure(model, x):
    with torch.no_grad():
        y = model(x).double().reshape(len(x), -1)
        design = torch.cat([x.double(), torch.ones(len(x), 1, dtype=torch.float64)], dim=1)
        coef = torch.linalg.lstsq(design, y).solution
        residual = y - design @ coef
        total = (y - y.mean(0)).pow(2).sum()
    return float(residual.pow(2).sum() / total) if total > 0 else 0.0
