"""Warm children: the next job's sandboxed children, started before the job arrives.

A worker judges jobs one after another. Starting an arm's child costs a Python
start and a torch import (2-3 s), and the first ``torch.func`` gradient of some
models (a GRU) imports ``torch._dynamo`` (seconds more). ``prepare(limits)``
starts both arms' children for the next job in the background, in a fresh job
directory, and sends each a ``warm`` command; ``take(limits)`` hands them to the
next ``judge``. The launches run in one long-lived background thread, so a job
returns without waiting for them. Nothing of one job reaches the next: every job gets new
children, new cgroups and a new directory (the fork server they are forked from runs no job's
code); only start-up work is done early.
An unused slot is killed when the process exits.

Where the host runs fork servers (``sandbox.forkserver.available``), the worker keeps one fork
server for all its jobs, one after another (``_worker_server``: it imports torch and warms the
exporter once per worker, not once per job: docs/performance.md, "Session 30"), and a
slot's children are forked from it: about 0.3 CPU-s each against 1.4-2.2 for a child of its own.
The server never runs submitted code and never reads a job's data; each job's directory lies
under the server's (its view), and each child it forks restricts itself with Landlock to its own
directory, in a cgroup of its own, killed at its job's end (docs/security.md, "Children
forked from one sandbox"). The job borrows the server: it forks there any child it needs beyond the slot's and
leaves the server running at its end; a confirmation's rebuild children still start fresh. A
server that died, or one made under other limits, another sandbox policy or another temporary
directory, is replaced at the next slot.

A job that finds no warm slot (none prepared, or a host that keeps none: a worker with warm
children off, a check, ``ideabench run``, the tests) borrows the server all the same (``lend``: a
slot of no children) and forks every child there. One job at a time: while a job forks from the
server (``take``, ``lend``, until ``give_back``), no other job does and no warm child is forked
there, and a job is lent no server whose prepared slot's children (the next job's) live there, so
no job's children ever live beside another live job's. A process forked from this one (a Celery
prefork pool's) forgets this process's server and slot (``_forget``) and makes its own.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import tempfile
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
    after a hard kill, by the next worker's ``bench.tempdirs.sweep``. ``parent``: the worker's
    fork server's directory, where its jobs' directories lie (the system's temporary one else)."""

    def __init__(self, parent: str | None = None) -> None:
        super().__init__("job", parent)


@dataclass
class Slot:
    """A job directory with one started (and warming) child per arm."""

    tmp: JobDir
    limits: sandbox.Limits
    launched: dict[str, tuple[sandbox.ChildProcess, int]]
    policy: sandbox.SandboxPolicy  # the sandbox's policy its children were launched under
    server: sandbox.ForkServer | None = None  # the worker's fork server the children came from (lent)

    @property
    def alive(self) -> bool:
        if self.server is not None and not self.server.alive:
            return False
        return all(proc.poll() is None for proc, _ in self.launched.values())

    def release(self, adopted: set[str]) -> None:
        """Kill the children no session adopted (their sessions close the others). The fork server
        is the worker's: it serves the next slot."""
        for name in [n for n in self.launched if n not in adopted]:
            self.drop(name)
        self.launched = {}

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
        """Kill the children and remove the directory."""
        self.release(set())
        self.tmp.cleanup()


_slot: Slot | None = None
_lock = threading.Lock()
# The worker's fork server, its directory and what it was made for (limits, the sandbox's policy);
# the launcher thread starts and replaces it (its children die with the thread that started
# them), ``discard`` closes it at exit.
_server: sandbox.ForkServer | None = None
_server_dir: OwnedDir | None = None
# (limits, policy, the temporary directory its own lies in: a host, or a test, that moves the jobs'
# directories elsewhere gets a server whose view holds them)
_server_for: tuple[sandbox.Limits, sandbox.SandboxPolicy, str] | None = None
_server_lock = threading.Lock()
# the slot (taken or lent) of the job that forks from the worker's server now, until ``give_back``:
# never two jobs at once, so a job's children have no live sibling of another job's
# (docs/security.md); under ``_server_lock``
_serving: Slot | None = None


