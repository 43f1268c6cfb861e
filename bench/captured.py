"""The parent's side of a capture: read what a capture child wrote, check it, pass it on.

The capture child (``bench.capture``) runs submitted code, so the parent reads its files
only by names it chose, without following links, with bounded sizes
(``bench.runner.open_output``), parses the graphs as plain JSON and checks them against
the op allowlist (``bench.graph.build_graph``) before a trainer sees them, loads tensors
with ``allow_pickle=False`` and checks that every init seed's tensors have the shapes
and dtypes of the first. What passes is written again, by the parent, into the job's
data directory, which the trainer children read.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bench import wire
from bench.capture import graph_path, tensor_path
from bench.errors import BenchError, ErrorCode
from bench.family import graph_family
from bench.graph import DTYPES, build_graph, eval_mutation, not_capturable
from bench.npy import read_npy
from bench.runner import ArmSession, load_npy, npy_header, open_output, write_new_file

MAX_GRAPH_BYTES = 8 << 20
MAX_TENSOR_ELEMENTS = 50_000_000  # all of one arm's tensors of one init seed
MAX_BUILD_BYTES = 64 << 20  # a stored build (``pack_build``): far above what a track's param_cap admits


class CaptureFiles(Protocol):
    """Where a capture's files lie (a capture child's ``ArmSession``, or a stored build unpacked
    by the parent), and whose they are, for the errors."""

    @property
    def workdir(self) -> Path: ...

    @property
    def role(self) -> str: ...


@dataclass(frozen=True)
class _Unpacked:
    workdir: Path
    role: str


@dataclass(frozen=True)
class ArmCapture:
    """One arm's checked capture: configs, tensor shapes and dtypes, graph hashes, where it lies."""

    arm: str
    configs: tuple[str, ...]  # canonical JSON of each config's hparams
    shapes: tuple[tuple[tuple[tuple[int, ...], str], ...], ...]  # per config, per tensor
    graph_sha256: tuple[str, ...]
    directory: Path
    # per config: every init seed's tensors (dtype, shape, bytes), in order: what the arm built
    tensors_sha256: tuple[str, ...] = ()
    seed_sha256: tuple[tuple[str, ...], ...] = ()  # per config, per init seed (capture order)
    families: tuple[str, ...] = ()  # per config: bench.family.graph_family of its train-mode graph

    def config_index(self, hparams: dict[str, Any]) -> int:
        return self.configs.index(json.dumps(hparams, sort_keys=True))

    def report_block(self) -> dict[str, Any]:
        """What the report says of the capture: each config's graph hash and tensor count."""
        return {"graph_sha256": list(self.graph_sha256), "tensors_sha256": list(self.tensors_sha256),
                "n_tensors": [len(s) for s in self.shapes]}


def _read(session: CaptureFiles, relative: str, limit: int) -> bytes:
    with open_output(session.workdir, relative, session.role) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise not_capturable(f"the {session.role}'s capture wrote more than {limit} bytes to {relative}")
    return data


def _header(session: CaptureFiles, relative: str) -> tuple[tuple[int, ...], str]:
    """A captured tensor's shape and dtype name, from its file's header (``npy_header``)."""
    with open_output(session.workdir, relative, session.role) as fh:
        shape, dtype = npy_header(fh, session.role, "captured tensor", ErrorCode.NOT_CAPTURABLE)
    if dtype.name not in DTYPES:
        raise not_capturable(f"the {session.role}'s capture holds a tensor of dtype {dtype}",
                             f"Keep parameters and buffers in {', '.join(DTYPES)}.")
    return shape, dtype.name


def _count_first(session: CaptureFiles, config: int, seed: int, n_tensors: int, max_elements: int) -> None:
    """Refuse one init seed's tensors from their headers, before any is read, when together they
    hold more than ``max_elements`` (a parent that read first wrote 4.7 GB before parity refused
    a model of one 32M-element tensor per seed)."""
    total = sum(math.prod(_header(session, tensor_path(config, seed, j))[0]) for j in range(n_tensors))
    if total > max_elements:
        raise not_capturable(f"the {session.role} holds {total} tensor elements; the limit is {max_elements}",
                             "Shrink the model: parameters, buffers and constants count together.")


