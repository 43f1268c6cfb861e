"""Hostile (a review of the denormal setting, session 31): a model can tell whether denormal
floats are flushed (``1e-30 * 1e-9`` is 1e-39, or 0 when flushed), so the one process that
flushed them only while training would let a graph behave one way when scored and another when
checked (the rows predicted alone, the mechanism's probes). Every child flushes them for its
whole life (``bench.child.torch_settings``); here the capture child says which mode it runs in."""
import torch


def build_model(spec):
    flushed = bool((torch.full((1,), 1e-30) * 1e-9 == 0).item())
    raise ValueError(f"denormals flushed here: {flushed}")
