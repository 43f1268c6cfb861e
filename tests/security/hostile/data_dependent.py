"""Not hostile, just not capturable: control flow on a tensor's value."""

from torch import nn


class Branchy(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.a = nn.Linear(d_in, d_out)
        self.b = nn.Linear(d_in, d_out)

    def forward(self, x):
        if x.sum() > 0:
            return self.a(x)
        return self.b(x)


def build_model(spec):
    return Branchy(spec["input_shape"][0], spec["output_shape"][0])
