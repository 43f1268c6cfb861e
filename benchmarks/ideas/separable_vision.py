"""An honest idea for the vision track, kept for benchmarks/variance_components.py: a
depthwise-separable second stage buys width at the same budget.

The baseline's second 3x3 conv (8 -> 16 channels, 1,168 parameters) is replaced by a
depthwise 3x3 conv (8 channels, 80 parameters) and a pointwise 1x1 conv to 32 channels
(288): the classifier then reads 32 x 2 x 2 features. 1,738 parameters (baseline 1,898).
"""

from torch import nn

HPARAMS = {}


def build_model(spec):
    return nn.Sequential(
        nn.Conv2d(spec["n_channels"], 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),
        nn.Conv2d(8, 32, 1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 2 * 2, spec["n_classes"]),
    )
