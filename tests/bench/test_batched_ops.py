"""The trainer's faster batched max-pool (bench.batched_ops) gives the aten op's values, indices
and gradients bit for bit, on every path a captured graph runs."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.func import grad, vmap

from bench import batched_ops
from bench.graph import build_graph
from tests.capture_helpers import capture_docs

ATEN = torch.ops.aten.max_pool2d_with_indices.default
# (kernel, stride, padding, dilation, ceil_mode): vision's baseline, its example's overlapping
# windows, padding, dilation and ceil_mode
SETTINGS = [
    ([2, 2], [2, 2], [0, 0], [1, 1], False),
    ([2, 2], [1, 1], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([2, 2], [2, 2], [0, 0], [2, 2], False),
    ([3, 3], [2, 2], [0, 0], [1, 1], True),
]


def _inputs(ties: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 3, 9, 9, generator=gen)  # (runs, batch, C, H, W)
    if ties:  # ReLU's zeros, and whole windows of one value
        x = x.relu().round()
    return x


def _net(pool: Any, setting: tuple[Any, ...]) -> Any:
    def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        values, indices = pool(x * w, *setting)
        return values * (1 + indices.float() / 1000)  # both outputs reach the result
    return run


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("setting", SETTINGS)
def test_batched_training_step_is_the_aten_ops_bit_for_bit(setting: tuple[Any, ...], ties: bool) -> None:
    x = _inputs(ties)
    results = []
    for pool in (ATEN, batched_ops.max_pool2d_with_indices):
        w = torch.linspace(0.5, 1.5, 4).view(4, 1, 1, 1).expand(4, 3, 1, 1).clone().requires_grad_(True)
        out = vmap(_net(pool, setting))(x, w)
        (g,) = torch.autograd.grad((out * out).sum(), [w])
        results.append((out.detach(), g))
    (out_a, g_a), (out_b, g_b) = results
    assert torch.equal(out_a, out_b) and torch.equal(g_a, g_b)
    plain = vmap(lambda t: ATEN(t, *setting))(x)
    fast = vmap(lambda t: batched_ops.max_pool2d_with_indices(t, *setting))(x)
    assert all(torch.equal(a, b) for a, b in zip(plain, fast, strict=True))  # indices too, ties included


@pytest.mark.parametrize("setting", SETTINGS[:2])
def test_the_other_paths_are_the_aten_op(setting: tuple[Any, ...]) -> None:
    x = _inputs(ties=True)
    w = torch.ones(4, 3, 1, 1) * 0.7

    def loss(pool: Any) -> Any:
        return lambda w_, x_: (_net(pool, setting)(x_, w_) ** 2).sum()

    # vmap(grad(...)): the trainer's path for composite ops (a grad transform inside vmap)
    assert torch.equal(vmap(grad(loss(ATEN)))(w, x), vmap(grad(loss(batched_ops.max_pool2d_with_indices)))(w, x))
    # one model at a time, and a 3-D (unbatched) input under vmap
    assert all(torch.equal(a, b) for a, b in zip(ATEN(x[0], *setting), batched_ops.max_pool2d_with_indices(x[0], *setting), strict=True))
    three_d = x[:, 0]
    assert all(torch.equal(a, b) for a, b in zip(
        vmap(lambda t: ATEN(t, *setting))(three_d),
        vmap(lambda t: batched_ops.max_pool2d_with_indices(t, *setting))(three_d), strict=True))
    assert torch.equal(vmap(lambda t: torch.ops.aten.max_pool2d.default(t, *setting))(x),
                       vmap(lambda t: batched_ops.max_pool2d(t, *setting))(x))


def test_a_captured_pool_runs_in_its_faster_form() -> None:
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 3))
    docs, _ = capture_docs(model, [1, 8, 8])
    program, _ = build_graph(docs["train"], torch.device("cpu"))
    ops = [node.target for node in program.graph.nodes if node.op == "call_function"]
    assert any(op in batched_ops.FASTER.values() for op in ops)
    assert not any(op in batched_ops.FASTER for op in ops)