def _checked_array(session: CaptureFiles, relative: str) -> np.ndarray:
    with open_output(session.workdir, relative, session.role) as fh:
        array = load_npy(fh, session.role, "captured tensor", ErrorCode.NOT_CAPTURABLE)
    if array.dtype.name not in DTYPES:
        raise not_capturable(f"the {session.role}'s capture holds a tensor of dtype {array.dtype}",
                             f"Keep parameters and buffers in {', '.join(DTYPES)}.")
    return np.ascontiguousarray(array)


KS_SAMPLE = 4096  # values of a tensor compared between init seeds (a fixed, even subsample)


def _values(array: np.ndarray) -> np.ndarray:
    flat = np.sort(array.astype(np.float64, copy=False).ravel())
    if flat.size > KS_SAMPLE:
        flat = flat[np.linspace(0, flat.size - 1, KS_SAMPLE).astype(np.int64)]
    return flat


def check_drawn_alike(first: np.ndarray, other: np.ndarray, role: str, j: int) -> None:
    """Refuse an init seed's tensor ``other`` that is not drawn like the first seed's ``first``.

    Submitted code builds every init seed's model in one capture child, so it can count its
    builds: a custom track's baseline that is sound for the one build validation makes and
    zeroed for every later one made a dead baseline that any idea beat (red team). A tensor
    the first seed holds constant (a LayerNorm's ones, a zero bias, buffers) must be equal in
    every seed; a random one must hold at least half as many distinct values (not zeroed, not
    rows copied) and, from 64 values, have the same distribution: a two-sample
    Kolmogorov-Smirnov distance under 3 sqrt(2/n), which two draws of one distribution
    exceed with probability about 3e-8.
    """
    if first.dtype.kind not in "fc" or first.size < 2:
        return
    if bool(np.all(first == first.flat[0])):
        if not np.array_equal(first, other):
            raise not_capturable(f"the {role}'s tensor {j} is constant in the first init seed and differs in another")
        return
    distinct = (np.unique(first).size, np.unique(other).size)
    if distinct[1] < max(2, distinct[0] // 2):  # zeroed, one value repeated, rows copied, quantised
        raise not_capturable(
            f"the {role}'s tensor {j} holds {distinct[1]} distinct values in an init seed and {distinct[0]} in "
            "the first: every init seed must build the same model with fresh random weights",
            "build_model / build_baseline must not depend on how many times it was called.",
        )
    if first.size < 64 or first.dtype.kind == "c":
        return
    a, b = _values(first), _values(other)
    grid = np.concatenate([a, b])
    distance = float(np.max(np.abs(np.searchsorted(a, grid, side="right") / a.size
                                   - np.searchsorted(b, grid, side="right") / b.size)))
    if not distance <= 3.0 * math.sqrt(2.0 / a.size):
        raise not_capturable(
            f"the {role}'s tensor {j} is not drawn like the first init seed's (Kolmogorov-Smirnov "
            f"distance {distance:.3g}): every init seed must build the same model with fresh random weights",
            "build_model / build_baseline must not depend on how many times it was called.",
        )


def _digest(digest: Any, array: np.ndarray) -> None:
    """Add one tensor (dtype, shape and bytes) to a seed's or a config's sha256."""
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    digest.update(array.tobytes())


def import_capture(
    session: CaptureFiles, configs: list[dict[str, Any]], n_seeds: int, dest: Path,
    max_elements: int = MAX_TENSOR_ELEMENTS,
) -> ArmCapture:
    """Check and copy the capture ``session`` (a capture child) wrote for ``configs`` x ``n_seeds``;
    ``max_elements``: what one init seed's tensors may hold together (counted from the headers
    before any is read; at most ``MAX_TENSOR_ELEMENTS``)."""
    max_elements = min(max_elements, MAX_TENSOR_ELEMENTS)
    import torch

    dest.mkdir(parents=True, exist_ok=True)
    shapes, hashes, tensor_hashes, seed_hashes = [], [], [], []
    families = []
    for config in range(len(configs)):
        (dest / graph_path(config, "train")).parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        n_tensors = None
        for mode in ("train", "eval"):
            raw = _read(session, graph_path(config, mode), MAX_GRAPH_BYTES)
            try:
                doc = json.loads(raw)
                _, signature = build_graph(doc, torch.device("cpu"))  # the allowlist, before any trainer
            except RecursionError:  # JSON or arguments nested thousands deep
                raise not_capturable(f"the {session.role}'s capture wrote a graph nested too deeply") from None
            except ValueError:
                raise not_capturable(f"the {session.role}'s capture wrote a graph that is not JSON") from None
            if mode == "eval" and signature.mutations:
                raise eval_mutation()
            if mode == "train":
                families.append(graph_family(doc))
            count = sum(1 for kind, _ in signature.inputs if kind != "user")
            if n_tensors is not None and count != n_tensors:
                raise not_capturable(f"the {session.role}'s train and eval graphs hold other tensors")
            n_tensors = count
            digest.update(raw)
            (dest / graph_path(config, mode)).write_bytes(raw)
        assert n_tensors is not None
        first: list[tuple[tuple[int, ...], str]] = []
        first_values: list[np.ndarray] = []
        built = hashlib.sha256()
        per_seed = []
        for seed in range(n_seeds):
            one = hashlib.sha256()
            _count_first(session, config, seed, n_tensors, max_elements)
            total = 0
            for j in range(n_tensors):
                array = _checked_array(session, tensor_path(config, seed, j))
                total += array.size
                if seed == 0:
                    first.append((tuple(array.shape), array.dtype.name))
                    first_values.append(array)
                elif (tuple(array.shape), array.dtype.name) != first[j]:
                    raise not_capturable(f"the {session.role}'s tensors change shape or dtype with the seed")
                else:
                    check_drawn_alike(first_values[j], array, session.role, j)
                for digest_of in (built, one):
                    _digest(digest_of, array)
                np.save(dest / tensor_path(config, seed, j), array, allow_pickle=False)
            per_seed.append(one.hexdigest())
            if total > max_elements:  # the files changed under us: the headers' count no longer holds
                raise not_capturable(f"the {session.role} holds {total} tensor elements; the limit is "
                                     f"{max_elements}")
        shapes.append(tuple(first))
        hashes.append(digest.hexdigest())
        tensor_hashes.append(built.hexdigest())
        seed_hashes.append(tuple(per_seed))
    return ArmCapture(
        arm=session.role, configs=tuple(json.dumps(c, sort_keys=True) for c in configs),
        shapes=tuple(shapes), graph_sha256=tuple(hashes), directory=dest, tensors_sha256=tuple(tensor_hashes),
        seed_sha256=tuple(seed_hashes), families=tuple(families),
    )


BUILD_FILES = ("capture.py", "graph.py", "captured.py", "oplist.py", "child.py")  # what makes and checks a build


@functools.cache
def build_version() -> str:
    """sha256 over the code that captures and checks a build (``BUILD_FILES``) and torch's
    version: a stored build made by other code is not used (``bench.judge.stored_build``),
    so a later fix to the capture reaches every track. Read once per process (every job asks)."""
    import torch

    here = Path(__file__).parent
    digest = hashlib.sha256(torch.__version__.encode())
    for name in BUILD_FILES:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    return digest.hexdigest()


def pack_build(captured: ArmCapture) -> bytes:
    """A one-build capture (a custom track's validated baseline: one config, one init seed) as
    the bytes its track keeps (``CustomTrack.baseline_build``): the graphs and tensors exactly as
    the parent wrote them after its checks, in a zip without compression. Over
    ``MAX_BUILD_BYTES`` it is the track's fault (``invalid_track``): a red team padded a baseline
    with 10M float64 zeros to fill a database row per version."""
    if len(captured.configs) != 1 or len(captured.seed_sha256[0]) != 1:
        raise BenchError(ErrorCode.INTERNAL, "a stored build is one config built once")
    names = _build_names(len(captured.shapes[0]))
    size = sum((captured.directory / name).stat().st_size for name in names)
    if size > MAX_BUILD_BYTES:
        raise BenchError(ErrorCode.INVALID_TRACK,
                         f"The baseline's model takes {size / 2**20:.0f} MiB; the limit is {MAX_BUILD_BYTES >> 20} MiB.",
                         "Build a smaller baseline: no large buffers or constants, float32 tensors.")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name in names:
            archive.writestr(name, (captured.directory / name).read_bytes())
    return buffer.getvalue()


def capture_warnings(who: str, reply: wire.CaptureReply) -> list[str]:
    """The report's (or a validation's) warnings for what a file did besides building its
    model (issue 27.8), in the bench's words: the child only picks codes
    (``wire.CaptureReply``) and, for ``forward_state``, up to 3 plain names."""
    warnings = []
    if "forward_state" in reply.notes:
        names = f" ({', '.join(reply.changed)})" if reply.changed else ""
        warnings.append(
            f"The {who}'s forward changed Python-side state{names} while it was captured: the captured "
            f"graph keeps what that state was then and never changes it, so the model trained is the graph, "
            f"not your Python code. Keep state in tensors (register_buffer) or out of forward.")
    if "build_processes" in reply.notes:
        warnings.append(
            f"The {who}'s build_model started a process or a thread: nothing it computes reaches the "
            f"captured model, and it only costs the capture's time. Build the model in build_model alone.")
    return warnings


def _build_names(n_tensors: int) -> list[str]:
    return [graph_path(0, "train"), graph_path(0, "eval"), *(tensor_path(0, 0, j) for j in range(n_tensors))]


def import_stored(build: bytes, role: str, staging: Path, dest: Path,
                  max_elements: int = MAX_TENSOR_ELEMENTS) -> ArmCapture:
    """``pack_build``'s capture, unpacked under ``staging`` by the parent and checked again as a
    child's capture is (``import_capture``: the allowlist, the dtypes, the counts) into ``dest``.
    The archive's names are the ones ``pack_build`` writes, nothing else: a name of another
    shape, a link or an entry over ``MAX_BUILD_BYTES`` refuses it (``internal``: the bench wrote
    it, and the database keeps it)."""
    broken = BenchError(ErrorCode.INTERNAL, f"the {role}'s stored build is damaged",
                        "Register the track's file again as a new version; tell the operator.")
    if len(build) > MAX_BUILD_BYTES:
        raise broken
    try:
        with zipfile.ZipFile(io.BytesIO(build)) as archive:
            entries = archive.infolist()
            names = [entry.filename for entry in entries]
            if (len(names) < 2 or names != _build_names(len(names) - 2)
                    or sum(entry.file_size for entry in entries) > MAX_BUILD_BYTES):
                raise broken
            for name in names:  # the parent's own directory: no child writes there
                target = staging / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise broken from exc
    return import_capture(_Unpacked(staging, role), [{}], 1, dest, max_elements)


def pin_first_build(captured: ArmCapture, n_seeds: int) -> ArmCapture:
    """``captured``, one build per config, as ``n_seeds`` init seeds that all hold that build's
    tensors (a custom track's validated baseline: ``protocol.Job.pins_baseline``); the trusted
    trainer still draws each seed's parameter values from its own init seed (``bench.redraw``)."""
    tensor_hashes, seed_hashes = [], []
    for config, per_seed in enumerate(captured.seed_sha256):
        if len(per_seed) != 1:
            raise BenchError(ErrorCode.INTERNAL, "a pinned build is one build per config")
        arrays = [read_npy((captured.directory / tensor_path(config, 0, j)).read_bytes())
                  for j in range(len(captured.shapes[config]))]
        copy_first_build(captured, config, list(range(1, n_seeds)))
        built = hashlib.sha256()
        for _ in range(n_seeds):
            for array in arrays:
                _digest(built, array)
        tensor_hashes.append(built.hexdigest())
        seed_hashes.append(per_seed * n_seeds)
    return replace(captured, tensors_sha256=tuple(tensor_hashes), seed_sha256=tuple(seed_hashes))


def copy_first_build(captured: ArmCapture, config: int, numbers: list[int]) -> None:
    """Init seed number 0's tensors of ``config`` written again as each of ``numbers``' (the
    parent's own directory: no child writes there)."""
    for j in range(len(captured.shapes[config])):
        array = read_npy((captured.directory / tensor_path(config, 0, j)).read_bytes())
        for number in numbers:
            np.save(captured.directory / tensor_path(config, number, j), array, allow_pickle=False)


REBUILD_HINT = ("build_model / build_baseline must build the same model from the same spec and seed, however "
                "often and in whatever process it is called (draw any randomness of your own from torch).")


def captured_targets(first: ArmCapture, config: int) -> list[tuple[str, str]]:
    """(kind, target) of each of ``config``'s captured tensors, in order, from the graph the
    parent checked and wrote."""
    doc = json.loads((first.directory / graph_path(config, "train")).read_bytes())
    return [(str(i["kind"]), str(i["target"])) for i in doc["inputs"] if i["kind"] != "user"]


def import_rebuilt(session: ArmSession, first: ArmCapture, config: int, decoys: list[int | None],
                   max_elements: int = MAX_TENSOR_ELEMENTS) -> dict[int, list[np.ndarray]]:
    """The tensors a fresh capture child rebuilt (``wire.Rebuild``) of ``first``'s ``config``, by
    its init seed number ``k``, for each ``k`` whose ``decoys[k]`` is None (a new seed).

    ``decoys[k]``, else, is the first capture's number of that seed: its tensors must hash bit
    for bit as the first capture's (a file that builds otherwise for the confirmation cannot
    tell a decoy from a new seed). Constants are the first capture's; every other tensor has
    the shape and dtype it had, and a new seed's are drawn like the first capture's first
    seed's (``check_drawn_alike``). The messages name no seed: which were decoys stays secret."""
    kinds = [kind for kind, _ in captured_targets(first, config)]
    expected = first.shapes[config]
    firsts = [read_npy((first.directory / tensor_path(config, 0, j)).read_bytes()) for j in range(len(expected))]
    rebuilt = [j for j, kind in enumerate(kinds) if kind != "constant"]
    max_elements = min(max_elements, MAX_TENSOR_ELEMENTS)
    new: dict[int, list[np.ndarray]] = {}
    for k, index in enumerate(decoys):
        total = sum(math.prod(_header(session, tensor_path(0, k, j))[0]) for j in rebuilt)
        if total > max_elements:
            raise not_capturable(f"the {session.role} holds {total} tensor elements; the limit is {max_elements}")
        one = hashlib.sha256()
        arrays = []
        for j, was in enumerate(expected):
            array = _checked_array(session, tensor_path(0, k, j)) if j in rebuilt else firsts[j]
            if (tuple(array.shape), array.dtype.name) != was:
                raise not_capturable(f"the {session.role}'s tensors change shape or dtype when it is built again "
                                     "for the confirmation", REBUILD_HINT)
            _digest(one, array)
            arrays.append(array)
        if index is not None:
            if one.hexdigest() != first.seed_sha256[config][index]:
                raise not_capturable(f"the {session.role} built other weights for a seed when it was built again "
                                     "for the confirmation", REBUILD_HINT)
            continue
        for j in rebuilt:
            check_drawn_alike(firsts[j], arrays[j], session.role, j)
        new[k] = arrays
    return new


def read_kept(session: ArmSession, run_id: str, expected: tuple[tuple[tuple[int, ...], str], ...]) -> list[np.ndarray]:
    """The trained tensors a trainer child wrote for a kept run, checked against the capture."""
    arrays = []
    for j, (shape, dtype) in enumerate(expected):
        with open_output(session.workdir, wire.kept_file(run_id, j), session.role) as fh:
            array = load_npy(fh, session.role, "trained tensor")
        if tuple(array.shape) != shape or array.dtype.name != dtype:
            raise BenchError(ErrorCode.INTERNAL, f"a trained tensor of the {session.role} changed shape")
        arrays.append(array)
    return arrays


def pack(arrays: list[np.ndarray]) -> bytes:
    """Arrays as one .npz (no pickles), as the baseline cache stores a kept model."""
    buffer = io.BytesIO()
    np.savez(buffer, *arrays)
    return buffer.getvalue()


def unpack(data: bytes, expected: tuple[tuple[tuple[int, ...], str], ...]) -> list[np.ndarray] | None:
    """``pack``'s arrays, or None when they do not match ``expected`` (a stale cache entry)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:  # np.savez's layout, read without np.load
            arrays = [read_npy(archive.read(f"arr_{j}.npy")) for j in range(len(expected))]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None
    if [(tuple(a.shape), a.dtype.name) for a in arrays] != list(expected):
        return None
    return arrays


def hand_over_for_measure(session: ArmSession, run_id: str, arrays: list[np.ndarray], probe: np.ndarray) -> dict[str, str]:
    """Write a trained model's tensors and its probe batch into a capture child's directory.

    New files only (``write_new_file``): the child owns the directory and may have planted
    links under the names. Returns the paths the ``measure`` command names."""
    for j, array in enumerate(arrays):
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        write_new_file(session.workdir, f"{wire.measure_prefix(run_id)}{j}.npy", buffer.getvalue())
    buffer = io.BytesIO()
    np.save(buffer, probe, allow_pickle=False)
    write_new_file(session.workdir, wire.probe_file(run_id), buffer.getvalue())
    return {"prefix": wire.measure_prefix(run_id), "probe": wire.probe_file(run_id)}

