"""Service-owned mechanism probes: quantities the bench measures itself on trained models.

An idea declares its mechanism as data, ``MECHANISM = {..., "probe": {"kind": ...}}``, and
the trusted trainer measures the quantity on every final model of both arms (the probe
batch: the first 256 test inputs, no labels, run inside the first batch the model
predicted on: ``in_context``). No submitted code runs: the report marks
the values ``self_measured: false``. Kinds (``bench.contract.check_probe`` validates them):

- ``token_permutation`` ``{"dim": 1, "swap": [0, 1]}``: mean |f(x) - f(x with positions
  ``swap`` exchanged along ``dim``)| (0 for a permutation-invariant model);
- ``input_gradient`` ``{}``: mean |d sum f(x) / d x| (input sensitivity);
- ``equivariance`` ``{"transform": T, "output": "same" | "none"}``: ||f(T x) - T'(f(x))|| /
  ||f(x)||, where T' is T (``same``: equivariance) or the identity (``none``: invariance)
  and T is ``{"roll": {"shift": k, "dim": d}}``, ``{"flip": {"dim": d}}`` or
  ``{"add": c}`` (a constant added to every value);
- ``norm_ratio`` ``{"module": "mix"}``: mean over the probe samples of ||out|| / ||in|| of
  the named submodule (its attribute path, or its last part), each sample's activation
  flattened (1 for an isometry such as an orthogonal mixer). Which ops form the submodule
  is the capture's label (torch.export's module stack), so it is the submitter's claim;
  the bench checks (``check_applies``, before training) that the part takes one activation
  and gives one, that the model's output depends on it and that it trains a parameter, and
  measures it (``CapturedModel.submodule_io``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def _transform(spec: dict[str, Any], x: torch.Tensor) -> torch.Tensor:
    (name, args), = spec.items()
    if name == "roll":
        return torch.roll(x, shifts=int(args["shift"]), dims=int(args["dim"]))
    if name == "flip":
        return torch.flip(x, dims=[int(args["dim"])])
    return x + float(args)  # "add"


def submodule_io(model: nn.Module, name: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A captured model's named submodule's input and output on ``x``, and the model's output."""
    from bench.graph import CapturedModel

    if not isinstance(model, CapturedModel):
        raise ValueError("a module probe needs a captured model")
    return model.submodule_io(x, name)


def check_applies(probe: dict[str, Any], model: nn.Module, x: torch.Tensor) -> None:
    """Raise ``ValueError`` before any training if ``probe`` cannot be measured on ``model``
    (an untrained model of the arm): a module probe whose submodule the arm lacks or that
    cannot carry the claim (``CapturedModel.submodule_io``), whose output the model's output
    does not depend on (no gradient of a random projection of the output with respect to it:
    a dead branch, ``0 * mix``, ``zeros_like(mix)``), or whose ratio is not finite."""
    if probe["kind"] != "norm_ratio":
        return
    model.eval()
    with torch.enable_grad():
        _, z_out, y = submodule_io(model, probe["module"], x)
        grad = None
        if z_out.requires_grad and y.requires_grad:
            weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(0)).to(y.device, y.dtype)
            (grad,) = torch.autograd.grad((y * weights).sum(), z_out, allow_unused=True)
    if grad is None or not bool(grad.ne(0).any()):
        raise ValueError(f"the model's output does not depend on what submodule {probe['module']!r} gives")
    measure(probe, model, x)


def in_context(context: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor:
    """``rows`` in place of the first rows of ``context`` (the batch the model was last asked to
    predict), so that the model runs on a batch of the same size and the same other rows."""
    if context is None or len(context) <= len(rows):
        return rows
    return torch.cat([rows, context[len(rows):].to(rows.dtype)])


def measure(probe: dict[str, Any], model: nn.Module, x: torch.Tensor, context: torch.Tensor | None = None) -> float:
    """The quantity ``probe`` names, on ``model`` (put in eval mode) and probe batch ``x``.

    ``context``: the first batch the trainer predicted (the first ``EVAL_CHUNK`` test inputs,
    which begin with ``x``). Every forward of the probe runs on it with its first rows
    replaced, and reads those rows' outputs only: a model that tells a probe's batch from a
    prediction batch by its size or its other rows (a size arithmetic in the graph, a
    comparison of rows) sees the batch it predicted on.
    """
    model.eval()
    kind = probe["kind"]
    n = len(x)

    def f(rows: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = model(in_context(context, rows))
        return out[:n]

    if kind == "norm_ratio":
        with torch.no_grad():
            z_in, z_out, _ = submodule_io(model, probe["module"], in_context(context, x))
            z_in, z_out = z_in[:n], z_out[:n]
            value = float((z_out.flatten(1).norm(dim=1) / z_in.flatten(1).norm(dim=1)).mean())
        if not math.isfinite(value):
            raise ValueError(f"the norm ratio of {probe['module']!r} is {value} (an input of norm 0)")
        return value
    if kind == "input_gradient":
        x = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(f(x).sum(), x)
        return float(grad.abs().mean())
    with torch.no_grad():
        y = f(x)
        if kind == "token_permutation":
            dim = int(probe.get("dim", 1))
            i, j = (int(v) for v in probe.get("swap", [0, 1]))
            order = list(range(x.shape[dim]))
            order[i], order[j] = order[j], order[i]
            swapped = x.index_select(dim, torch.tensor(order, device=x.device))
            return float((f(swapped) - y).abs().mean())
        transform = probe["transform"]
        moved = f(_transform(transform, x))
        target = _transform(transform, y) if probe.get("output", "same") == "same" else y
        return float((moved - target).norm() / y.norm())
