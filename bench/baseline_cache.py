"""Exact reuse of the canonical baseline's runs: a content-addressed cache on disk.

With the track's own baseline (no ``baseline_code``), one baseline run depends only
on the track (id, card, source, data), the run (config, seeds, eval split), the
execution path and its batch group, the library versions, the device and the
engine's training code. Those inputs, as canonical JSON, hash to the run's key;
the entry holds the run's predictions and the child's flags, so the parent scores
a hit exactly as it would score a fresh run: bit-identical numbers.

Directory: ``$IDEABENCH_CACHE_DIR/baseline`` (default ``$IDEABENCH_DATA_DIR/cache/baseline``).
``IDEABENCH_BASELINE_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import platform
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from bench.npy import read_npy

FORMAT = 2  # 2: trained on the captured graph; a kept model's tensors as .npz
# The engine code a baseline run's numbers depend on (hashed into every key).
CODE_FILES = ("trainer.py", "vectorized.py", "child.py", "data.py", "seeding.py", "metrics.py", "graph.py", "redraw.py")


def canonical_json(obj: Any) -> str:
    """Sorted keys, no spaces, floats by repr: the same inputs give the same bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def digest(obj: Any) -> str:
    """sha256 hex of ``canonical_json(obj)``."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


@cache
def code_version() -> str:
    """sha256 over the engine files that shape a run's numbers."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in CODE_FILES:
        h.update(name.encode())
        h.update((here / name).read_bytes())
    return h.hexdigest()


def source_hash(obj: Any) -> str:
    """sha256 of the source file that defines ``obj`` (a track's baseline builder)."""
    try:
        path = inspect.getsourcefile(obj)
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else "unknown"
    except (OSError, TypeError):
        return "unknown"


def versions() -> dict[str, str]:
    """Library versions that can change a run's numbers."""
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}


@dataclass(frozen=True)
class CachedRun:
    """One cached baseline run: what the child reported, predictions included."""

    predictions: np.ndarray
    diverged: bool
    seconds: float
    n_params: int
    state_path: Path | None = None  # the trained model's state_dict, when it was stored


class BaselineCache:
    """Entries ``<root>/<k[:2]>/<k>.npy`` (predictions) + ``<k>.json`` (flags), written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root  # EngineOptions.baseline_dir

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / f"{key}.npy", folder / f"{key}.json"

    def _state(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.pt"

    def get(self, key: str) -> CachedRun | None:
        """The entry of ``key`` or None (missing or unreadable entries are misses)."""
        npy, meta_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("format") != FORMAT or meta.get("key") != key:
                return None
            predictions = read_npy(npy.read_bytes())
        except (OSError, ValueError):
            return None
        state = self._state(key)
        return CachedRun(
            predictions, bool(meta["diverged"]), float(meta["seconds"]), int(meta["n_params"]),
            state if meta.get("state") and state.is_file() else None,
        )

    def put(self, key: str, predictions: np.ndarray, *, diverged: bool, seconds: float, n_params: int,
            state: bytes | None = None) -> None:
        """Store one run (and its model's state_dict bytes); concurrent writers write the same bytes."""
        npy, meta_path = self._paths(key)
        npy.parent.mkdir(parents=True, exist_ok=True)
        meta = {"format": FORMAT, "key": key, "diverged": bool(diverged), "seconds": float(seconds),
                "n_params": int(n_params), "state": state is not None}
        if state is not None:
            _atomic_write(self._state(key), lambda fh: fh.write(state))
        _atomic_write(npy, lambda fh: np.save(fh, np.ascontiguousarray(predictions), allow_pickle=False))
        _atomic_write(meta_path, lambda fh: fh.write(canonical_json(meta).encode()))


def _atomic_write(path: Path, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
