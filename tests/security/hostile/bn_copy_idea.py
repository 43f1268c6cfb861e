"""The idea: the smoke track's canonical MLP, unchanged in function; a dead BatchNorm branch
(multiplied by 0) keeps running statistics, so the job trains both arms on the sequential path."""

from torch import nn


class Copy(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 1))
        self.bn = nn.BatchNorm1d(1, affine=False)

    def forward(self, x):
        out = self.net(x)
        return out + 0.0 * self.bn(out.detach())


def build_model(spec):
    return Copy(spec["n_features"])
