"""Example idea for the cifar10 track: a classifier that is left-right symmetric by construction.

Horizontal flips preserve CIFAR-10 labels, and few thousand training images rarely
show both orientations of a scene. Here the logits are the mean of the baseline CNN's
logits on the image and on its mirror image, f(x) = (g(x) + g(flip x)) / 2, so the
model is exactly flip-invariant and every gradient step learns from both orientations.
The CNN g is the baseline's (same parameter count); the cost is one extra forward pass,
done in the same batch.

Contract: build_model(spec) -> torch.nn.Module mapping (B, *spec["input_shape"]) to
(B, *spec["output_shape"]) logits. Optional: HPARAMS (extra sweep grid, values reach
build_model as spec["hparams"][name]), MECHANISM (a bench probe, or measure(model, x) -> float).
"""

import torch
from torch import nn

HPARAMS = {}

MECHANISM = {
    "quantity": "flip sensitivity: mean |logits(x) - logits(flip x)| / mean |logits(x)|",
    "prediction": "averaging over the mirror image makes the trained classifier exactly "
    "invariant to horizontal flips (the baseline is not)",
    "expect": {"kind": "close_to", "target": 0.0, "atol": 1e-4},
    # measured by the bench itself on both arms' trained models (bench.probes)
    "probe": {"kind": "equivariance", "transform": {"flip": {"dim": -1}}, "output": "none"},
}


class FlipSymmetric(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        n = x.shape[0]
        logits = self.net(torch.cat([x, torch.flip(x, dims=[-1])]))
        # Slices at n, not chunk(2): the graph is captured for any batch size, and chunk's
        # split of a symbolic 2n cannot be proven even.
        return 0.5 * (logits[:n] + logits[n:])


def build_model(spec):
    net = nn.Sequential(
        nn.Conv2d(spec["n_channels"], 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, spec["n_classes"]),
    )
    return FlipSymmetric(net)
