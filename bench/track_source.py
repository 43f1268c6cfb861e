"""Static checks of a custom track file (no torch): its ``CARD`` literal and its functions.

A custom track is one Python file with the same three parts as a built-in track:
``CARD`` (a literal dict: what ``card.json`` holds for a built-in track), a
deterministic ``make_splits(seed)`` and the canonical ``build_baseline(spec)``.
The track's author chooses the data, the metric and the baseline; the protocol,
the seeds, the statistics and the verdict thresholds are the service's, so a
card that tries to set them is refused. The API runs these checks before
storing a track; running the code happens only in the sandbox (``bench.custom_track``).
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from bench.card import COMPUTE_RATIO, DIVERGENCE_CEILING, PARAM_PARITY_RATIO, Defaults
from bench.contract import parse_source
from bench.errors import BenchError, ErrorCode

MAX_TRACK_SOURCE_BYTES = 128 * 1024
NAME_RE = re.compile(r"[a-z][a-z0-9_]{2,47}")  # whole strings only (fullmatch: "smoke\n" is no name)
METRIC_LOSS = {"mse": "mse", "cross_entropy": "cross_entropy", "error_rate": "cross_entropy"}
TASKS = {"regression", "classification"}
# Set by the service for every custom track: the protocol and the verdict thresholds.
# The card's defaults (bench.card), written into the stored card so that it reads alone.
SERVICE_CARD = {
    "sweep_seeds": Defaults.model_fields["sweep_seeds"].default,
    "n_seeds": Defaults.model_fields["n_seeds"].default,
    "smallest_effect_rel_pct": 2.0,
    "param_parity_ratio": PARAM_PARITY_RATIO,
    "compute_ratio": COMPUTE_RATIO,
    "divergence_ceiling": DIVERGENCE_CEILING,
}
AUTHOR_KEYS = {
    "name", "title", "description", "domain", "justification", "spec", "metric", "defaults",
    "param_cap", "max_configs", "baseline",
}
REQUIRED_KEYS = AUTHOR_KEYS - {"max_configs"}
DEFAULT_KEYS = {"epochs", "batch_size", "lr_grid", "weight_decay", "schedule"}
SCHEDULES = ("constant", "cosine")  # bench.trainer.lr_factor
MAX_INPUT_ELEMENTS = 65536
MAX_PARAM_CAP = 2_000_000


def _fail(message: str, hint: str | None = None) -> BenchError:
    return BenchError(ErrorCode.INVALID_TRACK, message, hint)


def _schedule(value: Any) -> str:
    """The learning rate's schedule over a run: one of ``SCHEDULES``."""
    if not isinstance(value, str) or value not in SCHEDULES:
        raise _fail(f"CARD['defaults']['schedule'] must be one of {list(SCHEDULES)}.",
                    "Leave it out for a constant learning rate.")
    return value


def _text(card: dict[str, Any], key: str, lo: int, hi: int) -> str:
    value = card.get(key)
    if not isinstance(value, str) or not lo <= len(value.strip()) <= hi:
        raise _fail(f"CARD[{key!r}] must be a string of {lo} to {hi} characters.")
    return value.strip()


def _shape(value: Any, key: str) -> list[int]:
    if (not isinstance(value, list) or not 1 <= len(value) <= 4
            or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_INPUT_ELEMENTS
                       for v in value)):
        raise _fail(f"CARD['spec'][{key!r}] must be a list of 1 to 4 positive ints; got {value!r}.")
    if math.prod(value) > MAX_INPUT_ELEMENTS:
        raise _fail(f"CARD['spec'][{key!r}] has {math.prod(value)} elements; the limit is {MAX_INPUT_ELEMENTS}.")
    return list(value)


def _number(value: Any, key: str, lo: float, hi: float, *, integer: bool = False) -> Any:
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok_type or not lo <= value <= hi:
        kind = "an int" if integer else "a number"
        raise _fail(f"{key} must be {kind} in [{lo:g}, {hi:g}]; got {value!r}.")
    return value


