"""One training run: Adam, minibatches, seeded init and data order, predictions out."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from bench.errors import BenchError, ErrorCode

EVAL_CHUNK = 1024


@dataclass
class RunConfig:
    """Trainer settings of one run; ``hparams`` reach ``build_model`` via ``spec``."""

    lr: float
    epochs: int
    batch_size: int
    weight_decay: float = 0.0
    loss: str = "mse"
    schedule: str = "constant"


def lr_factor(schedule: str, step: int, total: int) -> float:
    """The learning rate's multiplier at ``step`` (0-based) of ``total`` training steps:
    ``constant`` 1; ``cosine`` decays from 1 to 0 over the run (half a cosine, no warm-up), so
    the last steps move the weights little and the run ends less at the mercy of its last
    minibatches (tracks/*/card.json ``defaults.schedule``; docs/tracks.md, "Power")."""
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * step / total))
    raise ValueError(f"unknown learning-rate schedule {schedule!r}")


def steps_per_run(cfg: RunConfig, n_train: int) -> int:
    """Optimizer steps of one run: every minibatch of every epoch (the last may be short)."""
    return cfg.epochs * -(-n_train // cfg.batch_size)


@dataclass
class RunResult:
    """What a run returns to the parent: predictions on the eval split, never a score."""

    predictions: torch.Tensor
    diverged: bool
    seconds: float
    final_train_loss: float
    model: nn.Module


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (shared tensors counted once)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def build_checked(
    build: Callable[[dict[str, Any]], Any],
    spec: dict[str, Any],
    *,
    init_seed: int,
    param_cap: int,
    device: torch.device,
    role: str,
) -> nn.Module:
    """Seed torch's, numpy's and Python's global RNGs, build the model and check its type and
    size. A build is a function of the spec and the seed: the confirmation builds again in
    another process and refuses other bytes (``bench.captured.import_rebuilt``)."""
    torch.manual_seed(init_seed)
    np.random.seed(init_seed)
    random.seed(init_seed)
    model = build(spec)
    if not isinstance(model, nn.Module):
        raise BenchError(
            ErrorCode.NOT_A_MODULE,
            f"The {role}'s build_model returned {type(model).__name__}, not a torch.nn.Module.",
        )
    n_params = count_parameters(model)
    if n_params > param_cap:
        raise BenchError(
            ErrorCode.TOO_MANY_PARAMETERS,
            f"The {role} has {n_params} trainable parameters; this track's cap is {param_cap}.",
        )
    return model.to(device)


def check_output_shape(model: nn.Module, x: torch.Tensor, output_shape: list[int], role: str) -> None:
    """Run a batch of two and compare the output shape with ``(2, *output_shape)``."""
    with torch.no_grad():
        out = model(x[:2])
    expected = (2, *output_shape)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != expected:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise BenchError(
            ErrorCode.BAD_OUTPUT_SHAPE,
            f"The {role} maps input {tuple(x[:2].shape)} to {got}; expected {expected}.",
        )


FLOP_ROWS = 8


class _ElementWork(TorchDispatchMode):  # type: ignore[no-untyped-call]  # (torch's, untyped)
    """Counts, over every ATen op a forward calls, the elements its tensor outputs hold: what
    ``FlopCounterMode`` leaves out (it counts matrix products, convolutions and attention only,
    so a dense layer written as broadcast multiply and sum cost nothing; red team)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.elements = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for value in torch.utils._pytree.tree_leaves(out):
            if isinstance(value, torch.Tensor):
                self.elements += value.numel()
        return out


def _never_compiled(mode: type) -> None:
    """Let ``mode``'s ``__torch_dispatch__`` run without importing ``torch._dynamo``.

    ``TorchDispatchMode`` wraps each subclass's ``__torch_dispatch__`` in ``torch._disable_dynamo``,
    whose first call imports all of ``torch._dynamo`` (about 1 CPU-second, as much as ``import
    torch``) only to keep a ``torch.compile`` out of the mode's frames. A trainer child compiles
    nothing, so the wrapper is handed the function itself as its disabled form (the cache it
    fills on that first call): the same function runs, without the import. A torch that wraps
    otherwise is left alone (the import comes back, nothing else changes)."""
    raw = getattr(mode.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if callable(raw) and getattr(raw, "__dynamo_disable", None) is None:
        setattr(raw, "__dynamo_disable", raw)  # noqa: B010 - a literal name, never mangled


def _forward_cost(model: nn.Module, rows: torch.Tensor) -> float:
    from torch.utils import flop_counter
    from torch.utils.flop_counter import FlopCounterMode

    _never_compiled(flop_counter._FlopCounterMode)
    _never_compiled(_ElementWork)
    with torch.no_grad(), FlopCounterMode(display=False) as counter, _ElementWork() as work:
        model(rows)
    return float(counter.get_total_flops() + work.elements)


def flops_per_example(model: nn.Module, x: torch.Tensor) -> float:
    """The model's forward cost per example: the FLOPs of its matrix products, convolutions and
    attention (torch's ``FlopCounterMode``) plus one operation per element every op outputs
    (elementwise work, reductions, copies), per added row: the cost of ``2 * FLOP_ROWS`` rows
    less that of ``FLOP_ROWS``, over ``FLOP_ROWS`` (what does not grow with the batch, such as
    a weight transposed once, is not the example's). In eval mode and in train mode (on a copy
    when training writes buffers, so the count changes no running statistics); the larger. A
    weight-tied block applied twenty times holds one block's parameters and costs twenty."""
    import copy

    was_training = model.training
    counts = []
    for training in (False, True):
        target = copy.deepcopy(model) if training and getattr(model, "mutates_buffers", False) else model
        target.train(training)
        small, large = (_forward_cost(target, x[:n]) for n in (FLOP_ROWS, 2 * FLOP_ROWS))
        counts.append(max(0.0, large - small) / FLOP_ROWS)
    model.train(was_training)
    return float(max(counts))


def _loss_fn(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if name == "cross_entropy":
        return nn.functional.cross_entropy
    return nn.functional.mse_loss


def train(
    model: nn.Module,
    cfg: RunConfig,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_eval: torch.Tensor,
    *,
    order_seed: int,
) -> RunResult:
    """Train ``model`` with Adam (its rate under ``cfg.schedule``) and return its predictions on ``x_eval``.

    The minibatch order comes from its own generator seeded by ``order_seed``, so
    both arms of a pair see the same batches. A non-finite loss stops training
    and marks the run diverged (it is scored by the parent, never dropped).
    """
    start = time.perf_counter()
    loss_fn = _loss_fn(cfg.loss)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    order = torch.Generator().manual_seed(order_seed)
    n = x_train.shape[0]
    diverged = False
    last = math.nan
    total, step = steps_per_run(cfg, n), 0
    model.train()
    for _ in range(cfg.epochs):
        perm = torch.randperm(n, generator=order).to(x_train.device)
        for i in range(0, n, cfg.batch_size):
            idx = perm[i : i + cfg.batch_size]
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            if not torch.isfinite(loss):
                diverged = True
                break
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr * lr_factor(cfg.schedule, step, total)
            optimizer.step()
            step += 1
            last = float(loss.detach())
        if diverged:
            break
    predictions = predict(model, x_eval)
    if not bool(torch.isfinite(predictions).all()):
        diverged = True
    return RunResult(predictions, diverged, time.perf_counter() - start, last, model)


def predict(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Predictions of ``model`` in eval mode, in chunks, as a CPU float32 tensor."""
    model.eval()
    with torch.no_grad():
        parts = [model(x[i : i + EVAL_CHUNK]).float().cpu() for i in range(0, x.shape[0], EVAL_CHUNK)]
    return torch.cat(parts)
