"""A custom track: derivatives of band-limited functions on SO(3) (after seeds/000).

Register it with ``ideabench track register examples/tracks/so3_spectral.py`` or
``POST /v1/tracks``. A track file defines three things, like a built-in track:
``CARD`` (a literal dict), a deterministic ``make_splits(seed)`` and the canonical
``build_baseline(spec)``. It may import torch, numpy, math and the standard library.

The task. A function on the rotation group, f(R) = sum_k c_k phi_k(R), is given by
its 54 coefficients c in the basis of monomials of degree 1 (the 9 entries of R,
row-major) and degree 2 (the 45 products R_a R_b, a <= b, in that order), so f is
band-limited to degree 2. The target at each of 6 fixed query rotations R_q is the
squared norm of f's gradient along the three generators:
y_q = s * sum_i (X_i f)(R_q)^2 with (X_i f)(R) = d/dt f(R exp(t G_i)) at t = 0 and
G_i the standard basis of so(3); s normalizes y to mean 1.

The baseline reads derivative channels by central finite differences (step h = 0.2)
at each query, plus f(R_q), and maps them with one MLP shared across queries.
"""

import math

import numpy as np
import torch
from torch import nn

CARD = {
    "name": "so3_spectral",
    "title": "Generator derivatives of band-limited functions on SO(3)",
    "description": (
        "Input x: float32 (B, 54), the coefficients c of f(R) = sum_k c_k phi_k(R) on SO(3) in the "
        "basis of monomials of degree 1 (the 9 entries of R, row-major) and degree 2 (the 45 products "
        "R_a R_b with a <= b, a and b row-major indices 0..8, in lexicographic order). Degree-1 "
        "coefficients are N(0, 1), degree-2 coefficients N(0, 0.25). Target y: float32 (B, 6), at each "
        "query rotation R_q (spec['query_axis_angles'], axis-angle vectors, Rodrigues' formula) the "
        "squared gradient norm sum_i ((X_i f)(R_q))^2 along the left-invariant generators "
        "(X_i f)(R) = d/dt f(R exp(t G_i)) at t=0, G_0 = [[0,0,0],[0,0,-1],[0,1,0]], "
        "G_1 = [[0,0,1],[0,0,0],[-1,0,0]], G_2 = [[0,-1,0],[1,0,0],[0,0,0]], scaled by a fixed constant "
        "so that y has mean about 1. No noise. The baseline uses central finite differences (h = 0.2) "
        "for the derivative channels; exact generator derivatives are linear in c and computable "
        "from the basis."
    ),
    "domain": "SO(3) orientation fields",
    "justification": (
        "No built-in track has functions on a Lie group whose targets depend on derivatives along "
        "the group's generators; ideas about exact Lie-algebra derivative channels (versus finite "
        "differences) need that structure to show an effect."
    ),
    "spec": {
        "task": "regression",
        "input_shape": [54],
        "output_shape": [6],
        "n_coefficients": 54,
        "n_queries": 6,
        "query_axis_angles": [
            [0.006, 1.423, -1.306], [-1.755, -0.896, -1.954], [0.042, 0.933, -0.343],
            [-0.621, 0.49, 0.357], [0.215, -1.896, -0.06], [0.264, -0.511, -0.174],
        ],
        "finite_difference_step": 0.2,
    },
    "metric": {"name": "mse", "description": "mean squared error over the 6 query targets, test split"},
    "defaults": {"epochs": 20, "batch_size": 64, "lr_grid": [0.003, 0.01, 0.03], "weight_decay": 0.0},
    "param_cap": 20000,
    "max_configs": 4,
    "baseline": {
        "name": "fd_generator_mlp",
        "description": "central finite-difference derivative channels (h = 0.2) and f(R_q) at each "
        "query, then one MLP 4-32-32-1 shared across the 6 queries (1,249 parameters)",
    },
}