def check_card(card: Any) -> dict[str, Any]:
    """Validate the author's ``CARD`` and return the card the engine uses (service keys added)."""
    if not isinstance(card, dict):
        raise _fail("CARD must be a literal dict (no function calls or names in it).")
    taken = sorted(set(card) & (set(SERVICE_CARD) | {"version", "id", "kind", "sizes"}))
    if taken:
        raise _fail(
            f"CARD may not set {', '.join(taken)}: the service sets the protocol, the seeds, the "
            "verdict thresholds and the version for every track.",
            f"Remove {', '.join(taken)} from CARD.",
        )
    unknown = sorted(set(card) - AUTHOR_KEYS)
    if unknown:
        raise _fail(f"CARD has unknown keys {unknown}; allowed: {sorted(AUTHOR_KEYS)}.")
    missing = sorted(REQUIRED_KEYS - set(card))
    if missing:
        raise _fail(f"CARD lacks {missing}; required: {sorted(REQUIRED_KEYS)}.")
    name = card["name"]
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise _fail(f"CARD['name'] must match {NAME_RE.pattern}; got {name!r}.")
    out: dict[str, Any] = {
        "name": name,
        "title": _text(card, "title", 3, 200),
        "description": _text(card, "description", 20, 8000),
        "domain": _text(card, "domain", 3, 200),
        "justification": _text(card, "justification", 20, 4000),
    }
    spec = card["spec"]
    if not isinstance(spec, dict):
        raise _fail("CARD['spec'] must be a dict (it is what build_model(spec) receives).")
    task = spec.get("task")
    if task not in TASKS:
        raise _fail(f"CARD['spec']['task'] must be one of {sorted(TASKS)}; got {task!r}.")
    _shape(spec.get("input_shape"), "input_shape")
    output_shape = _shape(spec.get("output_shape"), "output_shape")
    metric = card["metric"]
    if not isinstance(metric, dict) or metric.get("name") not in METRIC_LOSS:
        raise _fail(f"CARD['metric'] must be a dict whose 'name' is one of {sorted(METRIC_LOSS)}.")
    if task == "classification" and (metric["name"] == "mse" or len(output_shape) != 1):
        raise _fail("A classification track scores cross_entropy or error_rate on logits of "
                    "output_shape [n_classes].")
    if task == "regression" and metric["name"] != "mse":
        raise _fail("A regression track scores mse.")
    out["spec"] = spec
    out["task"] = task
    out["metric"] = {
        "name": metric["name"], "loss": METRIC_LOSS[metric["name"]], "direction": "lower",
        "description": str(metric.get("description", metric["name"] + " on the test split"))[:500],
    }
    defaults = card["defaults"]
    if not isinstance(defaults, dict) or set(defaults) - DEFAULT_KEYS:
        raise _fail(f"CARD['defaults'] may hold only {sorted(DEFAULT_KEYS)} (the trainer's settings).")
    lr_grid = defaults.get("lr_grid")
    if (not isinstance(lr_grid, list) or not 2 <= len(lr_grid) <= 6
            or len(set(lr_grid)) != len(lr_grid)):
        raise _fail("CARD['defaults']['lr_grid'] must list 2 to 6 distinct learning rates.")
    out["defaults"] = {
        "epochs": _number(defaults.get("epochs"), "defaults.epochs", 1, 200, integer=True),
        "batch_size": _number(defaults.get("batch_size"), "defaults.batch_size", 1, 4096, integer=True),
        "lr_grid": [float(_number(v, "defaults.lr_grid[i]", 1e-6, 10.0)) for v in lr_grid],
        "weight_decay": float(_number(defaults.get("weight_decay", 0.0), "defaults.weight_decay", 0.0, 1.0)),
        "schedule": _schedule(defaults.get("schedule", "constant")),
        "sweep_seeds": SERVICE_CARD["sweep_seeds"],
        "n_seeds": SERVICE_CARD["n_seeds"],
    }
    out["param_cap"] = _number(card["param_cap"], "param_cap", 1, MAX_PARAM_CAP, integer=True)
    out["max_configs"] = _number(card.get("max_configs", 8), "max_configs", 1, 12, integer=True)
    baseline = card["baseline"]
    if (not isinstance(baseline, dict) or not isinstance(baseline.get("name"), str)
            or not NAME_RE.fullmatch(baseline["name"])):
        raise _fail("CARD['baseline'] must be a dict with a 'name' (lowercase slug) and a 'description'.")
    out["baseline"] = {"name": baseline["name"], "description": str(baseline.get("description", ""))[:1000]}
    for key, value in SERVICE_CARD.items():
        if key not in ("sweep_seeds", "n_seeds"):
            out[key] = value
    out["kind"] = "custom"
    return out


def parse_track_source(source: str) -> dict[str, Any]:
    """Check a custom track file statically; return its engine card (no version yet).

    Raises ``BenchError`` ``invalid_track`` (or ``invalid_code`` for a syntax error).
    """
    info = parse_source(source, role="track", max_bytes=MAX_TRACK_SOURCE_BYTES)
    missing = [name for name in ("CARD", "make_splits", "build_baseline") if name not in info.defines]
    if missing:
        raise _fail(f"The track file defines no top-level {', '.join(missing)}.")
    if "CARD" not in info.literals:
        raise _fail("CARD must be a literal dict (numbers, strings, lists, dicts only) so the "
                    "service can read it without running the file.")
    return check_card(info.literals["CARD"])


def source_sha256(source: str) -> str:
    """The track file's content hash (hex sha256 of its UTF-8 bytes)."""
    return hashlib.sha256(source.encode()).hexdigest()
