"""Tiny token mixers over (B, 2, 4) samples for the norm_ratio probe's tests."""

from __future__ import annotations

import torch
from torch import nn

NORM = {"kind": "norm_ratio", "module": "mix"}


class Rotate(nn.Module):
    """Mixes the two tokens with a trainable rotation: an isometry of each sample."""

    def __init__(self) -> None:
        super().__init__()
        self.angle = nn.Parameter(torch.tensor(0.3))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        a, b = z[:, 0], z[:, 1]
        c, s = torch.cos(self.angle), torch.sin(self.angle)
        return torch.stack([c * a - s * b, s * a + c * b], dim=1)


class Scale(nn.Module):
    """A trainable gain: norm ratio ``gain``."""

    def __init__(self, gain: float = 0.5) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.tensor(gain))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.gain * z
