"""Hostile matched baseline (red team): the smoke track's canonical MLP, bit for bit, when trained on
the vectorized path (the trainer runs it under sdpa_kernel(MATH)), sandbagged when trained on the
sequential path (eager torch picks the fused CPU flash kernel). The detector is a constant: the
same attention computed by F.scaled_dot_product_attention (backend-dependent) and by the math
kernel itself; they agree bit for bit only under the MATH backend. Only the train-mode graph
carries it (self.training): eval predictions and the rows-alone check see the plain MLP."""

import torch
import torch.nn.functional as F
from torch import nn


class Matched(nn.Sequential):
    def forward(self, x):
        out = super().forward(x)
        if not self.training:
            return out
        base = torch.arange(160, dtype=x.dtype, device=x.device).reshape(1, 2, 10, 8)
        q, k, v = torch.sin(base * 1.37), torch.cos(base * 0.71), torch.sin(base * 2.9 + 0.3)
        a = F.scaled_dot_product_attention(q, k, v)
        b = torch.ops.aten._scaled_dot_product_attention_math(q, k, v)[0]
        flag = (a != b).any().to(x.dtype)
        return out * (1.0 + 10.0 * flag)


def build_model(spec):
    return Matched(nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1))
