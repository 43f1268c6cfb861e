"""Example idea for the dynamics track: a translation-equivariant circular CNN.

The PDE is the same at every grid point of the periodic domain, so instead of the
baseline's dense GRU the model uses circular 1-D convolutions along x, with the 8 past
states as input channels: every grid point runs the same small network on its
neighbourhood's history. The next state is x[:, -1] plus a per-point correction, like
the baseline.

Contract: build_model(spec) -> torch.nn.Module mapping (B, *spec["input_shape"]) to
(B, *spec["output_shape"]). Optional: HPARAMS (extra sweep grid, values reach
build_model as spec["hparams"][name]), MECHANISM (a bench probe, or measure(model, x) -> float).
"""

from torch import nn

HPARAMS = {"kernel": [5]}

MECHANISM = {
    "quantity": "relative translation-equivariance error ||f(roll(x, 3)) - roll(f(x), 3)|| / ||f(x)||",
    "prediction": "circular convolutions make the trained forecaster exactly equivariant to "
    "shifts along x (the baseline's dense GRU is not)",
    "expect": {"kind": "close_to", "target": 0.0, "atol": 1e-4},
    # measured by the bench itself on both arms' trained models (bench.probes)
    "probe": {"kind": "equivariance", "transform": {"roll": {"shift": 3, "dim": -1}}, "output": "same"},
}


class CircularCNN(nn.Module):
    def __init__(self, window, channels, kernel):
        super().__init__()
        pad = {"padding": kernel // 2, "padding_mode": "circular"}
        self.net = nn.Sequential(
            nn.Conv1d(window, channels, kernel, **pad),
            nn.GELU(),
            nn.Conv1d(channels, channels, kernel, **pad),
            nn.GELU(),
            nn.Conv1d(channels, 1, 1),
        )

    def forward(self, u):  # u: (B, W, X); the W past states are the input channels
        return u[:, -1] + self.net(u)[:, 0]


def build_model(spec):
    return CircularCNN(spec["window"], channels=22, kernel=spec["hparams"]["kernel"])
