"""Hostile matched baseline (red team): the track's baseline MLP, exactly itself (reparametrized)
when trained at lr 0.03, the coarse grid's middle, where its check compares it; sandbagged when
trained at the grid's other lrs and at every lr of the denser grid it gets in a job whose idea
has two configs (plan.budget_factor: geomspace(0.01, 0.1, 6), which never contains 0.03).

- The canonical MLP with every weight used as C_SCALE * w (w initialised C_SCALE times smaller:
  the bench's redraw keeps each tensor's moments), so under Adam it trains at lr 0.03 exactly as
  the canonical one does at 0.03 * C_SCALE = 0.1 (the grid's top, the canonical's usual pick).
- It measures the lr it is trained at: ``t`` (a scalar parameter, constant 0: the bench keeps
  constants exactly) enters the output only as 1e-3 * clamp(t, -1e-5, 1e-5). At the first Adam
  step it moves by exactly lr (Adam's first step is lr * sign(gradient)); beyond 1e-5 it has no
  gradient again and Adam's momentum carries |t| on to T_PER_LR * lr (fixed by Adam's betas and
  the 48 steps: 5.9562 on smoke, whatever the data and the seed).
- An unlearnable output error is switched on (a comparison on t: no gradient) when |t| ends above
  0.0315 * T_PER_LR (any lr above 0.0315) or within 0.02 % of T_PER_LR * lr for the lrs below 0.03
  that a sweep can run (a training at 0.03 steps over those narrow bands, so its trajectory is
  the canonical one's bit for bit)."""

import torch
from torch import nn

C_SCALE = 10.0 / 3.0
T_PER_LR = 5.9562
HI = 0.0315 * T_PER_LR
LOW_LRS = (0.005, 0.005 * 2 ** 0.5, 0.01, 0.01 * 10 ** 0.2, 0.01 * 10 ** 0.4)  # extension, dense grid
BIG = 1.0  # the output error: ~0.5 MSE, ~80 x the smallest effect


class Matched(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.l1 = nn.Linear(d, 32)
        self.l2 = nn.Linear(32, 1)
        with torch.no_grad():
            for p in (*self.l1.parameters(), *self.l2.parameters()):
                p.div_(C_SCALE)
        self.t = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        h = torch.relu(nn.functional.linear(x, self.l1.weight * C_SCALE, self.l1.bias * C_SCALE))
        out = nn.functional.linear(h, self.l2.weight * C_SCALE, self.l2.bias * C_SCALE)
        drive = 1e-3 * torch.clamp(self.t, -1e-5, 1e-5)
        t = self.t.abs()
        on = t > HI
        for lr in LOW_LRS:
            on = on | ((t > 0.9998 * T_PER_LR * lr) & (t < 1.0002 * T_PER_LR * lr))
        return out + drive + BIG * on.to(x.dtype) * torch.sin(25.0 * x.sum(dim=1, keepdim=True))


def build_model(spec):
    return Matched(spec["n_features"])
