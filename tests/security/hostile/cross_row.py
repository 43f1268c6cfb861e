"""Hostile (found by a red-team pass): in eval mode, each row's output reads the other rows of
its batch. On a custom track whose rows are sliding windows of one series, row i + 1's input
holds row i's target, so matching rows against each other answers test rows with their labels
('worked' at 1 % of the baseline's MSE). Here the simplest cross-row read: the batch's mean
output. Refused: the trainer also predicts secret rows one at a time and they must agree."""
from torch import nn


class M(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(spec["input_shape"][0], 32), nn.ReLU(),
                                 nn.Linear(32, spec["output_shape"][0]))

    def forward(self, x):
        y = self.net(x)
        if not self.training:
            y = y + 0.5 * (y.mean(0, keepdim=True) - y.detach().mean(0, keepdim=True)) + 0.1 * y.mean(0, keepdim=True)
        return y


def build_model(spec):
    return M(spec)
