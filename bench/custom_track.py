"""Custom tracks: an agent's own track file, run only in the sandbox.

The file's ``make_splits`` runs in a short-lived sandboxed child of its own (it
writes every split's labels, which no arm's child may see); the parent checks the
arrays (shapes, types, finiteness, sizes), writes them to a per-version cache on
this worker, and from then on the track behaves like a built-in one: the parent
keeps the validation and test labels, the baseline arm's child runs the file's
``build_baseline``. ``validate`` is what registration runs: determinism, shapes,
sizes, a baseline smoke run and the time a protocol would take.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from bench import options as engine_options
from bench import wire
from bench.card import TrackSettings
from bench.catalog import planned_runs
from bench.child import SPLIT_NAMES
from bench.errors import BenchError, ErrorCode
from bench.metrics import score
from bench.npy import read_npy
from bench.options import EngineOptions
from bench.runner import ArmSession, directory_usage, load_npy, open_output
from bench.sandbox import Limits
from bench.seeding import SeedSecret, final_seeds, run_seeds, sweep_seeds
from bench.tempdirs import OwnedDir, remove_tree
from bench.track import Splits, Track
from bench.track_source import parse_track_source, source_sha256

MAX_DATA_BYTES = 512 * 1024 * 1024  # all six arrays of one seed
TRACK_CACHE_BYTES = 4 << 30  # all custom tracks' cached splits on one worker; least recently used go first
MIN_ROWS = {"train": 32, "val": 16, "test": 16}
MAX_PROTOCOL_S = 1200.0  # the estimated default protocol on the validating worker


@dataclass(frozen=True)
class CustomTrack:
    """One version of a registered (or local) track file."""

    name: str
    version: int
    source: str
    sha256: str
    card: dict[str, Any]  # the engine card without version (bench.track_source.check_card)
    author: str | None = None
    file: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    # sha256 of each split seed's six arrays as validated (``validate``), by split seed
    checksums: dict[str, str] = field(default_factory=dict)
    # what validation warned about (a baseline no better than a constant, ...): in every report
    validation_warnings: list[str] = field(default_factory=list)
    # the graph hash of the baseline validation captured: every job must capture the same one
    baseline_graph_sha256: str | None = None
    # whether validation's baseline beat the bench's reference fits (None: not measured)
    baseline_beats_references: bool | None = None
    # the tensors validation's baseline built at sweep seed 0, and the seed epoch it built under:
    # a job of that epoch must build exactly the same there (``Job.check_track_baseline``)
    baseline_seed_sha256: str | None = None
    validated_epoch: int | None = None
    baseline_build_version: str | None = None  # bench.captured.build_version() of the code that made it
    # validation's checked capture of that build (``bench.captured.pack_build``), kept with the
    # track: a job trains it as the baseline of every seed and never runs the file's
    # build_baseline to build one (``bench.judge.stored_build``); None for a local file or a track
    # validated before it was kept
    baseline_build: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_source(
        cls, source: str, *, version: int = 1, author: str | None = None, file: str | None = None
    ) -> CustomTrack:
        """Parse a track file (static checks only); raises ``BenchError``."""
        card = parse_track_source(source)
        return cls(card["name"], version, source, source_sha256(source), card, author, file)

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"

    def full_card(self) -> dict[str, Any]:
        """The card as the engine and reports use it (version and id filled in)."""
        card = dict(self.card, version=self.version, id=self.id)
        if self.sizes:
            card["sizes"] = dict(self.sizes)
        return card

    def report_block(self) -> dict[str, Any]:
        """The report's ``custom_track`` entry."""
        return {
            "name": self.name, "version": self.version, "file": self.file or f"{self.name}.py",
            "domain": self.card["domain"], "author": self.author, "hash": self.sha256,
            "validation_warnings": list(self.validation_warnings),
            "weak_baseline": self.baseline_beats_references is False,
        }


