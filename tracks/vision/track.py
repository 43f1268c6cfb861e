"""The vision track: 8x8 digits drawn from strokes, a fresh set per split seed (version 4).

Each image is one of ten digit skeletons (a few strokes in a unit box, ``SKELETONS``) drawn
the way a hand varies: a random affine map (rotation, shear, scale, aspect, shift), a smooth
random warp of the strokes, a pen width and an ink strength: each of 48 points along the
skeleton lays a Gaussian of ink (every digit the same total ink, so a short 1 is drawn brighter
than a long 8), a pixel shows 1 - exp(-strength x its ink), plus pixel noise. Every draw comes
from the split seed (secret to the submitter), so no evaluated image exists before its job and
the test split can be as large as power needs: 4,096 independent images (docs/tracks.md,
"Power"). Versions 1-3 used scikit-learn's 1,797 public UCI digits (2 and 3 redrew them); 500
test digits left an evaluation noise no number of repeat runs could average away.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

import torch
from torch import nn

from bench.track import Splits, Track, load_card

CARD = load_card(__file__)
POINTS = 48  # ink samples along each skeleton, equally spaced by arc length


def _arc(cx: float, cy: float, rx: float, ry: float, a0: float, a1: float, n: int) -> list[tuple[float, float]]:
    """``n`` points along an ellipse's arc from ``a0`` to ``a1`` degrees (0 = right, 90 = down)."""
    step = (a1 - a0) / (n - 1)
    return [(cx + rx * math.cos(math.radians(a0 + i * step)), cy + ry * math.sin(math.radians(a0 + i * step)))
            for i in range(n)]


# Each digit's strokes as polylines in a unit box (x to the right, y down).
SKELETONS: dict[int, list[list[tuple[float, float]]]] = {
    0: [_arc(0.5, 0.5, 0.28, 0.40, 0, 360, 16)],
    1: [[(0.36, 0.25), (0.52, 0.1), (0.52, 0.9)]],
    2: [_arc(0.5, 0.32, 0.25, 0.22, 200, 380, 8) + [(0.25, 0.9), (0.78, 0.9)]],
    3: [_arc(0.48, 0.3, 0.24, 0.2, 210, 450, 8) + _arc(0.48, 0.7, 0.27, 0.2, 270, 500, 9)[1:]],
    4: [[(0.66, 0.9), (0.66, 0.1), (0.2, 0.64), (0.82, 0.64)]],
    5: [[(0.76, 0.1), (0.32, 0.1), (0.28, 0.46)] + _arc(0.5, 0.66, 0.26, 0.24, 230, 490, 9)[1:]],
    6: [[(0.7, 0.1), (0.42, 0.35)] + _arc(0.5, 0.68, 0.22, 0.22, 200, 560, 14)],
    7: [[(0.22, 0.1), (0.8, 0.1), (0.42, 0.9)]],
    8: [_arc(0.5, 0.29, 0.19, 0.19, 90, 450, 12), _arc(0.5, 0.7, 0.23, 0.2, -90, 270, 12)],
    9: [_arc(0.48, 0.33, 0.22, 0.22, -20, 340, 14) + [(0.62, 0.9)]],
}


def _ink_points() -> torch.Tensor:
    """(10, POINTS, 2): each skeleton sampled at equal arc-length steps, float32."""
    out = torch.zeros(10, POINTS, 2, dtype=torch.float64)
    for digit, strokes in SKELETONS.items():
        segments = [(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
                    for stroke in strokes for a, b in pairwise(stroke)]
        lengths = torch.stack([torch.linalg.norm(b - a) for a, b in segments])
        ends = torch.cumsum(lengths, 0)
        for i in range(POINTS):
            at = (i + 0.5) / POINTS * float(ends[-1])
            j = min(int(torch.searchsorted(ends, torch.tensor(at, dtype=torch.float64))), len(segments) - 1)
            a, b = segments[j]
            out[digit, i] = a + (at - float(ends[j] - lengths[j])) / float(lengths[j]) * (b - a)
    return out.to(torch.float32)


INK = _ink_points()


def draw(labels: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One image per label, (N, 1, 8, 8) float32 in [0, 1], every variation drawn from ``gen``
    (the card's ``draw``): an affine map, a smooth warp (three random sinusoids displacing the
    strokes), a pen width (a Gaussian's sd in pixels) and ink strength, then pixel noise.
    Separable Gaussians make the rendering one batched matrix product."""
    p = CARD["draw"]
    n = len(labels)

    def uniform(lo: float, hi: float, *shape: int) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(n, *shape, generator=gen)

    pts = INK[labels] - 0.5  # (n, POINTS, 2), centred
    angle = uniform(-p["rotate_deg"], p["rotate_deg"]) * (math.pi / 180.0)
    shear = uniform(-p["shear"], p["shear"])
    sx = uniform(*p["scale"])
    sy = sx * uniform(1.0 - p["aspect"], 1.0 + p["aspect"])
    cos, sin = torch.cos(angle), torch.sin(angle)
    linear = torch.stack([torch.stack([sx * cos, sy * (shear - sin)], -1), torch.stack([sx * sin, sy * cos], -1)], -2)
    pts = torch.einsum("nij,npj->npi", linear, pts)
    modes = torch.randn(n, 3, 2, 2, generator=gen)  # per sinusoid: a wave vector, a displacement
    phase = uniform(0.0, 2.0 * math.pi, 3)
    waves = torch.sin(2.5 * torch.einsum("npj,nmj->npm", pts, modes[:, :, 0]) + phase[:, None])
    pts = pts + p["warp"] * torch.einsum("npm,nmj->npj", waves, modes[:, :, 1])
    pts = (pts + 0.5 + uniform(-p["shift"], p["shift"], 1, 2)) * 8.0 - 0.5  # pixel coordinates
    width = uniform(*p["width_px"])[:, None, None]
    grid = torch.arange(8, dtype=torch.float32)
    rows = torch.exp(-((grid - pts[..., 1:2]) ** 2) / (2.0 * width * width))  # (n, POINTS, 8)
    cols = torch.exp(-((grid - pts[..., 0:1]) ** 2) / (2.0 * width * width))
    ink = torch.bmm(rows.transpose(1, 2), cols) * (8.0 / POINTS)  # (n, 8, 8)
    image = 1.0 - torch.exp(-uniform(*p["ink"], 1, 1) * ink)
    image = image + torch.randn(image.shape, generator=gen) * p["noise"]
    return image.clamp(0.0, 1.0)[:, None]


def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:
    """Draw the three splits' labels (uniform over the ten digits) and images from a generator
    seeded by ``split_seed``. ``task_seed`` is unused: the skeletons are the task."""
    sizes = CARD["sizes"]
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] * 1_000_003 + split_seed)
    a, b = sizes["train"], sizes["train"] + sizes["val"]
    y = torch.randint(0, 10, (b + sizes["test"],), generator=gen)
    x = draw(y, gen)
    return Splits(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:])


def build_baseline(spec: dict[str, Any]) -> nn.Module:
    """The canonical baseline: two 3x3 conv + max-pool stages and a linear classifier."""
    channels = spec["input_shape"][0]
    return nn.Sequential(
        nn.Conv2d(channels, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 4x4 -> 2x2
        nn.Flatten(),
        nn.Linear(16 * 2 * 2, spec["n_classes"]),
    )


TRACK = Track(card=CARD, make_splits=make_splits, build_baseline=build_baseline)
