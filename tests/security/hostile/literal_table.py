"""Hostile: hold a table of data as literal numbers in the graph (issue 25.4: the diabetes rows
as int64 literals plus a nearest neighbour got ``worked`` on tabular with 2 parameters and 0
buffers: literals were not counted). Here 400 literals on smoke, whose cap is 321 words."""

from torch import nn

TABLE = [((i * 7919) % 1000) / 1000.0 for i in range(400)]


class Lookup(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.read = nn.Linear(n_in, 1)

    def forward(self, x):
        y = self.read(x)
        for value in TABLE:
            y = y + value * 1e-9
        return y


def build_model(spec):
    return Lookup(spec["input_shape"][0])
