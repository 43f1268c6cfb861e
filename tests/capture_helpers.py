"""A model through the capture boundary as the trusted trainer sees it (tests' helper)."""

from __future__ import annotations

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
