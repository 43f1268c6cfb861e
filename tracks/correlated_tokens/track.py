"""The correlated_tokens track: regression on sets of exchangeable, correlated tokens.

Each sample is a set of N tokens in R^D that share a common component (so tokens are
correlated but exchangeable). The target is symmetric in the tokens: a sum of pairwise
interactions tanh(t_i^T K t_j) through a fixed random symmetric kernel K, plus a small
per-token term, standardised, plus noise. The order of the tokens carries no
information, which a set model can exploit and a flattened MLP must learn.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch
from torch import nn

from bench.track import Splits, Track, load_card

CARD = load_card(__file__)

SHARED, OWN = 0.6, 0.8  # token = OWN * own noise + SHARED * set-level noise: corr 0.36
UNARY_WEIGHT = 0.3  # weight of the per-token term against the pairwise term
NOISE_SD = 0.1  # observation noise on the standardised target


@lru_cache(maxsize=4)
def _task(task_seed: int) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """Kernel K (D, D), unary weights u (D,), and the target's mean and sd (fixed per seed epoch)."""
    spec = CARD["spec"]
    d = spec["token_dim"]
    gen = torch.Generator().manual_seed(task_seed)
    a = torch.randn(d, d, generator=gen, dtype=torch.float64)
    kernel = (a + a.T) / (2 * d**0.5)
    unary = torch.randn(d, generator=gen, dtype=torch.float64)
    # Standardisation constants from a large fixed sample, so every seed shares units.
    tokens = _draw_tokens(20_000, gen, spec["n_tokens"], d)
    raw = _raw_target(tokens, kernel, unary)
    return kernel, unary, float(raw.mean()), float(raw.std())


def _draw_tokens(n: int, gen: torch.Generator, n_tokens: int, d: int) -> torch.Tensor:
    own = torch.randn(n, n_tokens, d, generator=gen, dtype=torch.float64)
    shared = torch.randn(n, 1, d, generator=gen, dtype=torch.float64)
    return OWN * own + SHARED * shared


def _raw_target(tokens: torch.Tensor, kernel: torch.Tensor, unary: torch.Tensor) -> torch.Tensor:
    """Sum over unordered pairs i < j of tanh(t_i^T K t_j), plus UNARY_WEIGHT * sum_i u^T tanh(t_i)."""
    gram = torch.tanh(tokens @ kernel @ tokens.transpose(1, 2))  # (n, N, N), symmetric
    pairs = (gram.sum((1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(1)) / 2
    single = (torch.tanh(tokens) @ unary).sum(1)
    return pairs + UNARY_WEIGHT * single


def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:
    """Draw train/val/test sets from one generator seeded by ``split_seed``; the task from
    ``task_seed`` (secret in the engine; ``None``: the card's public ``data_seed_base``)."""
    kernel, unary, mean, sd = _task(CARD["data_seed_base"] if task_seed is None else task_seed)
    spec, sizes = CARD["spec"], CARD["sizes"]
    gen = torch.Generator().manual_seed(CARD["data_seed_base"] * 1_000_003 + split_seed)
    n = sizes["train"] + sizes["val"] + sizes["test"]
    tokens = _draw_tokens(n, gen, spec["n_tokens"], spec["token_dim"])
    y = (_raw_target(tokens, kernel, unary) - mean) / sd
    y = y + NOISE_SD * torch.randn(n, generator=gen, dtype=torch.float64)
    x, y = tokens.to(torch.float32), y[:, None].to(torch.float32)
    a, b = sizes["train"], sizes["train"] + sizes["val"]
    return Splits(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:])


def build_baseline(spec: dict[str, Any]) -> nn.Module:
    """The canonical baseline: flatten the (N, D) set, two-hidden-layer ReLU MLP (64, 64)."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(spec["n_tokens"] * spec["token_dim"], 64),
        nn.ReLU(),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, 1),
    )


TRACK = Track(card=CARD, make_splits=make_splits, build_baseline=build_baseline)
