"""A model through the capture boundary as the trusted trainer sees it (tests' helper)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from bench.graph import CapturedModel, export_graph, rebuild


def capture_docs(model: nn.Module, input_shape: Sequence[int]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Both modes' graph JSON (through ``json``, as it crosses the boundary) and the arrays."""
    example = torch.randn(4, *input_shape)
    docs, tensors = {}, {}
    for mode in ("train", "eval"):
        model.train(mode == "train")
        doc, found = export_graph(model, example)
        docs[mode] = json.loads(json.dumps(doc))
        tensors.update({k: v.numpy().copy() for k, v in found.items()})
    return docs, tensors


def through_capture(model: nn.Module, input_shape: Sequence[int]) -> CapturedModel:
    """``model`` captured, serialised and rebuilt on the CPU."""
    return rebuild(*capture_docs(model, input_shape), torch.device("cpu"))


def runs_of(base: nn.Module, runs: int) -> list[nn.Module]:
    """``runs`` copies of a (captured) model, each with weights of its own: run r's moved by
    0.1 x a normal draw of seed r."""
    models = []
    for r in range(runs):
        model = copy.deepcopy(base)
        gen = torch.Generator().manual_seed(r)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
        models.append(model)
    return models


def no_functorch(monkeypatch: Any) -> None:
    """The trainer's functorch step and its vjp forward raise (``monkeypatch``: pytest's): a
    group trains on the plain vmap level, the faster forms of ``bench.batched_ops`` among its
    ops, or fails."""
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the trainer fell back to vmap(grad)")

    monkeypatch.setattr(torch.func, "grad_and_value", lambda *a, **k: never)
    monkeypatch.setattr(torch.func, "vjp", never)


def count_calls(monkeypatch: Any, owner: Any, name: str) -> list[int]:
    """``owner.name`` counted from now on (``monkeypatch``: pytest's): the list grows by one
    per call, and the call goes through."""
    calls: list[int] = []
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def close_to_rounding(a: torch.Tensor, b: torch.Tensor, rel: float = 1e-6) -> bool:
    """Equal to float rounding, shapes included: the largest difference at most ``rel`` of the
    largest value (or of 1), computed in float64; two empty tensors of one shape are equal."""
    a, b = a.detach(), b.detach()
    if a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return float((a.double() - b.double()).abs().max()) <= rel * max(float(a.abs().max()), 1.0)


def graph_of(*calls: tuple[str, str, list[Any], dict[str, Any]]) -> dict[str, Any]:
    """A graph document as a hostile capture child could write it: one input ``x``, then
    ``calls`` (name, target, args, kwargs) with ``"@name"`` standing for a node; the last call's
    value is the output."""
    def encode(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("@"):
            return {"$node": value[1:]}
        return [encode(v) for v in value] if isinstance(value, list) else value

    nodes: list[dict[str, Any]] = [{"name": "x", "op": "placeholder"}]
    nodes += [{"name": n, "op": "call_function", "target": t, "args": encode(a),
               "kwargs": {k: encode(v) for k, v in kw.items()}} for n, t, a, kw in calls]
    nodes.append({"name": "output", "op": "output", "args": [[{"$node": calls[-1][0]}]]})
    return {"format": 1, "inputs": [{"kind": "user", "name": "x", "target": ""}],
            "outputs": [{"kind": "user", "target": calls[-1][0]}], "nodes": nodes}


def no_worse_than_aten(exact: Sequence[torch.Tensor], aten_results: Sequence[torch.Tensor],
                       got: Sequence[torch.Tensor], dtype: torch.dtype) -> None:
    """In a low-precision ``dtype``, each of a batched form's results is within twice aten's own
    error of the double-precision ``exact`` result, plus 4 units of the dtype."""
    eps = torch.finfo(dtype).eps
    for ref, a, b in zip(exact, aten_results, got, strict=True):
        aten_error = float((a.double() - ref).abs().max())
        assert float((b.double() - ref).abs().max()) <= 2 * aten_error + 4 * eps
