"""Warm children: the next job's sandboxed children, started before the job arrives.

A worker judges jobs one after another. Starting an arm's child costs a Python
start and a torch import (2-3 s), and the first ``torch.func`` gradient of some
models (a GRU) imports ``torch._dynamo`` (seconds more). ``prepare(limits)``
starts both arms' children for the next job in the background, in a fresh job
directory, and sends each a ``warm`` command; ``take(limits)`` hands them to the
next ``judge``. The launches run in one long-lived background thread, so a job
returns without waiting for them. Nothing of one job reaches the next: every job gets new
processes, new cgroups and a new directory; only start-up work is done early.
An unused slot is killed when the process exits.

Where the host runs fork servers (``sandbox.forkserver.available``), a slot also holds the next
job's fork server (the track packages visible, for a job that builds a track's own baseline;
Landlock hides them from every other child), and its children are forked from it: about 0.3
CPU-s each against 1.4-2.2 for a child of its own. The job adopts the server with the children
and closes it at its end; a child it needs beyond them (a confirmation's rebuild starts fresh)
is forked when needed.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import sandbox, wire
from bench.tempdirs import OwnedDir

log = logging.getLogger("ideabench.warm")
ARMS = ("baseline", "idea")
WARM_COMMAND = wire.Warm().encode()
# A capture child also pays torch.export's first-use work (imports, tracing machinery).
WARM_CAPTURE_COMMAND = wire.Warm(export=True).encode()
# The children of a slot, by working-directory name: the idea's trainer and capture child (no
# data directory); the baseline's child, which sees the built-in track packages: it captures
# and trains a built-in track's own baseline (``wire_names.OWN_BASELINE``) and is dropped
# for any other baseline, whose capture child and trainer start with the job; and the fresh
# child (no data, the track packages) the idea's own ``measure()`` of that baseline runs in
# (bench.execution's ``_measure_child``), killed unused by a job that measures nothing itself.
# Kept warm whatever the next idea is: started cold, it cost a self-measured idea 0.6 s of a
# 1.5 s warm tabular job (benchmarks/protocol_speed.py), so the warm path keeps four children.
CHILDREN: dict[str, dict[str, Any]] = {
    "baseline": {"hide_tracks": False},
    "idea": {},
    "capture_idea": {"read_only": []},
    "measure_baseline_1": {"read_only": [], "hide_tracks": False},
}
EXPORTS = ("baseline", "capture_idea")  # the children that may capture: warmed with an export


class JobDir(OwnedDir):
    """A job's temporary directory, removed when its ``with`` block ends or the slot is
    discarded (not by a finalizer at interpreter exit, which would race the launcher);
    after a hard kill, by the next worker's ``bench.tempdirs.sweep``."""

    def __init__(self) -> None:
        super().__init__("job")


@dataclass
class Slot:
    """A job directory with one started (and warming) child per arm."""

    tmp: JobDir
    limits: sandbox.Limits
    launched: dict[str, tuple[sandbox.ChildProcess, int]]
    policy: sandbox.SandboxPolicy  # the sandbox's policy its children were launched under
    server: sandbox.ForkServer | None = None  # the next job's fork server, instead of children

    @property
    def alive(self) -> bool:
        if self.server is not None and not self.server.alive:
            return False
        return all(proc.poll() is None for proc, _ in self.launched.values())

    def adopt_server(self) -> sandbox.ForkServer | None:
        """The slot's fork server, handed to the job (which closes it); None if it has none."""
        server, self.server = self.server, None
        return server

    def release(self, adopted: set[str]) -> None:
        """Kill the children no session adopted (their sessions close the others), and the fork
        server if no job adopted it (a job that failed before its children started)."""
        for name in [n for n in self.launched if n not in adopted]:
            self.drop(name)
        self.launched = {}
        server = self.adopt_server()
        if server is not None:
            server.close()

    def drop(self, name: str) -> None:
        """Kill child ``name`` now (the job starts a fresh one in its place)."""
        launched = self.launched.pop(name, None)
        if launched is not None:
            sandbox.kill(launched[0])
            try:
                os.close(launched[1])
            except OSError:
                pass

    def discard(self) -> None:
        """Kill the children (or the fork server) and remove the directory."""
        self.release(set())
        self.tmp.cleanup()


_slot: Slot | None = None
_lock = threading.Lock()
_requests: queue.SimpleQueue[tuple[sandbox.Limits, threading.Event]] = queue.SimpleQueue()
_in_flight: threading.Event | None = None
_launcher: threading.Thread | None = None


def _start_slot(limits: sandbox.Limits) -> Slot:
    slot = Slot(JobDir(), limits, {}, sandbox.policy())
    try:
        slot.server = sandbox.ForkServer.start(Path(slot.tmp.name), limits, tracks=True)
        for name, options in CHILDREN.items():
            proc, fd = sandbox.launch(Path(slot.tmp.name) / name, limits, server=slot.server, **options)
            slot.launched[name] = (proc, fd)
            assert proc.stdin is not None
            proc.stdin.write(WARM_CAPTURE_COMMAND if name in EXPORTS else WARM_COMMAND)
            proc.stdin.flush()
    except BaseException:
        slot.discard()
        raise
    return slot


def _launch_loop() -> None:
    """The launcher thread: it lives as long as the process, because the sandbox ties a
    child's life to the thread that started it (bwrap --die-with-parent, PR_SET_PDEATHSIG)."""
    global _slot
    while True:
        limits, done = _requests.get()
        try:
            slot = _start_slot(limits)
        except Exception:  # noqa: BLE001 - the next job starts its own children instead
            log.warning("could not start warm children", exc_info=True)
            slot = None
        with _lock:
            previous, _slot = _slot, slot
        if previous is not None:
            previous.discard()
        done.set()


def prepare(limits: sandbox.Limits) -> None:
    """Start the next job's children in the background; they import torch and warm up."""
    global _in_flight, _launcher
    with _lock:
        if _in_flight is not None and not _in_flight.is_set():
            return
        if _slot is not None and _slot.alive and _slot.limits == limits and _slot.policy == sandbox.policy():
            return
        if _launcher is None or not _launcher.is_alive():
            _launcher = threading.Thread(target=_launch_loop, name="ideabench-warm", daemon=True)
            _launcher.start()
        _in_flight = threading.Event()
        _requests.put((limits, _in_flight))


def take(limits: sandbox.Limits) -> Slot | None:
    """The prepared slot (waiting for a launch in flight), if alive with ``limits`` and launched
    under the sandbox's policy now; else None."""
    global _slot
    in_flight = _in_flight
    if in_flight is not None:
        in_flight.wait()
    with _lock:
        slot, _slot = _slot, None
    if slot is None:
        return None
    if slot.limits != limits or slot.policy != sandbox.policy() or not slot.alive:
        slot.discard()
        return None
    return slot


def discard() -> None:
    """Kill an unused slot (at exit, or to free its memory)."""
    global _slot
    in_flight = _in_flight
    if in_flight is not None:
        in_flight.wait(timeout=30)
    with _lock:
        slot, _slot = _slot, None
    if slot is not None:
        slot.discard()


atexit.register(discard)
