"""Faster forms of ops the trusted trainer runs on a vectorized group's batched tensors.

Under ``torch.func.vmap`` each op of a captured graph runs through PyTorch's batching rule on the
group's physical tensor, whose leading dimension is the runs. For a 2-D max-pool that rule
calls the contiguous (NCHW) CPU kernel on a (runs x batch, C, H, W) tensor: 3.0 ms for vision's
first pool at 16 runs of 64, where the channels-last kernel takes 0.6 ms (docs/performance.md,
"Session 30"), and vmap cannot ask for a memory format. ``max_pool2d_with_indices`` here finds
the maxima's indices with the channels-last kernel on the physical tensor, outside autograd, and
takes the values with a ``gather`` of the batched input at those indices: the same values and
indices bit for bit (the kernels agree, ties included: ``tests/bench/test_batched_ops.py``), and
the gradient of the gather is the pool's (each output's gradient added at its index).

Written here because no library has it: PyTorch's batching rules are its own, and a
``torch.library`` custom op with a vmap rule cannot take part in ``vmap(grad(...))`` (the
trainer's path for composite ops such as nn.GRU). Only a tensor batched by one plain vmap level
(the trainer's training step) takes the fast path; any other call (one model at a time, the
evaluation's forward under ``vjp``, a 3-D input) is the aten op itself. It uses functorch's
private wrappers (``torch._C._functorch``); torch is pinned (pyproject.toml), and the tests fail
if a new torch changes them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C import _functorch

_POOL = torch.ops.aten.max_pool2d_with_indices.default


def _plain_batched(x: torch.Tensor) -> bool:
    """``x`` is batched by one vmap level over a plain tensor (no grad transform, no nesting)."""
    if not _functorch.is_batchedtensor(x):
        return False
    inner = _functorch.get_unwrapped(x)
    return not (_functorch.is_batchedtensor(inner) or _functorch.is_functorch_wrapped_tensor(inner))


def max_pool2d_with_indices(x: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten.max_pool2d_with_indices(x, *args, **kwargs)``, its batched 4-D form through the
    channels-last kernel (the module's docstring)."""
    if x.dim() != 4 or not _plain_batched(x):
        out: tuple[torch.Tensor, torch.Tensor] = _POOL(x, *args, **kwargs)
        return out
    level, runs_dim = _functorch.maybe_get_level(x), _functorch.maybe_get_bdim(x)
    with torch.no_grad():
        physical = _functorch.get_unwrapped(x).movedim(runs_dim, 0)
        runs = physical.shape[0]
        rows = physical.reshape(-1, *physical.shape[2:]).contiguous(memory_format=torch.channels_last)
        found = _POOL(rows, *args, **kwargs)[1].contiguous()
        found = found.view(runs, -1, *found.shape[1:])
    indices = _functorch._add_batch_dim(found, 0, level)
    values = x.flatten(-2).gather(-1, indices.flatten(-2)).view(indices.shape)
    return values, indices


def max_pool2d(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``aten.max_pool2d``: the values of ``max_pool2d_with_indices``."""
    if x.dim() != 4 or not _plain_batched(x):
        out: torch.Tensor = torch.ops.aten.max_pool2d.default(x, *args, **kwargs)
        return out
    return max_pool2d_with_indices(x, *args, **kwargs)[0]


# aten op -> its faster form, for the graph's interpreter (bench.graph.build_graph)
FASTER: dict[Any, Any] = {
    torch.ops.aten.max_pool2d_with_indices.default: max_pool2d_with_indices,
    torch.ops.aten.max_pool2d.default: max_pool2d,
}
