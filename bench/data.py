"""Data of a job: splits made once per (track version, split seed) and worker process.

The child gets inputs and training labels as .npy files; validation and test
labels stay in the parent, which scores the child's predictions.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from threading import Lock

import numpy as np

from bench.errors import BenchError, ErrorCode
from bench.track import Splits, Track, TrackUnavailable

PROBE_SIZE = 256
_CACHE_SIZE = 32
_cache: OrderedDict[tuple[str, int, int | None], tuple[Splits, str]] = OrderedDict()
_cache_lock = Lock()


def splits_for(track: Track, split_seed: int, task_seed: int | None) -> tuple[Splits, str]:
    """The track's splits for ``split_seed`` (task ``task_seed``) and their checksum, cached per process."""
    # A custom track's content hash keeps two files of one name@version apart.
    key = (f"{track.name}@{track.version}#{track.extras.get('source_sha256', '')}", split_seed, task_seed)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    try:
        splits = track.make_splits(split_seed, task_seed)
    except TrackUnavailable as exc:  # the deployment's data, not the idea: no internal error
        raise BenchError(ErrorCode.TRACK_UNAVAILABLE, f"This worker cannot make {track.name}'s data: {exc}"[:1000],
                         "Not your idea's fault: the operator must install the track's data on every worker, "
                         "or submit to another track.") from None
    value = (splits, splits.checksum())
    with _cache_lock:
        _cache[key] = value
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return value


@dataclass
class SeedData:
    """One protocol seed's data as seen by the parent."""

    data_dir: Path
    y_val: np.ndarray
    y_test: np.ndarray
    probe_path: Path
    checksum: str
    rows: tuple[int, int, int] = (0, 0, 0)  # of the train, validation and test splits


def export(track: Track, split_seed: int, task_seed: int | None, directory: Path) -> SeedData:
    """Write what the child may see (x_*, y_train, a probe batch) under ``directory``."""
    splits, checksum = splits_for(track, split_seed, task_seed)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("x_train", "y_train", "x_val", "x_test"):
        np.save(directory / f"{name}.npy", getattr(splits, name).numpy())
    probe_path = directory / "probe.npy"
    np.save(probe_path, splits.x_test[:PROBE_SIZE].numpy())
    return SeedData(
        data_dir=directory,
        y_val=splits.y_val.numpy(),
        y_test=splits.y_test.numpy(),
        probe_path=probe_path,
        checksum=checksum,
        rows=(len(splits.x_train), len(splits.x_val), len(splits.x_test)),
    )
