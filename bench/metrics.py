"""Metrics computed by the trusted parent from predictions (numpy only).

The child that runs submitted code returns predictions, never scores: the idea
cannot grade itself, and it never sees validation or test labels.
"""

from __future__ import annotations

import numpy as np


def mse(pred: np.ndarray, target: np.ndarray) -> float:
    """Mean squared error over all elements; ``pred`` and ``target`` of equal shape."""
    diff = pred.astype(np.float64) - target.astype(np.float64)
    return float(np.mean(diff * diff))


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean cross-entropy of ``logits`` (N, C) against int class ``labels`` (N,)."""
    z = logits.astype(np.float64)
    z_max = z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z - z_max).sum(axis=1)) + z_max[:, 0]
    return float(np.mean(log_norm - z[np.arange(len(labels)), labels]))


def error_rate(logits: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of argmax predictions that miss the label."""
    return float(np.mean(np.argmax(logits, axis=1) != labels))


METRICS = {"mse": mse, "cross_entropy": cross_entropy, "error_rate": error_rate}


def score(name: str, pred: np.ndarray, target: np.ndarray) -> float:
    """The track metric ``name`` of one run; NaN/inf when the predictions are not finite."""
    if not np.all(np.isfinite(pred)):
        return float("nan")
    with np.errstate(all="ignore"):
        return METRICS[name](pred, target)
