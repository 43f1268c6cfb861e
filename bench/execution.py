"""Where a job's models are built and trained: the executor port, and the sandbox behind it.

``bench.protocol`` decides what to run (which configs, seeds and splits), scores what
comes back against labels only it holds, and decides the verdict. It reaches every
process that runs a track's or a submitted file's code through one port, ``Executor``:
make_data (a custom track's data), load and capture (the submitted file, in a capture
child), check and train (the bench's trainer, on the captured graphs), rebuild (the
confirmation's builds), measure and probe (the mechanism). ``judge`` picks the executor
(and, for the sandbox's, the warm slot it adopts).
``SandboxExecutor`` is the port's one production implementation: one sandboxed child
per arm and role (``bench.runner.ArmSession``), warm slots (``bench.warm``), and every
check of what a child says (an event only for a run of its own command, files only
by names the parent chose, tensors against the first capture). A test drives the
protocol through a scripted executor instead (``tests/bench/scripted.py``), with no
child at all.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bench import custom_track as custom_mod
from bench import sandbox, warm, wire
from bench.capture import tensor_path
from bench.captured import (
    REBUILD_HINT,
    ArmCapture,
    captured_targets,
    hand_over_for_measure,
    import_capture,
    import_rebuilt,
    import_stored,
    read_kept,
)
from bench.custom_track import CustomTrack
from bench.errors import BenchError, ErrorCode
from bench.graph import not_capturable
from bench.runner import ArmSession, load_npy, open_output
from bench.sandbox import Limits

ARMS = ("baseline", "idea")
Shapes = tuple[tuple[tuple[int, ...], str], ...]  # one config's tensors: (shape, dtype name) each


@dataclass(frozen=True)
class Trained:
    """One run a trainer finished, as the parent read it: its predictions and numbers, and
    readers for what the parent reads only when it needs it (the rows predicted one at a time
    when the run did not diverge; the trained tensors when the mechanism is measured)."""

    run_id: str
    predictions: np.ndarray
    diverged: bool
    seconds: float
    n_params: int
    path: str  # how the trainer ran it: vectorized or sequential
    read_rows: Callable[[], np.ndarray]
    read_state: Callable[[Shapes], list[np.ndarray]]
    cached: bool = False  # answered by the baseline cache (bench.baseline_cache.CachedTrain): no rows to read


@dataclass(frozen=True)
class MeasureRun:
    """One final model for ``measure()``: its config and capture seed number, its trained
    tensors and the probe batch."""

    run_id: str
    config: int
    seed_index: int
    state: list[np.ndarray]
    probe: np.ndarray


class Executor(Protocol):
    """What the protocol needs run. A method that takes an arm works on that arm alone; the
    protocol calls it for both arms at once (one thread each)."""

    adopted: set[str]  # warm children taken over (released to the slot otherwise)

    def make_data(self, custom: CustomTrack, split_seeds: list[int]) -> None:
        """Make (and cache) a custom track's data for ``split_seeds`` by its own code."""

    def start(self) -> None:
        """Make every arm ready to load its file."""

    def start_trainers(self, measured: bool = False) -> None:
        """Start each arm's trainer (once both files loaded: a file that fails to load, the
        usual end of a broken or hostile idea, costs no trainer); ``measured``: the idea's own
        ``measure()`` will run on the baseline's models (a child for it may start now)."""

    def load(self, arm: str, command: wire.CaptureLoad) -> wire.LoadedReply:
        """Load ``arm``'s file (its HPARAMS, mechanism and whether it has ``measure``)."""

    def capture(self, arm: str, command: wire.Capture, within: tuple[float, str]) -> wire.CaptureReply:
        """Build every config at every build seed as graphs and tensors; what the child saw the
        file do besides (advisory: ``wire.CaptureReply``)."""

    def read_capture(self, arm: str, configs: list[dict[str, Any]], n_seeds: int, dest: Path,
                     max_elements: int) -> ArmCapture:
        """The capture, checked and copied to ``dest`` (``bench.captured.import_capture``)."""

    def load_trainer(self, arm: str, command: wire.Load) -> wire.DeviceReply:
        """Hand ``arm``'s trainer the checked capture."""

    def check(self, arm: str, command: wire.Check) -> wire.CheckReply:
        """The trainer's counts of every config (parameters, buffers, FLOPs, whether it batches)."""

    def train(self, arm: str, runs: list[dict[str, Any]], path: str, on_run: Callable[[Trained], None]) -> None:
        """Train ``runs`` (``wire.Train``'s); call ``on_run`` once per run, as each finishes."""

    def forget_builds(self) -> None:
        """Close every capture child submitted code ran in (before a confirmation's rebuild)."""

    def rebuild(self, arm: str, *, hparams: dict[str, Any], build_seeds: list[int], within: tuple[float, str],
                captured: ArmCapture, config: int, decoys: list[int | None], numbers: list[int | None],
                max_elements: int) -> None:
        """Build ``captured``'s ``config`` (``hparams``) again at ``build_seeds``, in a child that
        ran no submitted code since ``forget_builds``. A build ``k`` with ``decoys[k]`` set must
        come out bit for bit as that seed of the first capture (``bench.captured.import_rebuilt``);
        the others join the capture as its seed number ``numbers[k]``, for the trainer."""

    def more_inits(self, arm: str, init_seeds: list[int]) -> None:
        """Tell ``arm``'s trainer about the confirmation's init seeds."""

    def measure(self, arm: str, runs: list[MeasureRun], measure_code: str | None) -> list[float]:
        """The idea's ``measure()`` on ``arm``'s final models (``measure_code``: the idea's file,
        run on the baseline's models in a child that captured them or, for a built-in track's
        own baseline, a fresh one)."""

    def probe(self, arm: str, command: wire.Probe) -> list[float]:
        """A declared service probe on ``arm``'s final models, in its trusted trainer."""

    def isolation(self) -> list[str]:
        """The sandbox layers every child of the job ran under."""

    def cancel(self) -> None:
        """Stop every arm's work now (the other arm failed)."""

    def close(self) -> None:
        """End every child; nothing of the job runs after."""