# -- data ---------------------------------------------------------------------------
def cache_dir(track: CustomTrack, root: Path) -> Path:
    """Where this version's generated splits live on this worker (``root``: EngineOptions.tracks_dir)."""
    return root / f"{track.name}@{track.version}-{track.sha256[:16]}"


def _invalid(message: str, hint: str | None = None) -> BenchError:
    return BenchError(ErrorCode.INVALID_TRACK, message, hint)


def check_arrays(root: Path, subdir: str, card: dict[str, Any]) -> dict[str, np.ndarray]:
    """Load and check one seed's six arrays that the track's child wrote under ``root/subdir``."""
    files = {name: open_output(root, f"{subdir}/{name}.npy", "track") for name in SPLIT_NAMES}
    try:
        total = sum(os.fstat(fh.fileno()).st_size for fh in files.values())
        if total > MAX_DATA_BYTES:
            raise _invalid(f"One seed's splits take {total / 2**20:.0f} MiB; the limit is "
                           f"{MAX_DATA_BYTES // 2**20} MiB.", "Make fewer or smaller samples.")
        return _checked(files, card)
    finally:
        for fh in files.values():
            fh.close()


def _checked(files: dict[str, BinaryIO], card: dict[str, Any]) -> dict[str, np.ndarray]:
    spec = card["spec"]
    classification = card["metric"]["loss"] == "cross_entropy"
    arrays: dict[str, np.ndarray] = {}
    for name, fh in files.items():
        try:
            value = load_npy(fh, "track", name)
        except BenchError:
            raise _invalid(f"make_splits gave no usable {name}.",
                           "Return numeric arrays or tensors (not objects).") from None
        if not np.issubdtype(value.dtype, np.number) or np.issubdtype(value.dtype, np.complexfloating):
            raise _invalid(f"{name} has dtype {value.dtype}; it must be real numbers.")
        if name.startswith("x"):
            expected: tuple[int, ...] = tuple(spec["input_shape"])
            value = value.astype(np.float32)
        elif classification:
            expected = ()
            if not np.issubdtype(value.dtype, np.integer) and not np.all(value == np.round(value)):
                raise _invalid(f"{name} must hold integer class indices for a classification track.")
            value = value.astype(np.int64)
            n_classes = int(spec["output_shape"][0])
            if value.size and (value.min() < 0 or value.max() >= n_classes):
                raise _invalid(f"{name} has class indices outside [0, {n_classes}).")
        else:
            expected = tuple(spec["output_shape"])
            value = value.astype(np.float32)
        if value.ndim != 1 + len(expected) or tuple(value.shape[1:]) != expected:
            raise _invalid(
                f"{name} has shape {tuple(value.shape)}; expected (N, {', '.join(map(str, expected))})"
                if expected else f"{name} has shape {tuple(value.shape)}; expected (N,) class indices.",
                "Make the arrays match CARD['spec'] input_shape / output_shape.",
            )
        if not np.all(np.isfinite(value)):
            raise _invalid(f"{name} holds NaN or inf values.")
        arrays[name] = np.ascontiguousarray(value)
    for split, minimum in MIN_ROWS.items():
        n_x, n_y = len(arrays[f"x_{split}"]), len(arrays[f"y_{split}"])
        if n_x != n_y:
            raise _invalid(f"x_{split} has {n_x} rows but y_{split} has {n_y}.")
        if n_x < minimum:
            raise _invalid(f"The {split} split has {n_x} rows; at least {minimum} are needed.")
    return arrays


def _store(track: CustomTrack, split_seed: int, arrays: dict[str, np.ndarray], root: Path) -> None:
    """Write checked arrays to the cache (atomic: a temp dir renamed into place)."""
    final = cache_dir(track, root) / str(split_seed)
    if final.is_dir():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{split_seed}-", dir=final.parent))
    for name, value in arrays.items():
        np.save(tmp / f"{name}.npy", value)
    try:
        os.rename(tmp, final)
    except OSError:  # another process stored it first
        remove_tree(tmp)


