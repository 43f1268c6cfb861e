"""Example idea for the correlated_tokens track: a Deep Sets model (sum pooling).

The target does not depend on the order of the 6 tokens, but the baseline flattens
them and must learn that symmetry from data. Deep Sets encodes each token with one
shared MLP, sums the codes (order-free) and reads the target from the sum with a
second MLP. Widths 56/32 give 5,329 parameters (baseline: 5,825).

Contract: build_model(spec) -> torch.nn.Module mapping (B, *spec["input_shape"]) to
(B, *spec["output_shape"]). Optional: HPARAMS (extra sweep grid, values reach
build_model as spec["hparams"][name]), MECHANISM (a bench probe, or measure(model, x) -> float).
"""

from torch import nn

HPARAMS = {"width": [56]}

MECHANISM = {
    "quantity": "token-swap sensitivity: mean |f(x) - f(x with tokens 0 and 1 swapped)|",
    "prediction": "sum pooling makes the trained model (near) invariant to token order, "
    "so it changes less under a token swap than the flattened baseline",
    "expect": {"kind": "lower_than_baseline"},
    # measured by the bench itself on both arms' trained models (bench.probes)
    "probe": {"kind": "token_permutation", "dim": 1, "swap": [0, 1]},
}


class DeepSets(nn.Module):
    def __init__(self, token_dim, width, readout_width=32):
        super().__init__()
        self.encode = nn.Sequential(
            nn.Linear(token_dim, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()
        )
        self.readout = nn.Sequential(
            nn.Linear(width, readout_width), nn.ReLU(), nn.Linear(readout_width, 1)
        )

    def forward(self, x):  # x: (B, N, D)
        return self.readout(self.encode(x).sum(dim=1))


def build_model(spec):
    return DeepSets(spec["token_dim"], spec["hparams"]["width"])
