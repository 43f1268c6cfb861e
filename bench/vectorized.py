"""Many runs of one arm trained as one batched model (torch.func: stack, functional_call, vmap).

A *group* is a list of runs whose models share an architecture (same hparams) and
whose trainer settings share epochs, batch size, weight decay and loss; they may
differ in learning rate, init seed, data (protocol seed) and minibatch order. Each
run reproduces ``bench.trainer.train`` (same init, same minibatches, Adam with the
same update formula) up to float rounding: the runs' trainable parameters live in
one flat (R, P) tensor (views per parameter feed ``functional_call``), gradients
come from one autograd backward through the ``vmap``-ed forward (the faster forms
of ``bench.batched_ops`` among its ops, one-directional GRUs and LSTMs included), or from
``vmap(grad(loss))`` for composite ops that batch only under a functorch transform (a
bidirectional GRU), and one Adam step updates every run at once with its own
learning rate. A run whose loss turns non-finite is frozen and marked diverged,
as the one-at-a-time trainer stops it. Attention runs on the math SDPA kernel
(fused CPU kernels have no batching rule), so numbers can differ from the
one-at-a-time path by float rounding; the protocol puts both arms on one path.

Models that vmap cannot batch faithfully (BatchNorm running statistics, randomness
such as dropout, data-dependent control flow, ops without batching rules) are
detected by ``probe`` before training; the caller then trains one run at a time.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from bench.trainer import EVAL_CHUNK, RunConfig, RunResult, _loss_fn, lr_factor, steps_per_run

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
PROBE_BATCH = 8


class NotVectorizable(Exception):
    """The models of a group cannot be trained as one batched model."""


@contextlib.contextmanager
def _math_attention() -> Iterator[None]:
    """Use the math SDPA kernel (fused CPU kernels have no batching rule under vmap)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - older torch
        yield
        return
    with sdpa_kernel(SDPBackend.MATH):
        yield


def _static_reason(models: Sequence[nn.Module]) -> str | None:
    """A reason the group cannot be batched that needs no forward pass, or None."""
    first = models[0]
    if getattr(first, "mutates_buffers", False):  # a captured model (bench.graph) with BatchNorm
        return "the model updates buffers in training (running statistics)"
    for module in first.modules():
        if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats:
            return f"{type(module).__name__} keeps running statistics (buffers updated in training)"
    shapes = [(n, tuple(p.shape), p.dtype, p.device) for n, p in first.named_parameters()]
    for model in models[1:]:
        if type(model) is not type(first):
            return "the runs' models have different types"
        other = [(n, tuple(p.shape), p.dtype, p.device) for n, p in model.named_parameters()]
        if other != shapes:
            return "the runs' models have different parameter shapes"
    trainable = [p for p in first.parameters() if p.requires_grad]
    if not trainable:
        return "the model has no trainable parameters"
    if len({(p.dtype, p.device) for p in trainable}) != 1:
        return "the model mixes parameter dtypes or devices"
    if not trainable[0].dtype.is_floating_point:
        return "the model's parameters are not floating point"
    return None


class _Stacked:
    """The trainable parameters of R runs as one flat (R, P) tensor, plus stacked extras."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        first = models[0]
        self.base = first
        self.n = len(models)
        self.train_names = [n for n, p in first.named_parameters() if p.requires_grad]
        frozen = [n for n, p in first.named_parameters() if not p.requires_grad]
        self.buffer_names = [n for n, _ in first.named_buffers()]
        per_model = [dict(m.named_parameters()) for m in models]
        self.shapes = [tuple(per_model[0][n].shape) for n in self.train_names]
        sizes = [math.prod(s) for s in self.shapes]
        with torch.no_grad():
            self.flat = torch.cat(
                [torch.cat([pm[n].detach().reshape(1, -1) for n in self.train_names], dim=1) for pm in per_model]
            ).contiguous()
        self.offsets = [0, *itertools.accumulate(sizes)]
        self.views = self.views_of(self.flat)
        with torch.no_grad():
            self.extras: dict[str, torch.Tensor] = {
                n: torch.stack([pm[n].detach() for pm in per_model]) for n in frozen
            }
            per_buffers = [dict(m.named_buffers()) for m in models]
            for n in self.buffer_names:
                self.extras[n] = torch.stack([pb[n].detach() for pb in per_buffers])

    def views_of(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each parameter as a (R, *shape) view into ``flat``."""
        return {
            name: flat[:, self.offsets[i] : self.offsets[i + 1]].view(self.n, *shape)
            for i, (name, shape) in enumerate(zip(self.train_names, self.shapes, strict=True))
        }

    def write_back(self, models: Sequence[nn.Module]) -> None:
        """Copy each run's trained parameters into its own module."""
        with torch.no_grad():
            for r, model in enumerate(models):
                params = dict(model.named_parameters())
                buffers = dict(model.named_buffers())
                for name in self.train_names:
                    params[name].copy_(self.views[name][r])
                for name, value in self.extras.items():
                    target = params.get(name, buffers.get(name))
                    if target is not None:
                        target.copy_(value[r])