@dataclass
class _Request:
    """For the launcher thread: a slot for the next job (``prepare``), or for a job starting now
    without warm children, a slot of none (``lend``: ``lent`` holds the answer)."""

    limits: sandbox.Limits
    done: threading.Event
    lent: list[Slot | None] | None = None


_requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
_in_flight: threading.Event | None = None
_launcher: threading.Thread | None = None


def _worker_server(limits: sandbox.Limits) -> sandbox.ForkServer | None:
    """The worker's fork server for ``limits`` under the sandbox's policy now: the running one, or
    one started in a directory of its own (the built-in track packages visible in it, for a job
    that builds a track's own baseline; Landlock hides them from every other child). None where
    the host runs none (every child then starts in a sandbox of its own), and while a job forks
    from it (``take``, ``lend``: a check beside a worker's job gets none, so its children never
    live beside the job's, and a server is never replaced under a job). The caller holds
    ``_server_lock``."""
    global _server, _server_dir, _server_for
    if _serving is not None:
        return None  # a job forks from it now: no other's children beside its, and never closed under it
    wanted = (limits, sandbox.policy(), tempfile.gettempdir())
    if _server is not None and _server.alive and _server_for == wanted:
        return _server
    _close_server()
    directory = OwnedDir("forks")
    server = sandbox.ForkServer.start(Path(directory.name), limits, tracks=True)
    if server is None:
        directory.cleanup()
        return None
    _server, _server_dir, _server_for = server, directory, wanted
    return server


def current_server() -> sandbox.ForkServer | None:
    """The worker's fork server now, if one runs (what a test of leftovers leaves out)."""
    return _server


def _close_server() -> None:
    """Close the worker's fork server (its children with it) and remove its directory."""
    global _server, _server_dir, _server_for, _serving
    server, directory, _server, _server_dir, _server_for = _server, _server_dir, None, None, None
    _serving = None  # (closed while no job forks from it, dead, or at exit)
    if server is not None:
        server.close()
    if directory is not None:
        directory.cleanup()


def _start_slot(limits: sandbox.Limits) -> Slot:
    # under the server's lock: ``discard`` at exit waits for the forks instead of removing the
    # directory they are made in (a review: the fallback then made a job directory no sweep owns)
    with _server_lock:
        server = _worker_server(limits)
        slot = Slot(JobDir(str(server.workdir) if server is not None else None), limits, {}, sandbox.policy(), server)
        try:
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


def _lend_slot(limits: sandbox.Limits) -> Slot | None:
    """A slot of no children whose directory lies under the worker's fork server's (``lend``);
    None while a prepared slot's children come from that server: they are the next job's, and
    would live beside this one's (red team, session 37)."""
    global _serving
    with _server_lock:
        with _lock:
            prepared = _slot.server if _slot is not None and _slot.alive else None
        server = _worker_server(limits)
        if server is None or server is prepared:
            return None
        slot = Slot(JobDir(str(server.workdir)), limits, {}, sandbox.policy(), server)  # (may raise: nothing held)
        _serving = slot
        return slot


def _launch_loop() -> None:
    """The launcher thread: it lives as long as the process, because the sandbox ties a
    child's life to the thread that started it (bwrap --die-with-parent, PR_SET_PDEATHSIG);
    so does the worker's fork server, started here for ``prepare`` and ``lend`` alike."""
    global _slot
    while True:
        request = _requests.get()
        if request.lent is not None:
            try:
                request.lent.append(_lend_slot(request.limits))
            except Exception:  # noqa: BLE001 - the job starts its own server instead
                log.warning("could not start the worker's fork server", exc_info=True)
                request.lent.append(None)
            request.done.set()
            continue
        try:
            slot = _start_slot(request.limits)
        except Exception:  # noqa: BLE001 - the next job starts its own children instead
            log.warning("could not start warm children", exc_info=True)
            slot = None
        with _lock:
            previous, _slot = _slot, slot
        if previous is not None:
            previous.discard()
        request.done.set()


def _ensure_launcher() -> None:
    """The launcher thread, started once (the caller holds ``_lock``)."""
    global _launcher
    if _launcher is None or not _launcher.is_alive():
        _launcher = threading.Thread(target=_launch_loop, name="ideabench-warm", daemon=True)
        _launcher.start()


