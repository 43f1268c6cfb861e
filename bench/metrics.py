"""Metrics computed by the trusted parent from predictions (numpy only).

The child that runs submitted code returns predictions, never scores: the idea
cannot grade itself, and it never sees validation or test labels.
"""

from __future__ import annotations

import numpy as np

from bench.errors import BenchError, ErrorCode


def check_predictions(pred: np.ndarray, expected_shape: tuple[int, ...], role: str) -> None:
    """Refuse predictions a child wrote that are not a float array of ``expected_shape``:
    ``(N, *spec["output_shape"])``. Without it an (N, 1, 1) array would broadcast against
    (N, 1) labels into an N x N matrix in the parent, and its score would mean nothing."""
    if not isinstance(pred, np.ndarray) or pred.dtype.kind != "f" or tuple(pred.shape) != tuple(expected_shape):
        got = f"{pred.dtype} {tuple(pred.shape)}" if isinstance(pred, np.ndarray) else type(pred).__name__
        raise BenchError(
            ErrorCode.BAD_OUTPUT_SHAPE,
            f"The {role} returned predictions of {got}; expected float {tuple(expected_shape)}.",
        )


ROW_CHECKS = 8  # rows of every eval prediction that the trainer also predicts alone
ROW_RTOL, ROW_ATOL = 1e-3, 1e-4  # float rounding between a batch of 1 and a full batch


def check_rows_alone(pred: np.ndarray, rows: list[int], alone: np.ndarray, role: str) -> None:
    """Refuse (``row_dependent``) predictions whose ``rows``, predicted each alone in a batch
    of one (``alone``), differ from the same rows predicted in their batch beyond float
    rounding: a model that reads other rows of its eval batch (a test row matched against
    its neighbour, whose input holds its target on a sliding-window track) would score on
    what it was never given. The rows are chosen from the job's secret seeds, so the model
    cannot know which ones are checked."""
    check_predictions(alone, (len(rows), *pred.shape[1:]), role)
    batched = pred[rows].astype(np.float64)
    gap = np.abs(alone.astype(np.float64) - batched)
    if not bool(np.all(gap <= ROW_ATOL + ROW_RTOL * np.abs(batched))):
        raise BenchError(
            ErrorCode.ROW_DEPENDENT,
            f"The {role}'s eval output for a row changes with the other rows of its batch (largest "
            f"difference {float(np.nanmax(gap)):.3g} between a row predicted alone and in its batch).",
        )


def mse(pred: np.ndarray, target: np.ndarray) -> float:
    """Mean squared error over all elements; ``pred`` and ``target`` of equal shape."""
    diff = pred.astype(np.float64) - target.astype(np.float64)
    return float(np.mean(diff * diff))


def cross_entropy_rows(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each row's cross-entropy (float64) of ``logits`` (N, C) against int class ``labels`` (N,)."""
    z = logits.astype(np.float64)
    z_max = z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z - z_max).sum(axis=1)) + z_max[:, 0]
    rows: np.ndarray = log_norm - z[np.arange(len(labels)), labels]
    return rows


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean cross-entropy of ``logits`` (N, C) against int class ``labels`` (N,)."""
    return float(np.mean(cross_entropy_rows(logits, labels)))


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