def event_numbers(event: dict[str, Any], arm: str) -> tuple[bool, float, int]:
    """The ``diverged``, ``seconds`` and ``n_params`` of a child's run event, type-checked."""
    diverged, seconds, n_params = event.get("diverged"), event.get("seconds"), event.get("n_params")
    if (
        not isinstance(diverged, bool)
        or not isinstance(seconds, int | float) or isinstance(seconds, bool)
        or not math.isfinite(seconds) or seconds < 0
        or not isinstance(n_params, int) or isinstance(n_params, bool) or n_params < 0
    ):
        raise BenchError(ErrorCode.SANDBOX_VIOLATION, f"The {arm} process sent a malformed run event.")
    return diverged, float(seconds), n_params


class SandboxExecutor:
    """Each arm in sandboxed children (``bench.child``): a capture child that runs its file (and
    a fresh one per confirmation look, ``rebuild``), and a trusted trainer that runs the bench's
    trainer on the checked graphs; a custom track's data in a child of its own.

    A built-in track's own baseline is the bench's code: one child captures it and then trains
    it (the ``own_baseline`` side of ``wire.side_after``), one child start fewer per job. Submitted code
    never runs there: the idea's ``measure()`` of the baseline runs in a fresh child.

    A custom track's own baseline is the build its validation captured and checked
    (``baseline_build``, ``bench.captured.import_stored``): no child loads or builds it, so its
    ``load`` declares nothing and its ``capture`` notes nothing, and the idea's ``measure()`` of it
    runs in a fresh child, as for a built-in track's."""

    def __init__(self, workdir: Path, memory_mb: int, deadline: float, cancel: threading.Event, timeout_s: float,
                 *, canonical_baseline: bool, tracks_dir: Path, slot: warm.Slot | None = None,
                 baseline_build: bytes | None = None) -> None:
        self.workdir = workdir
        self.tracks_dir = tracks_dir
        self.limits = Limits(memory_mb=memory_mb)
        self.deadline = deadline
        self.cancel_event = cancel
        self.timeout_s = timeout_s
        # the baseline is a built-in track's own code (trusted), not a submitted file
        self.canonical_baseline = canonical_baseline
        # a custom track's validated baseline build (``CustomTrack.baseline_build``): no child builds it
        self.baseline_build = baseline_build
        self.slot = slot
        self.sessions: dict[str, ArmSession] = {}  # the trusted trainers, one per arm
        # the capture children: per arm, and a confirmation's rebuild_<arm>
        self.captures: dict[str, ArmSession] = {}
        # guards the two dicts: one arm's rebuild adds its child while the other arm's failure
        # cancels every child (a dict that changes size while it is read raises)
        self._children = threading.Lock()
        self.rebuilds: dict[str, int] = {}  # fresh rebuild children started, per arm
        self.loads: dict[str, wire.CaptureLoad] = {}  # each arm's file, to load again in a rebuild
        self.adopted: set[str] = set()  # children (by slot name) adopted from a warm slot
        self.captured: dict[str, ArmCapture] = {}  # each arm's checked capture (read_capture)
        self.captured_with: dict[str, wire.Capture] = {}  # the capture command each arm was given
        self.measures = 0  # fresh children started to measure the own baseline
        # the job's fork server: the process's, lent with a slot (warm children or none) and left
        # running at the job's end; else one started with the job and closed with it (None where
        # the host runs none)
        self.server: sandbox.ForkServer | None = None

    def make_data(self, custom: CustomTrack, split_seeds: list[int]) -> None:
        custom_mod.ensure_data(custom, split_seeds, root=self.tracks_dir, memory_mb=self.limits.memory_mb,
                               deadline=self.deadline, cancel=self.cancel_event, timeout_s=self.timeout_s)

    def start(self) -> None:
        """Start both arms' capture children (or adopt a warm slot's, trainers included), then
        wait until they imported torch. A trainer not adopted starts in ``start_trainers``; the
        built-in track's own baseline's capture child is its trainer too, started here.

        Launches run one at a time (``sandbox.launch`` serialises them); the torch imports overlap.
        """
        slot = self.slot
        if slot is None:
            self.server = sandbox.ForkServer.start(self.workdir, self.limits, tracks=self.canonical_baseline)
        else:
            self.server = slot.server
        if slot is not None and not self.canonical_baseline:
            # they see the track packages: they never train what submitted code built, nor
            # run submitted code
            slot.drop("baseline")
            slot.drop("measure_baseline_1")
        for arm in ARMS:
            if self._stored(arm):
                continue  # a stored build: nothing to load or capture
            if arm == "baseline" and self.canonical_baseline:
                launched = self._adopt(arm)
                session = ArmSession(arm, self.workdir / arm, self.limits, self.deadline, self.cancel_event,
                                     self.timeout_s, launched=launched, pending=1 if launched else 0,
                                     wait_ready=False, hide_tracks=False, server=self.server)
                self.captures[arm] = self.sessions[arm] = session
                continue
            launched = self._adopt(f"capture_{arm}")
            self.captures[arm] = self.capture_session(arm, self.workdir / f"capture_{arm}", launched)
        for arm in ARMS:
            if arm in self.sessions:
                continue
            launched = self._adopt(arm)
            if launched is not None:
                self.sessions[arm] = self._trainer(arm, launched)
        for session in self.captures.values():
            session.wait_ready()

    def start_trainers(self, measured: bool = False) -> None:
        """Each arm's trainer, unless adopted: started now, its torch import overlapping the
        capture; its first request waits for it. Started after both files loaded, so a file
        that fails to load (a broken or hostile idea's usual end) costs no trainer. With
        ``measured`` and a built-in track's own baseline, the fresh child the idea's
        ``measure()`` of that baseline will run in starts now too, its start hidden by the
        training (the warm path paid it at the end: tabular's example, 0.8 s)."""
        for arm in ARMS:
            if arm not in self.sessions:
                session = self._trainer(arm, None)
                with self._children:  # killed with the others if an arm fails
                    self.sessions[arm] = session
        if measured and self.measured_fresh("baseline"):
            self._measure_child("baseline")

    def _stored(self, arm: str) -> bool:
        """``arm`` is a custom track's baseline whose validated build the track keeps: no child builds it."""
        return arm == "baseline" and self.baseline_build is not None

    def measured_fresh(self, arm: str) -> bool:
        """The idea's ``measure()`` of ``arm``'s models runs in a fresh child, not in a child that
        captured them: the own baseline's trains (a built-in track's), or none captured them (a
        custom track's stored build)."""
        return (arm == "baseline" and self.canonical_baseline) or self._stored(arm)

    def _measure_child(self, arm: str) -> ArmSession:
        """The fresh child the idea's ``measure()`` of ``arm``'s models runs in (started once)."""
        key = f"measure_{arm}"
        with self._children:
            session = self.captures.get(key)
        if session is None or session.proc.poll() is not None:
            self.measures += 1
            name = f"{key}_{self.measures}"  # the first may be a warm slot's (warm.CHILDREN)
            # the slot's sees the track packages: only a built-in track's own baseline's is adopted
            session = self.capture_session(arm, self.workdir / name, self._adopt(name) if self.canonical_baseline else None)
            with self._children:  # killed with the others if the other arm fails
                self.captures[key] = session
        return session

    def _adopt(self, name: str) -> Any:
        launched = self.slot.launched.get(name) if self.slot else None
        if launched is not None:
            self.adopted.add(name)
        return launched

    def _trainer(self, arm: str, launched: Any) -> ArmSession:
        return ArmSession(
            arm, self.workdir / arm, self.limits, self.deadline, self.cancel_event, self.timeout_s,
            launched=launched, pending=1 if launched else 0, wait_ready=False, server=self.server,
        )

    def capture_session(self, arm: str, workdir: Path, launched: Any = None, fresh: bool = False) -> ArmSession:
        """A capture child for ``arm`` (started, or ``launched`` adopted). Only a child that
        builds a built-in track's own baseline needs the track packages on its path; every child
        that runs submitted code sees them empty, and no capture child sees any data (read_only=[]:
        not even the job's data directory)."""
        return ArmSession(
            arm, workdir, self.limits, self.deadline, self.cancel_event,
            self.timeout_s, launched=launched, pending=1 if launched else 0, wait_ready=False,
            read_only=[], hide_tracks=not (arm == "baseline" and self.canonical_baseline),
            server=None if fresh else self.server,
        )

    def load(self, arm: str, command: wire.CaptureLoad) -> wire.LoadedReply:
        self.loads[arm] = command  # as a fresh child (rebuild, measure) is given it: not to train
        if self._stored(arm):
            return wire.LoadedReply(hparams=None, mechanism=None, has_measure=False)  # a track's baseline declares none
        if arm == "baseline" and self.canonical_baseline:
            command = command.model_copy(update={"trains": True})
        reply: wire.LoadedReply = self.captures[arm].request(command)
        return reply

    def capture(self, arm: str, command: wire.Capture, within: tuple[float, str]) -> wire.CaptureReply:
        self.captured_with[arm] = command
        if self._stored(arm):
            return wire.CaptureReply()
        reply: wire.CaptureReply = self.captures[arm].request(command, within=within)
        return reply

    def read_capture(self, arm: str, configs: list[dict[str, Any]], n_seeds: int, dest: Path,
                     max_elements: int) -> ArmCapture:
        if self._stored(arm):
            assert self.baseline_build is not None
            if configs != [{}] or n_seeds != 1:
                raise BenchError(ErrorCode.INTERNAL, "a stored baseline build is one config built once")
            staging = self.workdir / "stored_baseline"
            staging.mkdir()
            self.captured[arm] = import_stored(self.baseline_build, arm, staging, dest, max_elements)
        else:
            self.captured[arm] = import_capture(self.captures[arm], configs, n_seeds, dest, max_elements)
        return self.captured[arm]

    def load_trainer(self, arm: str, command: wire.Load) -> wire.DeviceReply:
        reply: wire.DeviceReply = self.sessions[arm].request(command)
        return reply

    def check(self, arm: str, command: wire.Check) -> wire.CheckReply:
        checked: wire.CheckReply = self.sessions[arm].request(command)
        return checked

    def train(self, arm: str, runs: list[dict[str, Any]], path: str, on_run: Callable[[Trained], None]) -> None:
        """Only the child that owns a run may report it, only for runs of this command, and only
        once: the idea's child cannot speak for the baseline's runs. Files are read only by the
        names the parent expects, in the arm's own directory (``runner.open_output``)."""
        session = self.sessions[arm]
        expected = {run["run_id"] for run in runs}

        def read_rows(run_id: str) -> np.ndarray:
            with open_output(session.workdir, wire.rows_file(run_id), arm) as fh:
                rows: np.ndarray = load_npy(fh, arm, "prediction file")
            return rows

        def on_event(event: dict[str, Any]) -> None:
            run_id = event.get("run_id")
            if event.get("event") != "run" or not isinstance(run_id, str) or run_id not in expected:
                raise BenchError(
                    ErrorCode.SANDBOX_VIOLATION,
                    f"The {arm} process reported a run it was not asked to train now ({str(run_id)[:40]!r}).",
                    "Do not write to the protocol pipe: the bench reports runs itself.",
                )
            expected.discard(run_id)
            with open_output(session.workdir, wire.prediction_file(run_id), arm) as fh:
                pred = load_npy(fh, arm, "prediction file")
            diverged, seconds, n_params = event_numbers(event, arm)
            on_run(Trained(
                run_id=run_id, predictions=pred, diverged=diverged, seconds=seconds, n_params=n_params,
                path=str(event.get("path", "sequential")), read_rows=lambda: read_rows(run_id),
                read_state=lambda shapes: read_kept(session, run_id, shapes),
            ))

        session.request(wire.Train(runs=runs, path=path), on_event)
        if expected:
            raise BenchError(
                ErrorCode.CRASHED,
                f"The {arm} process ended a training command without results for {len(expected)} run(s).",
            )

    def trusted_capture(self, key: str) -> bool:
        """Capture child ``key`` (an arm, or a confirmation's ``rebuild_<arm>``) ran the bench's
        own code alone: a built-in track's own baseline's. The idea's ``measure()`` never runs
        there (``measure`` starts a fresh child): a red team's, run there, wrapped the child's
        build to sabotage every seed the first capture had not built, and forged helps."""
        return key == "baseline" and self.canonical_baseline

    def forget_builds(self) -> None:
        trainers = [id(session) for session in self.sessions.values()]
        for key, session in self.children(captures_only=True):  # every child submitted code ran in
            if not self.trusted_capture(key) and id(session) not in trainers:
                session.close()

    def rebuild(self, arm: str, *, hparams: dict[str, Any], build_seeds: list[int], within: tuple[float, str],
                captured: ArmCapture, config: int, decoys: list[int | None], numbers: list[int | None],
                max_elements: int) -> None:
        """The child exports nothing (``wire.Rebuild``): the graph and its constants are the first
        capture's. In a fresh capture child, unless ``arm`` is a built-in track's own baseline in a child
        no submitted code ran in (it builds again there: one child start fewer). The child's
        error reaches nobody: it knows the confirmation's seeds (not even its code: a file
        chooses it)."""
        fresh = not self.trusted_capture(arm)
        if fresh:
            self.rebuilds[arm] = self.rebuilds.get(arm, 0) + 1  # a directory of its own: nothing left by the last
            # fresh, not forked: a child that must know nothing of the job's earlier children
            # shares no namespace with them (the pid counter of a shared one is a channel)
            session = self.capture_session(arm, self.workdir / f"rebuild_{arm}_{self.rebuilds[arm]}", fresh=True)
            with self._children:  # killed with the others if the other arm fails
                self.captures[f"rebuild_{arm}"] = session
        else:
            session = self.captures[arm]
        try:
            if fresh:
                session.wait_ready()
                session.request(self.loads[arm])
            try:
                session.request(wire.Rebuild(hparams=hparams, init_seeds=build_seeds,
                                             targets=[t for _, t in captured_targets(captured, config)]), within=within)
            except BenchError as exc:
                if exc.code in (ErrorCode.CANCELLED, ErrorCode.NO_SPACE, ErrorCode.SANDBOX_UNAVAILABLE):
                    raise
                raise not_capturable(f"the {arm} failed when it was built again for the confirmation",
                                     REBUILD_HINT) from None
            new = import_rebuilt(session, captured, config, decoys, max_elements)
        finally:
            if fresh:
                session.close()
        for k, arrays in new.items():
            number = numbers[k]
            assert number is not None and decoys[k] is None, "a decoy is checked, never written"
            for j, array in enumerate(arrays):
                np.save(captured.directory / tensor_path(config, number, j), array, allow_pickle=False)

    def more_inits(self, arm: str, init_seeds: list[int]) -> None:
        self.sessions[arm].request(wire.MoreInits(init_seeds=init_seeds))

    def measure(self, arm: str, runs: list[MeasureRun], measure_code: str | None) -> list[float]:
        """``measure_code`` (the idea's) on ``arm``'s models, in its capture child; the own
        baseline's child trains and a stored build has none, so those are measured in a fresh
        child, closed after, that knows no seed of the job (``measured_fresh``)."""
        fresh = self.measured_fresh(arm)
        builds = None
        if fresh:
            session = self._measure_child(arm)
            captured, command = self.captured[arm], self.captured_with[arm]
            # Not the job's build seeds: the own baseline builds with the epoch's shared init
            # seeds, which the idea's code there could read and write into its error's text
            # (red team); every tensor of a build is replaced by the trained one anyway.
            builds = wire.Builds(configs=command.configs, init_seeds=[0] * len(command.init_seeds),
                                 targets=[[t for _, t in captured_targets(captured, c)]
                                          for c in range(len(command.configs))])
        else:
            session = self.captures[arm]
        try:
            if fresh:
                session.wait_ready()
                session.request(self.loads[arm])
            commands = []
            for run in runs:
                names = hand_over_for_measure(session, run.run_id, run.state, run.probe)
                commands.append({"config": run.config, "seed_index": run.seed_index, **names})
            values: list[float] = session.request(
                wire.Measure(runs=commands, measure_code=measure_code, builds=builds)).values
        finally:
            if fresh:
                session.close()
        return values

    def probe(self, arm: str, command: wire.Probe) -> list[float]:
        return list(self.sessions[arm].request(command).values)

    def isolation(self) -> list[str]:
        """The layers every child of the job ran under: the capture children, where submitted
        code runs, as well as the trainers (a review found only the trainers' counted)."""
        children = [session for _, session in self.children()]
        return [layer for layer in children[0].layers if all(layer in c.layers for c in children[1:])]

    def children(self, captures_only: bool = False) -> list[tuple[str, ArmSession]]:
        """Every child started so far, each once (a copy: safe while another thread starts one);
        the own baseline's child is listed as a capture child."""
        with self._children:
            listed = [*self.captures.items(), *([] if captures_only else self.sessions.items())]
        unique: dict[int, tuple[str, ArmSession]] = {}
        for key, session in listed:
            unique.setdefault(id(session), (key, session))
        return list(unique.values())

    def cancel(self) -> None:
        for _, session in self.children():
            if session.proc.poll() is None:
                session._kill(ErrorCode.CANCELLED)

    def close(self) -> None:
        """Close every child at once, then the fork server the job started (a lent one, the
        worker's, serves the next job)."""
        sessions = [session for _, session in self.children()]
        if sessions:
            with ThreadPoolExecutor(max_workers=len(sessions)) as pool:
                list(pool.map(lambda session: session.close(), sessions))
        if self.server is not None and self.slot is None:
            self.server.close()
        self.server = None
