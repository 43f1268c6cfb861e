"""Hostile: pass the output-shape check (a fresh model is in train mode) and answer (B, 1, 1)
in eval mode, so that predictions broadcast against (B, 1) labels into a B x B matrix."""

from torch import nn


class Sneaky(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 32), nn.ReLU(), nn.Linear(32, d_out))

    def forward(self, x):
        out = self.net(x)
        return out if self.training else out.unsqueeze(-1)


def build_model(spec):
    return Sneaky(spec["input_shape"][0], spec["output_shape"][0])
