"""Example idea for the vision track: anti-aliased (blur) pooling, after Zhang (2019).

Strided max-pooling aliases: shifting the input by one pixel can change the pooled map
a lot. Here each pooling stage is max-pool with stride 1 followed by a fixed 3x3
binomial blur applied with stride 2 ("MaxBlurPool"), which low-passes before
subsampling. Convolutions, widths and the classifier are the baseline's, so both arms
have the same parameter count (the blur kernel is a fixed buffer).

Contract: build_model(spec) -> torch.nn.Module mapping (B, *spec["input_shape"]) to
(B, *spec["output_shape"]) logits. Optional: HPARAMS (extra sweep grid, values reach
build_model as spec["hparams"][name]), MECHANISM + measure(model, x) -> float.
"""

import torch
import torch.nn.functional as F
from torch import nn

HPARAMS = {}

MECHANISM = {
    "quantity": "shift sensitivity: mean total-variation distance between the predicted class "
    "distributions of an image and of the image shifted by one pixel (right, and down)",
    "prediction": "blurring before subsampling makes the trained classifier less sensitive to "
    "one-pixel shifts than the baseline's strided max-pooling",
    "expect": {"kind": "lower_than_baseline"},
}


class MaxBlurPool(nn.Module):
    def __init__(self, channels):
        super().__init__()
        k = torch.tensor([1.0, 2.0, 1.0])
        kernel = (k[:, None] * k[None, :]) / 16.0
        self.channels = channels
        self.register_buffer("kernel", kernel.expand(channels, 1, 3, 3).clone())

    def forward(self, x):
        x = F.max_pool2d(x, kernel_size=2, stride=1)
        return F.conv2d(x, self.kernel, stride=2, padding=1, groups=self.channels)


def build_model(spec):
    return nn.Sequential(
        nn.Conv2d(spec["n_channels"], 8, 3, padding=1),
        nn.ReLU(),
        MaxBlurPool(8),  # 8x8 -> 7x7 -> 4x4
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        MaxBlurPool(16),  # 4x4 -> 3x3 -> 2x2
        nn.Flatten(),
        nn.Linear(16 * 2 * 2, spec["n_classes"]),
    )


def _shift(x, dy, dx):
    """Shift images by (dy, dx) pixels, filling with zeros (the digits' background)."""
    h, w = x.shape[-2:]
    padded = F.pad(x, (max(dx, 0), max(-dx, 0), max(dy, 0), max(-dy, 0)))
    top, left = max(-dy, 0), max(-dx, 0)
    return padded[..., top : top + h, left : left + w]


def measure(model, x):
    with torch.no_grad():
        p = torch.softmax(model(x), dim=-1)
        tv = [
            0.5 * (torch.softmax(model(_shift(x, dy, dx)), dim=-1) - p).abs().sum(-1).mean()
            for dy, dx in ((0, 1), (1, 0))
        ]
    return float(sum(tv) / len(tv))
