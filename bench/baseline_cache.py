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
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from bench.captured import pack, unpack
from bench.execution import Shapes, Trained
from bench.npy import read_npy

FORMAT = 2  # 2: trained on the captured graph; a kept model's tensors as .npz
# The engine code a baseline run's numbers depend on (hashed into every key).
CODE_FILES = ("trainer.py", "vectorized.py", "batched_ops.py", "child.py", "data.py", "seeding.py", "metrics.py", "graph.py",
              "redraw.py")


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


TrainFn = Callable[[str, list[dict[str, Any]], str, Callable[[Trained], None]], None]  # Executor.train


@dataclass
class CachedTrain:
    """The baseline cache as a wrapper around an executor's ``train``.

    ``train`` takes the same runs and callback as ``Executor.train``, and ``keys``: the cache
    key of each run the cache may answer (the protocol's: a built-in track's own baseline, not
    at the confirmation's fresh seeds). A batch group (``run["group"]``) whose every run has a
    cached entry, with its trained tensors when the run keeps them (``run["keep"]``, read with
    ``shapes(run)``), is answered from the cache: ``on_run`` gets a ``Trained`` marked ``cached``,
    on the path its key names. Every other group is trained by ``train_fn``, and a keyed run is
    stored after ``on_run`` accepted it, when the trainer ran it on the path its key describes
    (a group that fell back is not what its key says). Hits and misses are counted; a store
    that fails is a warning (``warn``), never the job's failure."""

    cache: BaselineCache
    train_fn: TrainFn
    shapes: Callable[[dict[str, Any]], Shapes]
    warn: Callable[[str], None]
    hits: int = 0
    misses: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def train(self, arm: str, runs: list[dict[str, Any]], path: str, on_run: Callable[[Trained], None],
              keys: Mapping[str, str]) -> None:
        groups: dict[Any, list[dict[str, Any]]] = {}
        for run in runs:
            groups.setdefault(run["group"], []).append(run)
        trained: list[dict[str, Any]] = []
        for members in groups.values():
            answers = self._answers(members, path, keys)
            if answers is None:
                trained.extend(members)
                continue
            for answer in answers:
                on_run(answer)
        if trained:
            self.train_fn(arm, trained, path, self._storing(on_run, {r["run_id"]: r for r in trained}, path, keys))

    def _answers(self, members: list[dict[str, Any]], path: str, keys: Mapping[str, str]) -> list[Trained] | None:
        """The group's runs from the cache, or None unless every one of them is there."""
        if not all(run["run_id"] in keys for run in members):
            return None
        answers = []
        for run in members:
            hit = self.cache.get(keys[run["run_id"]])
            if hit is None:
                return None
            state = None
            if run["keep"]:
                state = self._state(hit, self.shapes(run))
                if state is None:
                    return None
            answers.append(Trained(
                run_id=run["run_id"], predictions=hit.predictions, diverged=hit.diverged, seconds=hit.seconds,
                n_params=hit.n_params, path=path, read_rows=_no_rows, read_state=_given(state), cached=True))
        with self.lock:
            self.hits += len(answers)
        return answers

    @staticmethod
    def _state(hit: CachedRun, shapes: Shapes) -> list[np.ndarray] | None:
        """A hit's trained tensors, if they match this job's capture of the model."""
        if hit.state_path is None:
            return None
        try:
            return unpack(hit.state_path.read_bytes(), shapes)
        except OSError:
            return None

    def _storing(self, on_run: Callable[[Trained], None], by_id: dict[str, dict[str, Any]], path: str,
                 keys: Mapping[str, str]) -> Callable[[Trained], None]:
        def store(trained: Trained) -> None:
            key = keys.get(trained.run_id)
            if key is None:
                on_run(trained)
                return
            state: list[np.ndarray] | None = None
            if by_id[trained.run_id]["keep"]:  # read once: for the job's on_run and for the entry
                state = trained.read_state(self.shapes(by_id[trained.run_id]))
                trained = replace(trained, read_state=_given(state))
            on_run(trained)
            with self.lock:
                self.misses += 1
            if trained.path != path:
                return
            try:
                self.cache.put(key, trained.predictions, diverged=trained.diverged, seconds=trained.seconds,
                               n_params=trained.n_params, state=pack(state) if state is not None else None)
            except OSError as exc:
                self.warn(f"baseline cache not written: {exc}")

        return store


def _no_rows() -> np.ndarray:
    raise AssertionError("a cached run has no rows to read (its rows were checked when it was trained)")


def _given(state: list[np.ndarray] | None) -> Callable[[Shapes], list[np.ndarray]]:
    def read(_shapes: Shapes) -> list[np.ndarray]:
        if state is None:
            raise AssertionError("the run kept no tensors")
        return state
    return read