def _run_make_data(
    track: CustomTrack, items: list[tuple[int, str]], workdir: Path, *, memory_mb: int,
    deadline: float, cancel: threading.Event, timeout_s: float,
) -> list[float]:
    """Run ``make_splits`` for ``(seed, dirname)`` items in one sandboxed child; the seconds per
    item, as the parent's clock measured them (the track's code runs in that child and could
    say anything of its own time: a track that claimed 0 s passed the time limit, red team)."""
    session = ArmSession("track", workdir, Limits(memory_mb=memory_mb), deadline, cancel, timeout_s)
    try:
        started = time.monotonic()
        session.request(wire.MakeData(
            track_source=track.source, items=[wire.DataItem(seed=seed, dir=name) for seed, name in items]))
        elapsed = time.monotonic() - started
    finally:
        session.close()
    return [elapsed / max(1, len(items))] * len(items)


def arrays_checksum(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over the six arrays' bytes in ``SPLIT_NAMES`` order."""
    digest = hashlib.sha256()
    for name in SPLIT_NAMES:
        digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    return digest.hexdigest()


def _generate(
    track: CustomTrack, split_seeds: list[int], *, memory_mb: int, deadline: float,
    cancel: threading.Event, timeout_s: float,
) -> tuple[dict[int, dict[str, np.ndarray]], list[float]]:
    """``make_splits`` for ``split_seeds`` in one fresh sandboxed child, its arrays checked.

    Jobs and validation call it the same way (directory names, order, one child per call),
    so a track file cannot tell a validation from a job."""
    with OwnedDir("track") as tmp:
        workdir = Path(tmp) / "track"  # the sandbox's read-only data dir is then tmp/data (empty)
        seconds = _run_make_data(
            track, [(seed, f"seed_{seed}") for seed in split_seeds], workdir, memory_mb=memory_mb,
            deadline=deadline, cancel=cancel, timeout_s=timeout_s,
        )
        return {seed: check_arrays(workdir, f"seed_{seed}", track.card) for seed in split_seeds}, seconds


def ensure_data(
    track: CustomTrack, split_seeds: list[int], *, root: Path, memory_mb: int = 6144,
    deadline: float | None = None, cancel: threading.Event | None = None, timeout_s: float = 600.0,
) -> None:
    """Generate (in the sandbox) and cache every split seed this worker does not have yet.

    Data generated for a job must match what validation saw: the sizes of every split, and
    the checksum of every seed that validation generated (``track.checksums``)."""
    mine = cache_dir(track, root)
    missing = sorted({s for s in split_seeds if not (mine / str(s)).is_dir()})
    if mine.is_dir():
        os.utime(mine)  # used now: the last to be evicted
    if not missing:
        return
    generated, _ = _generate(
        track, missing, memory_mb=memory_mb,
        deadline=deadline if deadline is not None else time.monotonic() + timeout_s,
        cancel=cancel or threading.Event(), timeout_s=timeout_s,
    )
    for seed, arrays in generated.items():
        sizes = {split: len(arrays[f"x_{split}"]) for split in ("train", "val", "test")}
        validated = track.checksums.get(str(seed))
        if (track.sizes and sizes != track.sizes) or (validated and validated != arrays_checksum(arrays)):
            raise _invalid(
                f"make_splits gave other data for seed {seed} in this job than at validation "
                f"(sizes {sizes}, validated {track.sizes or 'unknown'}).",
                "A track's data must depend only on make_splits' seed argument: register a new "
                "version whose make_splits is a pure function of its seed.",
            )
    for seed, arrays in generated.items():
        _store(track, seed, arrays, root)
    evict(root, keep=mine)


def evict(root: Path, keep: Path, max_bytes: int = TRACK_CACHE_BYTES) -> list[Path]:
    """Remove the least recently used track versions' cached splits (by the time ``ensure_data``
    last used each) until the cache under ``root`` holds at most ``max_bytes``; never ``keep``
    (the track being judged). A job that needs an evicted version generates it again. Returns
    what it removed."""
    sizes = {d: directory_usage(d, 100_000)[0] for d in root.iterdir() if d.is_dir() and not d.is_symlink()}
    total, removed = sum(sizes.values()), []
    for directory in sorted(sizes, key=lambda d: d.stat().st_mtime):
        if total <= max_bytes:
            break
        if directory == keep:
            continue
        remove_tree(directory)
        total -= sizes[directory]
        removed.append(directory)
    return removed


def _no_baseline_in_parent(spec: dict[str, Any]) -> torch.nn.Module:
    raise BenchError(ErrorCode.INTERNAL, "A custom track's baseline is built only in its sandboxed child.")


def as_track(track: CustomTrack, root: Path) -> Track:
    """The engine's ``Track`` for a custom track whose data ``ensure_data`` has cached in ``root``."""
    directory = cache_dir(track, root)

    def make_splits(split_seed: int, task_seed: int | None = None) -> Splits:  # noqa: ARG001 - a file's own task
        seed_dir = directory / str(split_seed)
        if not seed_dir.is_dir():
            raise BenchError(ErrorCode.INTERNAL, f"split seed {split_seed} of {track.id} was not generated.")
        tensors = [torch.from_numpy(read_npy((seed_dir / f"{name}.npy").read_bytes())) for name in SPLIT_NAMES]
        return Splits(*tensors)

    return Track(
        card=track.full_card(), make_splits=make_splits, build_baseline=_no_baseline_in_parent,
        extras={"source_sha256": track.sha256, "custom": track},
    )


# -- validation at registration ---------------------------------------------------
def trivial_score(metric: str, y_train: np.ndarray, y_eval: np.ndarray, n_classes: int) -> float:
    """The score of a constant predictor: the train mean (regression) or the train class prior."""
    if metric == "mse":
        pred = np.broadcast_to(y_train.mean(axis=0, dtype=np.float64), y_eval.shape)
        return score(metric, np.asarray(pred), y_eval)
    prior = np.bincount(y_train, minlength=n_classes).astype(np.float64) + 1.0
    logits = np.broadcast_to(np.log(prior / prior.sum()), (len(y_eval), n_classes))
    return score(metric, np.asarray(logits), y_eval)


REFERENCE_MARGIN = 0.02  # a baseline must beat the bench's reference fits by 2 % of their score
REFERENCE_ROWS = 2048  # train rows a ridge reference fit uses at most
REFERENCE_EVAL_ROWS = 4096  # rows the reference fits are scored on at most
REFERENCE_FEATURES = 1024  # inputs a ridge reference fit uses at most (evenly spaced)
REFERENCE_CLASSES = 256  # beyond this many classes the constant fit stands alone
MAX_REFERENCE_CLASSES = 4096  # beyond this, no reference fit


def reference_fit(metric: str, x_train: np.ndarray, y_train: np.ndarray, x_eval: np.ndarray, y_eval: np.ndarray,
                  n_classes: int) -> tuple[float, float]:
    """The bench's two reference fits on one split: (a constant, a ridge regression); a track's
    baseline must beat the better of them by ``REFERENCE_MARGIN`` (``beats_references``).

    They run in the parent, once per test seed of every job on a custom track, so their cost is
    bounded whatever the track's sizes (red team: a 11,000 x 11,000 ridge fit, minutes a seed;
    ``np.eye`` of a million classes, a MemoryError): at most ``REFERENCE_EVAL_ROWS`` rows are
    scored, the ridge fit sees at most ``REFERENCE_ROWS`` train rows and ``REFERENCE_FEATURES``
    inputs (evenly spaced), and there is no ridge fit beyond ``REFERENCE_CLASSES`` classes, no
    fit at all (inf: nothing to beat) beyond ``MAX_REFERENCE_CLASSES``."""
    if metric != "mse" and n_classes > MAX_REFERENCE_CLASSES:
        return (math.inf, math.inf)
    x_eval, y_eval = x_eval[:REFERENCE_EVAL_ROWS], y_eval[:REFERENCE_EVAL_ROWS]
    ridge = math.inf if metric != "mse" and n_classes > REFERENCE_CLASSES else ridge_score(
        metric, x_train[:REFERENCE_ROWS], y_train[:REFERENCE_ROWS], x_eval, y_eval, n_classes)
    return trivial_score(metric, y_train, y_eval, n_classes), ridge


def beats_references(value: float, fits: tuple[float, float]) -> bool:
    """A baseline's score (lower is better) beats the better reference fit by the margin."""
    return bool(math.isfinite(value) and value <= (1 - REFERENCE_MARGIN) * min(fits))


def ridge_score(metric: str, x_train: np.ndarray, y_train: np.ndarray, x_eval: np.ndarray, y_eval: np.ndarray,
                n_classes: int) -> float:
    """The score of a ridge regression on the flattened, standardised inputs: on the targets
    (regression), or on one-hot labels whose scores, times a temperature fitted on the train
    split, are the logits (classification). A reference fit the bench owns (issue 25.8)."""
    width = math.prod(x_train.shape[1:])
    keep = np.unique(np.linspace(0, width - 1, min(width, REFERENCE_FEATURES)).astype(np.int64))

    def features(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
        scaled: np.ndarray = (x.reshape(len(x), -1)[:, keep].astype(np.float64) - mean) / std
        return scaled

    flat = x_train.reshape(len(x_train), -1)[:, keep].astype(np.float64)
    mean, std = flat.mean(axis=0), flat.std(axis=0) + 1e-8
    a, b = features(x_train, mean, std), features(x_eval, mean, std)
    classify = metric != "mse"
    if classify:
        y = np.zeros((len(y_train), n_classes))
        y[np.arange(len(y_train)), y_train.astype(np.int64)] = 1.0
    else:
        y = y_train.reshape(len(y_train), -1).astype(np.float64)
    offset = y.mean(axis=0)
    lam = 1e-2 * len(a)
    if a.shape[1] <= a.shape[0]:  # primal: (A'A + lam I) w = A'y
        w = np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ (y - offset))
    else:  # dual: w = A'(AA' + lam I)^-1 y
        w = a.T @ np.linalg.solve(a @ a.T + lam * np.eye(a.shape[0]), y - offset)
    if not classify:
        return score(metric, (b @ w + offset).reshape(y_eval.shape), y_eval)
    train_scores, eval_scores = a @ w + offset, b @ w + offset
    best = min((1.0, 2.0, 4.0, 8.0, 16.0, 32.0), key=lambda t: score(metric, t * train_scores, y_train))
    return score(metric, best * eval_scores, y_eval)


def validate(
    track: CustomTrack, *, memory_mb: int = 6144, timeout_s: float = 900.0,
    max_protocol_s: float = MAX_PROTOCOL_S, cancel: threading.Event | None = None,
    secret: SeedSecret | None = None, options: EngineOptions | None = None,
) -> dict[str, Any]:
    """Run the track file in the sandbox and check it; return what was measured.

    Checks: ``make_splits`` gives arrays of the card's shapes and types, the same
    bytes twice for one seed, different data for another seed (else a warning);
    the baseline builds within ``param_cap``, has the output shape and trains once
    to finite predictions; a default protocol would take at most ``max_protocol_s``.
    Raises ``BenchError`` (``invalid_track`` and the sandbox's codes). ``baseline_build`` in
    the answer is bytes, not JSON: the baseline's checked build, which the track keeps
    (``CustomTrack.baseline_build``).
    """
    from bench import data as data_mod
    from bench.captured import build_version, capture_warnings, import_capture, pack_build

    started = time.monotonic()
    deadline = started + timeout_s
    cancel = cancel or threading.Event()
    card = track.card
    warnings: list[str] = []
    secret = secret or engine_options.current().deployment_secret()
    root = (options or engine_options.current().engine).tracks_dir
    # Every split seed a default job of this epoch uses, made exactly as a job makes them,
    # twice, in two separate children: the data validated is the data judged.
    d = TrackSettings.of(card).defaults
    protocol_seeds = sweep_seeds(d.sweep_seeds) + final_seeds(d.n_seeds)
    split_seeds = [run_seeds(s, secret, track=track.id).split for s in protocol_seeds]
    seed_a, seed_b = split_seeds[0], split_seeds[1]
    generated, seconds = _generate(track, split_seeds, memory_mb=memory_mb, deadline=deadline,
                                   cancel=cancel, timeout_s=timeout_s)
    again, _ = _generate(track, split_seeds, memory_mb=memory_mb, deadline=deadline,
                         cancel=cancel, timeout_s=timeout_s)
    for seed in split_seeds:
        for name in SPLIT_NAMES:
            one, two = generated[seed][name], again[seed][name]
            if one.shape != two.shape or one.tobytes() != two.tobytes():
                raise _invalid(
                    f"make_splits is not deterministic: two calls with seed {seed} gave different {name}.",
                    "Draw every random number from a generator seeded by make_splits' seed argument "
                    "(numpy.random.default_rng(seed) or torch.Generator().manual_seed(seed)).",
                )
    first, other = generated[seed_a], generated[seed_b]
    if all(first[n].tobytes() == other[n].tobytes() for n in SPLIT_NAMES):
        warnings.append("make_splits ignores its seed: every protocol seed gets the same data, so "
                        "seed-to-seed variance comes from the init and data order only.")
    sizes_of = {seed: {split: len(a[f"x_{split}"]) for split in ("train", "val", "test")}
                for seed, a in generated.items()}
    if any(s != sizes_of[seed_a] for s in sizes_of.values()):
        raise _invalid("make_splits gives splits of other sizes for other seeds.",
                       "Keep the sizes of the three splits fixed; draw only their contents from the seed.")
    for seed, arrays in generated.items():
        _store(track, seed, arrays, root)
    checksums = {str(seed): arrays_checksum(arrays) for seed, arrays in generated.items()}
    with OwnedDir("validate") as tmp:
        work = Path(tmp)
        sizes = {split: len(first[f"x_{split}"]) for split in ("train", "val", "test")}
        engine_track = as_track(track, root)
        exported = data_mod.export(engine_track, seed_a, None, work / "data")  # what the baseline child reads
        lr = sorted(d.lr_grid)[len(d.lr_grid) // 2]
        cfg = {"lr": lr, "epochs": d.epochs, "batch_size": d.batch_size,
               "weight_decay": d.weight_decay, "hparams": {}}
        seeds = run_seeds(0, secret, track=track.id)
        events: list[dict[str, Any]] = []
        limits = Limits(memory_mb=memory_mb)
        # As in a job: the track's baseline is captured in a child with no data, then trained
        # from the checked graph by a trainer child that runs no track code.
        capture = ArmSession("baseline", work / "capture_baseline", limits, deadline, cancel, timeout_s,
                             read_only=[])
        try:
            capture.request(wire.CaptureLoad(role="baseline", track=track.name, spec=card["spec"],
                                             param_cap=card["param_cap"], track_source=track.source))
            noted = capture.request(wire.Capture(configs=[{}], init_seeds=[seeds.init]))
            # the author's code: bounded as an idea's is (a red team padded one with 10M float64 zeros)
            captured = import_capture(capture, [{}], 1, work / "data" / "capture_baseline",
                                      TrackSettings.of(card).max_build_elements)
        finally:
            capture.close()
        build = pack_build(captured)
        # what the file did besides building (kept in every report: jobs build nothing of it)
        warnings += capture_warnings("track's baseline", noted)
        session = ArmSession("baseline", work / "baseline", limits, deadline, cancel, timeout_s)
        try:
            session.request(wire.Load(
                role="baseline", spec=card["spec"], param_cap=card["param_cap"],
                captured=wire.CapturedRef(dir=str(captured.directory), configs=[{}], init_seeds=[seeds.init])))
            checked: wire.CheckReply = session.request(wire.Check(
                data_dir=str(exported.data_dir), configs=[{}], batch_size=d.batch_size,
                loss=card["metric"]["loss"]))
            session.request(wire.Train(path="sequential", runs=[{
                "run_id": wire.SMOKE_RUN, "cfg": cfg, "eval": "val", "data_dir": str(exported.data_dir),
                "init_seed": seeds.init, "order_seed": seeds.order, "loss": card["metric"]["loss"],
                "schedule": d.schedule, "keep": False, "group": 0,
            }]), events.append)
        finally:
            session.close()
        event = events[0]
        with open_output(work / "baseline", wire.SMOKE_PREDICTIONS, "baseline") as fh:
            value = score(card["metric"]["name"], load_npy(fh, "baseline", "prediction file"), exported.y_val)
        if event["diverged"] or not math.isfinite(value):
            raise _invalid(
                f"The baseline's smoke run (lr {lr:g}, {d.epochs} epochs) gave non-finite "
                "predictions on the validation split.",
                "Make build_baseline train stably at the middle of lr_grid (or change lr_grid).",
            )
        n_classes = int(card["spec"]["output_shape"][0])
        trivial, ridge = reference_fit(card["metric"]["name"], first["x_train"], first["y_train"], first["x_val"],
                                       exported.y_val, n_classes)
        beats = beats_references(value, (trivial, ridge))
        if not beats:
            warnings.append(
                f"the baseline's smoke run scored {value:.4g} on validation, not 2% better than the bench's "
                f"reference fits (a constant {trivial:.4g}, a ridge regression {ridge:.4g}): verdicts on this "
                "track count in no totals or discoveries (a win over a weak baseline is no discovery)."
            )
        run_s = float(event["seconds"])
        data_s = float(np.mean(seconds))
        n_seeds = d.sweep_seeds + d.n_seeds
        estimate = planned_runs(card) / 2 * run_s + n_seeds * data_s
        if estimate > max_protocol_s:
            raise _invalid(
                f"A default protocol on this track would take about {estimate:.0f} s here "
                f"({planned_runs(card)} runs of {run_s:.1f} s, two at a time, plus "
                f"{n_seeds} data seeds of {data_s:.1f} s); the limit is {max_protocol_s:.0f} s.",
                "Use fewer samples or epochs, or a smaller baseline.",
            )
    return {
        "sizes": sizes,
        "bytes_per_seed": int(sum(a.nbytes for a in first.values())),
        "deterministic": True,
        "checksums": checksums,
        "seed_epoch": secret.epoch,
        "data_seconds_per_seed": round(data_s, 3),
        "baseline_n_params": checked.n_params[0],
        "baseline_graph_sha256": captured.graph_sha256[0],
        "baseline_seed_sha256": captured.seed_sha256[0][0],  # what it built at sweep seed 0, this epoch
        # that build, checked (bytes, not JSON: the caller keeps it apart, workers.tracks)
        "baseline_build": build,
        "baseline_build_version": build_version(),
        "reference_fits": {"constant": trivial, "ridge": ridge, "baseline": value, "margin": REFERENCE_MARGIN,
                           "beats": beats},
        "baseline_smoke": {
            "lr": lr, "epochs": d.epochs, "metric": card["metric"]["name"], "value": value,
            "trivial_value": trivial, "seconds": round(run_s, 3),
        },
        "estimated_protocol_s": round(estimate, 1),
        "warnings": warnings,
        "isolation": session.layers,
        "seconds": round(time.monotonic() - started, 2),
    }