SIZES = {"train": 1024, "val": 256, "test": 512}
GENERATORS = np.array([
    [[0, 0, 0], [0, 0, -1], [0, 1, 0]],
    [[0, 0, 1], [0, 0, 0], [-1, 0, 0]],
    [[0, -1, 0], [1, 0, 0], [0, 0, 0]],
], dtype=np.float64)
PAIRS = [(a, b) for a in range(9) for b in range(a, 9)]


def rotation(axis_angle):
    """Rodrigues' formula: exp of the skew matrix of ``axis_angle``."""
    v = np.asarray(axis_angle, dtype=np.float64)
    k = np.einsum("i,ijk->jk", v, GENERATORS)
    theta = np.linalg.norm(v)
    if theta < 1e-12:
        return np.eye(3)
    return np.eye(3) + math.sin(theta) / theta * k + (1 - math.cos(theta)) / theta**2 * (k @ k)


def basis(r):
    """phi(R): the 54 monomials of degree 1 and 2 in the entries of R."""
    e = r.reshape(9)
    return np.concatenate([e, [e[a] * e[b] for a, b in PAIRS]])


def queries():
    return [rotation(v) for v in CARD["spec"]["query_axis_angles"]]


def exact_derivatives():
    """(6, 3, 54): X_i phi_k at each query, by the product rule with d/dt R exp(tG) = R G."""
    out = []
    for r in queries():
        rows = []
        for g in GENERATORS:
            e, de = r.reshape(9), (r @ g).reshape(9)
            rows.append(np.concatenate([de, [de[a] * e[b] + e[a] * de[b] for a, b in PAIRS]]))
        out.append(rows)
    return np.array(out)


def finite_difference_derivatives(h):
    """(6, 3, 54): central differences (phi(R exp(hG)) - phi(R exp(-hG))) / 2h."""
    out = []
    for r in queries():
        out.append([(basis(r @ rotation(h * g_axis)) - basis(r @ rotation(-h * g_axis))) / (2 * h)
                    for g_axis in np.eye(3)])
    return np.array(out)


def _targets(c, derivative, scale):
    d = np.einsum("qik,nk->nqi", derivative, c)
    return scale * (d**2).sum(-1)


def _scale(derivative):
    c = _coefficients(np.random.default_rng(12345), 4096)
    return 1.0 / _targets(c, derivative, 1.0).mean()


def _coefficients(rng, n):
    c = rng.standard_normal((n, 54))
    c[:, 9:] *= 0.5
    return c


def make_splits(seed):
    """Train / val / test drawn from one generator seeded by ``seed`` (deterministic)."""
    derivative = exact_derivatives()
    rng = np.random.default_rng(seed)
    n = sum(SIZES.values())
    c = _coefficients(rng, n)
    y = _targets(c, derivative, _scale(derivative))
    a, b = SIZES["train"], SIZES["train"] + SIZES["val"]
    x, y = c.astype(np.float32), y.astype(np.float32)
    return {"x_train": x[:a], "y_train": y[:a], "x_val": x[a:b], "y_val": y[a:b],
            "x_test": x[b:], "y_test": y[b:]}


class GeneratorChannelMLP(nn.Module):
    """Derivative channels (a fixed linear map of c) and f(R_q), then a shared MLP per query."""

    def __init__(self, derivative, values, width):
        super().__init__()
        self.register_buffer("derivative", torch.as_tensor(derivative, dtype=torch.float32))
        self.register_buffer("values", torch.as_tensor(values, dtype=torch.float32))
        self.mlp = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, 1))

    def forward(self, x):  # x: (B, 54)
        d = torch.einsum("qik,bk->bqi", self.derivative, x)  # (B, 6, 3)
        v = (x @ self.values.T).unsqueeze(-1)  # (B, 6, 1)
        return self.mlp(torch.cat([d, v], dim=-1)).squeeze(-1)  # (B, 6)


def build_baseline(spec):
    h = spec["finite_difference_step"]
    values = np.array([basis(r) for r in queries()])
    return GeneratorChannelMLP(finite_difference_derivatives(h), values, width=32)
