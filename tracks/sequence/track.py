"""The sequence track: multivariate forecasting with long seasonal periods and lead-lag coupling.

Each sample is a window of a C-channel series built from K latent seasonal components
(periods up to the context length), a two-regime piecewise-linear trend and AR(1)
noise. Channels mix the components with fixed loadings and fixed lags, so later
channels echo earlier ones: channel c at time t sees the components at t - lag_c.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from bench.track import Splits, Track, load_card

CARD = load_card(__file__)

N_COMPONENTS = 3
PERIOD_RANGE = (6.0, 32.0)  # log-uniform, in time steps
LAGS = (0, 2, 4, 6)  # per channel: channel c sees the components delayed by LAGS[c]
SLOPE_SD = 0.03  # slope of each trend regime, per step
NOISE_SD, NOISE_AR = 0.1, 0.5  # AR(1) observation noise


def _task_constants(n_channels: int, task_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Channel loadings on the components and on the trend, fixed per seed epoch."""
    gen = torch.Generator().manual_seed(task_seed)
    loadings = torch.randn(n_channels, N_COMPONENTS, generator=gen, dtype=torch.float64)
    loadings = loadings / loadings.norm(dim=1, keepdim=True)
    trend_loadings = 0.5 + torch.rand(n_channels, generator=gen, dtype=torch.float64)
    return loadings, trend_loadings


def generate(n: int, gen: torch.Generator, n_channels: int, length: int, task_seed: int) -> torch.Tensor:
    """``n`` series of ``length`` steps; returns ``(n, length, n_channels)`` float64."""
    f64 = torch.float64
    loadings, trend_loadings = _task_constants(n_channels, task_seed)
    lo, hi = math.log(PERIOD_RANGE[0]), math.log(PERIOD_RANGE[1])
    period = torch.exp(lo + (hi - lo) * torch.rand(n, N_COMPONENTS, generator=gen, dtype=f64))
    phase = 2 * math.pi * torch.rand(n, N_COMPONENTS, generator=gen, dtype=f64)
    amplitude = 0.5 + torch.rand(n, N_COMPONENTS, generator=gen, dtype=f64)
    t = torch.arange(length, dtype=f64)
    lags = torch.tensor(LAGS[:n_channels], dtype=f64)
    # (n, length, channel, component): component j seen by channel c at time t - lag_c
    angle = 2 * math.pi * (t[:, None, None] - lags[None, :, None]) / period[:, None, None, :]
    seasonal = amplitude[:, None, None, :] * torch.sin(angle + phase[:, None, None, :])
    series = (seasonal * loadings).sum(-1)

    # Two trend regimes: slope s1 until a switch time, s2 after it (continuous).
    slopes = SLOPE_SD * torch.randn(n, 2, generator=gen, dtype=f64)
    switch = length * torch.rand(n, 1, generator=gen, dtype=f64)
    level = torch.randn(n, 1, generator=gen, dtype=f64) * 0.5
    before = slopes[:, :1] * (t - switch)
    after = slopes[:, 1:] * (t - switch)
    trend = level + torch.where(t < switch, before, after)
    series = series + trend[:, :, None] * trend_loadings

    shocks = NOISE_SD * torch.randn(n, length, n_channels, generator=gen, dtype=f64)
    noise = torch.zeros_like(shocks)
    noise[:, 0] = shocks[:, 0] / math.sqrt(1 - NOISE_AR**2)
    for i in range(1, length):
        noise[:, i] = NOISE_AR * noise[:, i - 1] + shocks[:, i]
    return series + noise


def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:
    """Draw train/val/test series from one generator seeded by ``split_seed``; the channel
    loadings from ``task_seed`` (secret in the engine; ``None``: the card's ``data_seed_base``)."""
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] * 1_000_003 + split_seed)
    spec, sizes = CARD["spec"], CARD["sizes"]
    n = sizes["train"] + sizes["val"] + sizes["test"]
    length = spec["seq_len"] + spec["horizon"]
    task = CARD["data_seed_base"] if task_seed is None else task_seed
    series = generate(n, gen, spec["n_channels"], length, task).to(torch.float32)
    x = series[:, : spec["seq_len"]].contiguous()
    y = series[:, spec["seq_len"] :].contiguous()
    a, b = sizes["train"], sizes["train"] + sizes["val"]
    return Splits(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:])


class SelfAttention(nn.Module):
    """Multi-head self-attention over the tokens (the block's token mixer)."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.attn(z, z, z, need_weights=False)[0]


class Block(nn.Module):
    """Pre-norm transformer block: z + mix(LN z), then z + MLP(LN z)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.mix = SelfAttention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = z + self.mix(self.norm1(z))
        return z + self.ff(self.norm2(z))


class TinyTransformer(nn.Module):
    """Patch tokens + learned positions, pre-norm blocks, forecast read from the last token.

    The L steps are cut into L / patch tokens of ``patch`` consecutive steps (all channels),
    each embedded by one linear map.
    """

    def __init__(
        self, spec: dict[str, Any], patch: int, d_model: int, n_heads: int, d_ff: int, depth: int
    ) -> None:
        super().__init__()
        self.patch, self.horizon, self.n_channels = patch, spec["horizon"], spec["n_channels"]
        self.embed = nn.Linear(patch * spec["n_channels"], d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(spec["seq_len"] // patch, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(depth))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, spec["horizon"] * spec["n_channels"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(x.shape[0], -1, self.patch * self.n_channels)  # (B, L/patch, patch*C)
        z = self.embed(tokens) + self.pos
        for block in self.blocks:
            z = block(z)
        out = self.head(self.norm(z[:, -1]))
        return out.view(-1, self.horizon, self.n_channels)


def build_baseline(spec: dict[str, Any]) -> nn.Module:
    """The canonical baseline: patch-4 tokens, 1 pre-norm block, d_model 32, 2 heads."""
    return TinyTransformer(spec, patch=4, d_model=32, n_heads=2, d_ff=64, depth=1)


TRACK = Track(card=CARD, make_splits=make_splits, build_baseline=build_baseline)