def lend(limits: sandbox.Limits) -> Slot | None:
    """For a job that starts without warm children (none prepared, or the host keeps none): a slot
    of no children, its directory under the worker's fork server's, so that the job forks its
    children there, as a warm slot's job forks those it starts, instead of starting a server of its
    own (``import torch`` and the exporter's warm-up, 2-4 CPU-s, once per process rather than once
    per job). The server outlives the job and serves the next; ``give_back`` when the job ends.
    None where the host runs no fork server, or while another job forks from the worker's (a
    check beside a worker's job: the job then starts a server of its own, as without one)."""
    if not sandbox.policy().fork_server:
        return None
    request = _Request(limits, threading.Event(), [])
    with _lock:
        if (_slot is not None and _slot.alive) or (_in_flight is not None and not _in_flight.is_set()):
            return None  # the next job's warm children are (being) forked there: at once, not after them
        _ensure_launcher()
        _requests.put(request)
    request.done.wait()
    assert request.lent is not None
    return request.lent[0]


def give_back(slot: Slot) -> None:
    """``slot``'s job (``take``, ``lend``) has ended: its children are closed, its directory
    removed, and the next job may fork from the worker's server."""
    global _serving
    with _server_lock:
        if slot.server is None or slot is not _serving:
            return  # (a slot of no server, or one given back already: not another job's to release)
        _serving = None
        left = slot.server.alive_under(Path(slot.tmp.name))
        if left and slot.server is _server:
            # a child the job's close did not end (none should): its server goes, and its PID
            # namespace with everything in it, before another job forks beside it
            log.warning("fork server closed: children %s of a job outlived it", left)
            _close_server()


def prepare(limits: sandbox.Limits) -> None:
    """Start the next job's children in the background; they import torch and warm up."""
    global _in_flight
    with _lock:
        if _in_flight is not None and not _in_flight.is_set():
            return
        if _slot is not None and _slot.alive and _slot.limits == limits and _slot.policy == sandbox.policy():
            return
        _ensure_launcher()
        _in_flight = threading.Event()
        _requests.put(_Request(limits, _in_flight))


def peek() -> Slot | None:
    """The prepared slot, once a launch in flight has ended, left in place (for a test to see)."""
    in_flight = _in_flight
    if in_flight is not None:
        in_flight.wait()
    with _lock:
        return _slot


def take(limits: sandbox.Limits) -> Slot | None:
    """The prepared slot (waiting for a launch in flight), if alive with ``limits`` and launched
    under the sandbox's policy now, and its server (the worker's) serves no other job now (a
    check beside it, ``lend``); else None. ``give_back`` when the job ends."""
    global _slot, _serving
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
    if slot.server is not None:
        with _server_lock:
            taken = _serving is None
            if taken:
                _serving = slot
        if not taken:  # kept for the job after that one
            with _lock:
                kept = _slot is None
                if kept:
                    _slot = slot
            if not kept:
                slot.discard()
            return None
    return slot


def discard() -> None:
    """Kill an unused slot and the worker's fork server (at exit, or to free their memory)."""
    global _slot
    in_flight = _in_flight
    if in_flight is not None:
        in_flight.wait(timeout=30)
    with _lock:
        slot, _slot = _slot, None
    if slot is not None:
        slot.discard()
    with _server_lock:
        _close_server()


def _forget() -> None:
    """In a process forked from this one (a Celery prefork pool's): forget, without closing, the
    parent's server, slot and launcher. Its ``Popen`` is not this process's child (``poll`` read
    ECHILD as an exit), so the first job here closed the parent's server under a check it was
    serving (red team, session 37); this process makes its own."""
    global _slot, _server, _server_dir, _server_for, _serving, _in_flight, _launcher, _lock, _server_lock, _requests
    _slot = _server = _server_dir = _server_for = _serving = _in_flight = _launcher = None
    _requests = queue.SimpleQueue()  # the parent's requests are its launcher's
    _lock, _server_lock = threading.Lock(), threading.Lock()  # (held by another thread at the fork, perhaps)


atexit.register(discard)
os.register_at_fork(after_in_child=_forget)
