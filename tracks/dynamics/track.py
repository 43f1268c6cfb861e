"""The dynamics track: one-step forecasting of a 1-D periodic advection-diffusion-Burgers field.

Each sample is its own trajectory of u_t = -c u_x + nu u_xx - u u_x on [0, 2*pi) with
periodic boundaries, with c and nu drawn per sample. The field is simulated
pseudo-spectrally in float64 (integrating-factor RK4, 2/3 de-aliasing) on a fine grid
and observed as its Fourier truncation to ``n_x`` grid points every ``dt_obs``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from bench.track import Splits, Track, load_card

CARD = load_card(__file__)

# Simulation constants (fixed by the track version; the seed only draws samples).
N_SIM = 48  # fine grid of the solver; observations are its Fourier truncation
DT = 0.04  # solver step (the linear part is integrated exactly)
DT_OBS = 0.2  # time between observed states
BURN_IN = 0.2  # time simulated before the first observed state
C_RANGE = (-1.0, 1.0)  # advection speed, uniform
NU_RANGE = (0.05, 0.2)  # viscosity, log-uniform
RMS_RANGE = (0.2, 0.6)  # initial-condition RMS amplitude, uniform
IC_MODES = 3  # initial condition: random Fourier modes 1..IC_MODES, amplitude ~ 1/k


def simulate(n: int, gen: torch.Generator, n_x: int, n_states: int) -> np.ndarray:
    """Simulate ``n`` independent trajectories; returns ``(n, n_states, n_x)`` float64.

    The random draws come from ``gen`` (torch); the solver runs in numpy, whose FFT is
    single-threaded, so the cost does not depend on torch's thread settings.
    """
    f64 = torch.float64
    c = C_RANGE[0] + (C_RANGE[1] - C_RANGE[0]) * torch.rand(n, 1, generator=gen, dtype=f64)
    log_nu = math.log(NU_RANGE[0]) + math.log(NU_RANGE[1] / NU_RANGE[0]) * torch.rand(
        n, 1, generator=gen, dtype=f64
    )
    modes = torch.arange(1, IC_MODES + 1, dtype=f64)
    a = torch.randn(n, IC_MODES, generator=gen, dtype=f64) / modes
    b = torch.randn(n, IC_MODES, generator=gen, dtype=f64) / modes
    rms = RMS_RANGE[0] + (RMS_RANGE[1] - RMS_RANGE[0]) * torch.rand(n, 1, generator=gen, dtype=f64)

    grid = np.arange(N_SIM) * (2 * math.pi / N_SIM)
    phase = modes.numpy()[:, None] * grid
    # Elementwise sums (no BLAS call), so the bits do not depend on threading.
    u0 = (a.numpy()[:, :, None] * np.cos(phase) + b.numpy()[:, :, None] * np.sin(phase)).sum(1)
    u0 *= rms.numpy() / u0.std(axis=1, keepdims=True)

    k = np.arange(N_SIM // 2 + 1, dtype=np.float64)
    linear = -1j * c.numpy() * k - log_nu.exp().numpy() * k**2  # advection + diffusion, exact
    flux_derivative = -0.5j * k * (k <= N_SIM // 3)  # -(u^2/2)_x with 2/3 de-aliasing
    e_full, e_half = np.exp(linear * DT), np.exp(linear * DT / 2)

    def nonlinear(uh: np.ndarray) -> np.ndarray:
        u = np.fft.irfft(uh, n=N_SIM)
        return flux_derivative * np.fft.rfft(u * u)

    def step(uh: np.ndarray) -> np.ndarray:  # Lawson (integrating-factor) RK4
        k1 = nonlinear(uh)
        k2 = nonlinear(e_half * (uh + DT / 2 * k1))
        k3 = nonlinear(e_half * uh + DT / 2 * k2)
        k4 = nonlinear(e_full * uh + DT * e_half * k3)
        return e_full * uh + DT / 6 * (e_full * k1 + 2 * e_half * (k2 + k3) + k4)

    uh = np.fft.rfft(u0)
    for _ in range(round(BURN_IN / DT)):
        uh = step(uh)
    states = [uh]
    for _ in range(n_states - 1):
        for _ in range(round(DT_OBS / DT)):
            uh = step(uh)
        states.append(uh)
    spectra = np.stack(states, axis=1)[..., : n_x // 2 + 1]
    return np.fft.irfft(spectra, n=n_x) * (n_x / N_SIM)


def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:
    """Simulate train/val/test trajectories from one generator seeded by ``split_seed``.
    ``task_seed`` is unused: the task has no constants to draw."""
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] * 1_000_003 + split_seed)
    spec, sizes = CARD["spec"], CARD["sizes"]
    n = sizes["train"] + sizes["val"] + sizes["test"]
    u = torch.from_numpy(simulate(n, gen, spec["n_x"], spec["window"] + 1)).to(torch.float32)
    x, y = u[:, :-1].contiguous(), u[:, -1].contiguous()
    a, b = sizes["train"], sizes["train"] + sizes["val"]
    return Splits(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:])


class GRUForecaster(nn.Module):
    """A GRU over the W state tokens; predicts the next state as last state + a correction."""

    def __init__(self, n_x: int, hidden: int) -> None:
        super().__init__()
        self.gru = nn.GRU(n_x, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_x)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        states, _ = self.gru(u)
        return u[:, -1] + self.head(states[:, -1])


def build_baseline(spec: dict[str, Any]) -> nn.Module:
    """The canonical baseline: GRU(n_x -> 24) over raw state tokens, residual linear head."""
    return GRUForecaster(spec["n_x"], 24)


TRACK = Track(card=CARD, make_splits=make_splits, build_baseline=build_baseline)