def _binder(base: nn.Module, names: Sequence[str]) -> Any:
    """``call(values, x)``: ``base(x)`` with ``values[i]`` in place of the parameter or buffer
    ``names[i]``, restored afterwards; None when a name is neither (the caller passes no
    tied weights: one tensor under two names needs functional_call's tie handling).

    The same substitution as ``torch.func.functional_call``, set straight into the owning
    modules' ``_parameters``/``_buffers`` tables found once per group instead of on every
    call: that generic path costs about 15% of a small model's batched step.
    """
    slots: list[tuple[dict[str, Any], str]] = []
    for name in names:
        owner_name, _, attr = name.rpartition(".")
        owner = base.get_submodule(owner_name)
        for table in (owner._parameters, owner._buffers):
            if attr in table:
                slots.append((table, attr))
                break
        else:
            return None

    def call(values: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        saved = [table[attr] for table, attr in slots]
        try:
            for (table, attr), value in zip(slots, values, strict=True):
                table[attr] = value
            out: torch.Tensor = base(x)
        finally:
            for (table, attr), value in zip(slots, saved, strict=True):
                table[attr] = value
        return out

    return call


def _functions(stacked: _Stacked, loss_name: str) -> tuple[Any, Any]:
    """``step(x, y)`` -> (flat gradients (R, P), losses (R,)) and ``forward(x)`` -> outputs,
    for the current parameters of ``stacked``; x and y carry a leading run axis."""
    from torch.func import functional_call, grad_and_value, vjp, vmap

    loss_fn = _loss_fn(loss_name)
    base = stacked.base
    names = [*stacked.train_names, *stacked.extras]
    extras = tuple(stacked.extras.values())
    n_runs = stacked.n
    # Tied weights (one tensor under two names) need functional_call's tie handling.
    tied = len(list(base.named_parameters(remove_duplicate=False))) != len(list(base.named_parameters())) or (
        len(list(base.named_buffers(remove_duplicate=False))) != len(list(base.named_buffers()))
    )
    call = None if tied else _binder(base, names)
    if call is None:
        def call(values: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = functional_call(base, dict(zip(names, values, strict=True)), (x,), tie_weights=tied)
            return out

    def loss_one(params: tuple[torch.Tensor, ...], extra: tuple[torch.Tensor, ...],
                 x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(call((*params, *extra), x), y)

    def forward_one(params: tuple[torch.Tensor, ...], extra: tuple[torch.Tensor, ...],
                    x: torch.Tensor) -> torch.Tensor:
        # Under a grad transform (vjp: forward only) composite ops (a bidirectional GRU)
        # decompose into ops that vmap can batch; plain no-grad calls would not.
        out: torch.Tensor = vjp(lambda p: call((*p, *extra), x), params)[0]
        return out

    def traced_one(params: tuple[torch.Tensor, ...], extra: tuple[torch.Tensor, ...],
                   x: torch.Tensor) -> torch.Tensor:
        return call((*params, *extra), x)

    batched_loss = vmap(loss_one)
    functorch_step = vmap(grad_and_value(loss_one))
    batched_forward = vmap(forward_one)
    batched_traced = vmap(traced_one)
    mode = ["autograd"]

    def params() -> tuple[torch.Tensor, ...]:
        return tuple(stacked.views[name] for name in stacked.train_names)

    def flatten(grads: Sequence[torch.Tensor | None], like: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([
            (g if g is not None else torch.zeros_like(p)).reshape(n_runs, -1) for g, p in zip(grads, like, strict=True)
        ], dim=1)

    def step(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-run flat gradients (R, P) and losses (R,).

        Plain autograd through the batched forward is fastest; composite ops that no faster
        form batches (a bidirectional GRU) batch only under a functorch grad transform, used
        when autograd fails.
        """
        if mode[0] == "autograd":
            try:
                with torch.enable_grad():
                    # Leaves that share storage with the flat tensor: no slice/view nodes to
                    # differentiate through, one gradient per parameter.
                    leaves = tuple(p.detach().requires_grad_(True) for p in params())
                    losses = batched_loss(leaves, extras, x, y)
                    grads = torch.autograd.grad(losses.sum(), leaves, allow_unused=True)
                return flatten(grads, leaves), losses.detach()
            except Exception:  # noqa: BLE001 - retried below; a real error raises there
                mode[0] = "functorch"
        current = params()
        grads, losses = functorch_step(current, extras, x, y)
        return flatten(grads, current), losses.detach()

    def forward(x: torch.Tensor) -> torch.Tensor:
        """The runs' outputs, batched as the training step was: where plain autograd through the
        batched forward trained them, the same (parameters that require grad, the graph's faster
        ops of bench.batched_ops); else under vjp, as the functorch step."""
        if mode[0] == "autograd":
            with torch.enable_grad():
                leaves = tuple(p.detach().requires_grad_(True) for p in params())
                traced: torch.Tensor = batched_traced(leaves, extras, x)
            return traced.detach()
        out: torch.Tensor = batched_forward(params(), extras, x)
        return out

    return step, forward


def probe(models: Sequence[nn.Module], x: torch.Tensor, y: torch.Tensor, loss: str) -> str | None:
    """Why ``models`` cannot be trained batched (None: they can).

    Compares one batched loss and gradient on a small batch with the same computed
    one model at a time, in training mode; an exception, a vmap warning about a
    missing batching rule (a slow per-run loop), a changed buffer or a mismatch all
    mean: train one at a time.
    """
    reason = _static_reason(models)
    if reason is not None:
        return reason
    loss_fn = _loss_fn(loss)
    xb, yb = x[:PROBE_BATCH], y[:PROBE_BATCH]
    try:
        buffers_before = [[b.detach().clone() for b in m.buffers()] for m in models]
        for m in models:
            m.train()
        expected = []
        with _math_attention():
            for m in models:
                m.zero_grad(set_to_none=True)
                value = loss_fn(m(xb), yb)
                value.backward()  # type: ignore[no-untyped-call]
                grads = [
                    p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                    for p in m.parameters() if p.requires_grad
                ]
                m.zero_grad(set_to_none=True)
                expected.append((value.detach(), grads))
            stacked = _Stacked(models)
            step, forward = _functions(stacked, loss)
            xs = xb.unsqueeze(0).expand(len(models), *xb.shape)
            ys = yb.unsqueeze(0).expand(len(models), *yb.shape)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                flat_grads, values_b = step(xs, ys)
                grads_b = stacked.views_of(flat_grads)
                for m in models:
                    m.eval()
                with torch.no_grad():
                    outs_b = forward(xs)
                    outs = [m(xb) for m in models]
                for m in models:
                    m.train()
        slow = [w for w in caught if "batching rule" in str(w.message)]
        if slow:
            return f"vmap has no batching rule for an op of the model ({str(slow[0].message)[:200]})"
        for m, before in zip(models, buffers_before, strict=True):
            for b, old in zip(m.buffers(), before, strict=True):
                if not torch.equal(b, old):
                    return "the model changes its buffers in training"
        for r, out in enumerate(outs):
            if not torch.allclose(outs_b[r], out, rtol=1e-4, atol=1e-6):
                return "batched and one-at-a-time eval outputs differ"
        for r, (value, grads) in enumerate(expected):
            if not torch.allclose(values_b[r], value, rtol=1e-4, atol=1e-6):
                return "batched and one-at-a-time losses differ (randomness or state in forward?)"
            for name, g in zip(stacked.train_names, grads, strict=True):
                if not torch.allclose(grads_b[name][r], g, rtol=1e-3, atol=1e-5):
                    return f"batched and one-at-a-time gradients of {name} differ"
    except Exception as exc:  # noqa: BLE001 - any failure means: not vectorizable
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return None


def _gather(data: torch.Tensor, which: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``data[which[r], idx[r]]`` for every run r: (R, B, ...)."""
    return data[which.unsqueeze(1), idx]


def train_group(
    models: Sequence[nn.Module],
    configs: Sequence[RunConfig],
    datasets: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    data_index: Sequence[int],
    order_seeds: Sequence[int],
) -> list[RunResult]:
    """Train run r = (models[r], configs[r]) on ``datasets[data_index[r]]`` = (x_train, y_train, x_eval).

    All configs must share epochs, batch_size, weight_decay and loss; the datasets
    must share shapes. Raises ``NotVectorizable`` when the group cannot be batched.
    Results come back in run order, like ``bench.trainer.train`` would give them.
    """
    start = time.perf_counter()
    first = configs[0]
    for cfg in configs[1:]:
        if (cfg.epochs, cfg.batch_size, cfg.weight_decay, cfg.loss, cfg.schedule) != (
            first.epochs, first.batch_size, first.weight_decay, first.loss, first.schedule
        ):
            raise NotVectorizable("the runs differ in epochs, batch size, weight decay, loss or schedule")
    reason = _static_reason(models)
    if reason is not None:
        raise NotVectorizable(reason)
    n_runs = len(models)
    x_all = torch.stack([d[0] for d in datasets])
    y_all = torch.stack([d[1] for d in datasets])
    x_eval_all = torch.stack([d[2] for d in datasets])
    device = x_all.device
    which = torch.tensor(list(data_index), device=device)
    n = x_all.shape[1]
    perms = torch.stack([
        torch.stack([torch.randperm(n, generator=gen) for _ in range(first.epochs)])
        for gen in (torch.Generator().manual_seed(int(s)) for s in order_seeds)
    ]).to(device)  # (R, epochs, n): the same draws as the one-at-a-time trainer

    stacked = _Stacked(models)
    step, forward = _functions(stacked, first.loss)
    flat = stacked.flat
    shape = (n_runs, 1)
    neg_lrs = torch.tensor([-float(c.lr) for c in configs], dtype=flat.dtype, device=device).view(shape)
    wd = first.weight_decay
    exp_avg = torch.zeros_like(flat)
    exp_avg_sq = torch.zeros_like(flat)
    alive = torch.ones(n_runs, dtype=torch.bool, device=device)
    any_dead = False
    t = 0
    total = steps_per_run(first, n)
    for model in models:
        model.train()
    with _math_attention(), torch.no_grad():
        for epoch in range(first.epochs):
            if any_dead and not bool(alive.any()):
                break
            for i in range(0, n, first.batch_size):
                idx = perms[:, epoch, i : i + first.batch_size]
                xb = _gather(x_all, which, idx)
                yb = _gather(y_all, which, idx)
                g, losses = step(xb, yb)
                finite = torch.isfinite(losses)
                if not bool(finite.all()) or any_dead:
                    alive &= finite
                    any_dead = True
                t += 1
                if wd != 0.0:
                    g = g.add(flat, alpha=wd)
                if any_dead:
                    keep = alive.view(shape)
                    g = torch.where(keep, g, 0.0)
                    old = (flat.clone(), exp_avg.clone(), exp_avg_sq.clone())
                exp_avg.lerp_(g, 1 - BETA1)
                exp_avg_sq.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
                bias_correction1 = 1 - BETA1**t
                bias_correction2_sqrt = (1 - BETA2**t) ** 0.5
                step_size = neg_lrs * lr_factor(first.schedule, t - 1, total) / bias_correction1
                denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(EPS)
                flat.add_(step_size * exp_avg / denom)
                if any_dead:
                    for now, before in zip((flat, exp_avg, exp_avg_sq), old, strict=True):
                        now.copy_(torch.where(keep, now, before))
        stacked.base.eval()
        parts = [
            forward(x_eval_all[:, i : i + EVAL_CHUNK][which]).detach().float().cpu()
            for i in range(0, x_eval_all.shape[1], EVAL_CHUNK)
        ]
    predictions = torch.cat(parts, dim=1)  # (R, n_eval, ...)
    stacked.write_back(models)
    seconds = (time.perf_counter() - start) / n_runs
    results = []
    for r, model in enumerate(models):
        model.eval()
        pred = predictions[r].contiguous()
        diverged = not bool(alive[r]) or not bool(torch.isfinite(pred).all())
        results.append(RunResult(pred, diverged, seconds, math.nan, model))
    return results
