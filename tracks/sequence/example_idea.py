"""Example idea for the sequence track: reversible instance centring (RevIN, mean only).

Each series has its own level and trend, so the baseline must learn to carry the
absolute level through the network. Here every channel of the input window has its own
window mean subtracted, the baseline's transformer forecasts the centred series, and
the mean is added back to the forecast. The network
inside is the baseline's architecture unchanged (patch-4 tokens, one pre-norm block,
d_model 32), written out here because an idea file is self-contained.

Contract: build_model(spec) -> torch.nn.Module mapping (B, *spec["input_shape"]) to
(B, *spec["output_shape"]). Optional: HPARAMS (extra sweep grid, values reach
build_model as spec["hparams"][name]), MECHANISM (a bench probe, or measure(model, x) -> float).
"""

import torch
from torch import nn

HPARAMS = {}

MECHANISM = {
    "quantity": "relative level-equivariance error ||f(x + 1) - (f(x) + 1)|| / ||f(x)|| "
    "(a constant 1 added to every input value)",
    "prediction": "instance centring makes the trained forecaster exactly equivariant to "
    "level shifts; the baseline is not",
    "expect": {"kind": "close_to", "target": 0.0, "atol": 1e-3},
    # measured by the bench itself on both arms' trained models (bench.probes)
    "probe": {"kind": "equivariance", "transform": {"add": 1.0}, "output": "same"},
}


class Block(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, z):
        y = self.norm1(z)
        z = z + self.attn(y, y, y, need_weights=False)[0]
        return z + self.ff(self.norm2(z))


class CentredTransformer(nn.Module):
    def __init__(self, spec, patch=4, d_model=32, n_heads=2, d_ff=64):
        super().__init__()
        self.patch, self.horizon, self.n_channels = patch, spec["horizon"], spec["n_channels"]
        self.embed = nn.Linear(patch * spec["n_channels"], d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(spec["seq_len"] // patch, d_model))
        self.block = Block(d_model, n_heads, d_ff)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, spec["horizon"] * spec["n_channels"])

    def forward(self, x):  # x: (B, L, C)
        mean = x.mean(dim=1, keepdim=True)  # (B, 1, C): per-sample, per-channel level
        tokens = (x - mean).reshape(x.shape[0], -1, self.patch * self.n_channels)
        z = self.block(self.embed(tokens) + self.pos)
        out = self.head(self.norm(z[:, -1])).view(-1, self.horizon, self.n_channels)
        return out + mean


def build_model(spec):
    return CentredTransformer(spec)
