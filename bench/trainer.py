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
