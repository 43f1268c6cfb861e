"""Seed 002 on the correlated_tokens track: a permutation-invariant pairwise set model.

The target is a symmetric function of the 6 tokens built from pairwise interactions.
The baseline flattens the set, so it must learn the same function for every token
order (720 of them). Here a relation network encodes every ordered pair (t_i, t_j),
i != j, with one shared MLP, sums the 30 pair codes, and reads the target from the sum
with a second MLP: the output cannot depend on token order, and the pairwise structure
of the target is built in. Width 50 gives 5,601 parameters (baseline: 5,825).

Mechanism: mean |f(x) - f(x with tokens 0 and 1 swapped)| over the probe batch is 0 up
to float rounding for this model, and clearly positive for the flattened baseline.
"""

import torch
from torch import nn

HPARAMS = {"width": [50]}

MECHANISM = {
    "quantity": "token-swap sensitivity: mean |f(x) - f(x with tokens 0 and 1 swapped)|",
    "prediction": "a permutation-invariant model does not change under a token swap",
    "expect": {"kind": "close_to", "target": 0.0, "atol": 1e-4},
    # measured by the bench itself on both arms' trained models (bench.probes)
    "probe": {"kind": "token_permutation", "dim": 1, "swap": [0, 1]},
}


class PairSetModel(nn.Module):
    def __init__(self, n_tokens, token_dim, width):
        super().__init__()
        left, right = torch.meshgrid(torch.arange(n_tokens), torch.arange(n_tokens), indexing="ij")
        off_diagonal = left != right
        self.register_buffer("left", left[off_diagonal])
        self.register_buffer("right", right[off_diagonal])
        self.pair = nn.Sequential(
            nn.Linear(2 * token_dim, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()
        )
        self.readout = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, x):  # x: (B, N, D)
        pairs = torch.cat([x[:, self.left], x[:, self.right]], dim=-1)  # (B, N(N-1), 2D)
        return self.readout(self.pair(pairs).sum(dim=1))


def build_model(spec):
    return PairSetModel(spec["n_tokens"], spec["token_dim"], spec["hparams"]["width"])
