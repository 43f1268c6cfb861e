"""A fork server: one sandbox that imports torch once, and forks a job's children (a process's
serves its jobs one after another, ``bench.warm``; a job that starts while another forks there
starts its own).

A fresh sandboxed child costs a Python start, ``import torch`` and, for a capture child,
torch.export's first-use work: 1.4-2.2 CPU-s each, three to six per job, and about three
quarters of the test suite's CPU (docs/performance.md, sessions 20 and 23). A ``ForkServer``
is launched like any child (``launcher.launch``'s bubblewrap view, the bootstrap's no_new_privs
and seccomp, an empty environment, a cgroup, rlimits), with the union of its jobs' views: the
directory the jobs' directories lie in writable, the built-in track packages visible only when a
job's own baseline needs them. Its process (``bench.sandbox.zygote``) imports the child's program and warms it
once, then forks each child on request. Each forked child, before it runs anything:

- restricts itself with Landlock (``bench.sandbox.landlock``), deny by default, to the view a
  fresh child would have had: read Python, the code and system directories and its
  ``read_only`` list; write only its working directory; signals and abstract sockets scoped
  to itself; no ptrace outside its domain;
- sets its own rlimits, starts its own session, dies with the server;
- is moved by the parent into a cgroup of its own (memory, pids, kill) before the parent
  sends its first command, so submitted code never runs outside it.

Fail closed, and fall back: a server is made only where Landlock has the scopes (ABI >= 6),
bubblewrap and every cgroup layer are present and no GPU is to be handed to children (device
nodes stay the fresh launch's job); a child whose view the server cannot give (a directory
outside the server's view, track packages it hides or cannot hide) or that the server fails
to fork is started fresh by the launcher, as without a server. ``launch(..., server=...)``
is the one entry point; callers keep the same handle (``ChildProcess``).

Written here, not taken from a library: the sandbox's fork servers in the Python ecosystem
(multiprocessing's ``forkserver``, Celery's prefork) share one view among all children and
pass pickles; this one must hand each child its own Landlock view and its cgroup before any
command, and must speak no pickle with code it does not trust.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

from bench.sandbox import landlock
from bench.sandbox.bwrap import bwrap_path, code_dirs, hidden_dirs, python_dirs
from bench.sandbox.cgroups import Cgroup
from bench.sandbox.limits import Limits, rlimits
from bench.sandbox.policy import policy

log = logging.getLogger("bench.sandbox")
ZYGOTE_ENTRY = "bench.sandbox.zygote"
READY_TIMEOUT_S = 120.0  # the server's prepare(): imports and an export, seconds on a loaded host
FORK_TIMEOUT_S = 30.0
SYSTEM_READ = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/ld.so.cache", "/etc/ld.so.conf",
    "/etc/ld.so.conf.d", "/etc/localtime", "/dev", "/sys/devices/system/cpu",
    # of /proc only the child's own entry (opened by the child: its pid) and the machine's
    # figures: another process's /proc/<pid>/stat told a later job of a worker's server the CPU
    # every earlier job's children had used (the server's reaped-children time; red team, session 30)
    "/proc/self", "/proc/thread-self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys",
)


class ForkedProcess:
    """A forked child, with the part of ``subprocess.Popen``'s interface the engine uses
    (``pid``, ``stdin``, ``returncode``, ``poll``, ``wait``, ``kill``). ``pid`` is the child's
    pid on the host; its exit status comes from the server, which reaps it."""

    def __init__(self, server: ForkServer, pid: int, ns_pid: int, stdin_fd: int, workdir: Path) -> None:
        self.server = server
        self.pid = pid
        self.ns_pid = ns_pid
        self.workdir = workdir
        self.stdin = os.fdopen(stdin_fd, "wb")
        self.returncode: int | None = None
        self.sandbox_state: object = None  # the launcher's record of it (launcher._state_of)
        self._done = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        """SIGKILL its process group, through the server (which alone knows whether the pid is
        still this child's: it has not reaped it)."""
        if self.returncode is None:
            self.server.kill_child(self.ns_pid)

    def exited(self, returncode: int) -> None:
        if self.returncode is None:
            self.returncode = returncode
        self._done.set()


def available() -> str | None:
    """Why no fork server runs on this host (None: one can)."""
    if not policy().fork_server:
        return "turned off (IDEABENCH_FORK_SERVER=0)"
    if bwrap_path() is None:
        return "no bubblewrap"
    if landlock.abi() < landlock.MIN_ABI:
        return f"Landlock ABI {landlock.abi()} (scopes need {landlock.MIN_ABI})"
    if any(Path("/dev").glob("nvidia*")):
        return "GPU device nodes (handed to fresh children only)"
    return None


def _within(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


class ForkServer:
    """A fork server (see the module's docstring). ``start`` launches it and returns at
    once: its imports overlap the caller's work, and the first ``fork`` waits for them."""

    def __init__(self, workdir: Path, limits: Limits, tracks: bool) -> None:
        self.workdir = workdir.resolve()
        self.limits = limits
        self.tracks = tracks
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.layers: list[str] = []
        self.failed: str | None = None
        self._ready = threading.Event()
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._lock = threading.Lock()  # the children's maps
        self._fork_lock = threading.Lock()  # one request in flight
        self._children: dict[int, tuple[ForkedProcess, Cgroup]] = {}
        self._early_exits: dict[int, int] = {}
        self._retired: list[tuple[ForkedProcess, Cgroup]] = []  # children whose pid number was reused
        self._reader: threading.Thread | None = None
        self.forks = 0
        # the directories a child's view is made of (bwrap's), resolved once per server
        self._python_dirs = [p.resolve() for p in python_dirs()]
        self._code_dirs = [p.resolve() for p in code_dirs()]
        fresh_hidden = hidden_dirs(tracks=False)
        self._track_dirs = [d.resolve() for d in hidden_dirs(tracks=True) if d not in fresh_hidden]

    @classmethod
    def start(cls, workdir: Path, limits: Limits, *, tracks: bool) -> ForkServer | None:
        """Launch a server whose children's directories lie under ``workdir`` (a job's directory,
        or the one a worker's jobs' directories lie in); ``tracks``: the built-in track packages visible in it (a job that builds
        a track's own baseline). None where the host cannot run one (``available``) or the
        launch failed (then every child starts fresh, as without a server)."""
        why = available()
        if why is not None:
            log.info("sandbox: no fork server (%s)", why)
            return None
        from bench.sandbox import launcher

        server = cls(workdir, limits, tracks)
        try:
            proc, fd = launcher.launch_server(server.workdir, limits, hide_tracks=not tracks, entry=ZYGOTE_ENTRY)
        except Exception as exc:  # noqa: BLE001 - children start fresh; the launch said why
            log.warning("sandbox: fork server not started: %s", exc)
            return None
        server.proc, server.sock = proc, socket.socket(fileno=fd)
        server.layers = launcher.layers_of(proc)
        if not {"namespaces", "no_network", "cgroup_memory", "cgroup_pids", "cgroup_kill"} <= set(server.layers):
            # a bubblewrap that failed to start (a development host allowing weak sandboxes), or no
            # cgroups to move children into: its children would share more than a job's view
            log.info("sandbox: no fork server (its sandbox lacks namespaces or cgroups)")
            server.close()
            return None
        server._reader = threading.Thread(target=server._read, name="fork-server", daemon=True)
        server._reader.start()
        return server

    @property
    def alive(self) -> bool:
        """Its process runs and it has not failed (a slot's server, before a job adopts it)."""
        return self.failed is None and self.proc is not None and self.proc.poll() is None

    # -- the server's messages ------------------------------------------------------
    def _read(self) -> None:
        sock = self.sock
        assert sock is not None
        while True:
            try:
                data = sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            try:
                message = json.loads(data)
            except ValueError:
                message = {"error": "unreadable message"}
            if "exited" in message:
                self._exited(int(message["exited"]), int(message["returncode"]))
            elif not self._ready.is_set():
                if "error" in message or message.get("landlock_abi", 0) < landlock.MIN_ABI:
                    self.failed = str(message.get("error") or f"Landlock ABI {message.get('landlock_abi')}")
                    log.warning("sandbox: fork server not ready: %s", self.failed)
                self._ready.set()
            else:
                self._replies.put(message)
        # the server is gone, and its PID namespace with it: so are its children
        self.failed = self.failed or "the fork server exited"
        self._ready.set()
        self._replies.put({"error": self.failed})
        with self._lock:
            children = list(self._children.items())
        for ns_pid, (_, group) in children:
            group.kill_all()
            self._exited(ns_pid, -9)

    def _exited(self, ns_pid: int, returncode: int) -> None:
        with self._lock:
            child = self._children.get(ns_pid)
            if child is None:
                self._early_exits[ns_pid] = returncode
                return
        child[0].exited(returncode)

    # -- forking ---------------------------------------------------------------------
    def serves(self, workdir: Path, read_only: list[Path], hide_tracks: bool) -> bool:
        """Whether this server can give a child this view: its directory and its read-only
        ones inside the job's, the track packages hidden as asked."""
        if self.failed is not None or not _within(workdir.resolve(), [self.workdir]):
            return False
        if not all(_within(p.resolve(), [self.workdir]) for p in read_only):
            return False
        if hide_tracks and self.tracks:
            # Landlock hides what no granted directory holds: the track packages must lie
            # outside every directory the child may read
            if any(_within(t, self._read_dirs(read_only, hide_tracks)) for t in self._track_dirs):
                return False
        return hide_tracks or self.tracks

    def _read_dirs(self, read_only: list[Path], hide_tracks: bool) -> list[Path]:
        code = [d for d in self._code_dirs if not (hide_tracks and d in self._track_dirs)]
        return [*self._python_dirs, *code, *(p.resolve() for p in read_only)] + [Path(p) for p in SYSTEM_READ]

    def fork(self, workdir: Path, limits: Limits, read_only: list[Path], hide_tracks: bool,
             boot_log: Path) -> tuple[ForkedProcess, int, Cgroup] | None:
        """A forked child in ``workdir`` (its working directory, the only one it may write),
        in its own cgroup, or None (start it fresh) where the server cannot give it."""
        if not self.serves(workdir, read_only, hide_tracks):
            return None
        if not self._ready.wait(READY_TIMEOUT_S) or self.failed is not None:
            return None
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        group = Cgroup.create(limits)
        if not {"cgroup_memory", "cgroup_pids", "cgroup_kill"} <= set(group.layers()):
            group.remove()
            return None
        stdin_r, stdin_w = os.pipe()
        proto_r, proto_w = os.pipe()
        log_fd = os.open(boot_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        spec = {
            "workdir": str(workdir),
            "read": [str(p) for p in self._read_dirs(read_only, hide_tracks)],
            "rlimits": rlimits(limits),
        }
        try:
            with self._fork_lock:
                assert self.sock is not None
                nonce = uuid.uuid4().hex
                try:
                    socket.send_fds(self.sock, [json.dumps({"fork": spec, "nonce": nonce}).encode()],
                                    [stdin_r, proto_w, log_fd])
                    reply = self._replies.get(timeout=FORK_TIMEOUT_S)
                except (OSError, queue.Empty) as exc:
                    reply = {"error": f"no answer: {exc!r}"}
                if reply.get("nonce") != nonce:
                    # a late answer would be read as the next fork's: the server serves no more
                    self.failed = f"the fork server answered out of turn ({reply.get('error') or 'another request'})"
                    self._ready.set()
        finally:
            for fd in (stdin_r, proto_w, log_fd):
                os.close(fd)
        ns_pid = reply.get("forked")
        host_pid = self._host_pid(ns_pid) if isinstance(ns_pid, int) else None
        moved = host_pid is not None and self._move(host_pid, group)
        if not moved:
            log.warning("sandbox: the fork server could not start a child: %s", reply.get("error") or "not moved")
            if isinstance(ns_pid, int):
                self.kill_child(ns_pid)
            os.close(stdin_w)
            os.close(proto_r)
            group.kill_all()
            group.remove()
            return None
        assert isinstance(ns_pid, int) and host_pid is not None
        child = ForkedProcess(self, host_pid, ns_pid, stdin_w, workdir)
        with self._lock:
            # forget the children that ended (a worker's server forks job after job): their
            # sessions removed their cgroups, and no exit of theirs is still to come
            self._children = {n: c for n, c in self._children.items() if c[0].returncode is None}
            self._retired = [c for c in self._retired if c[0].returncode is None]
            if ns_pid in self._children:  # a number the server reused: that child was reaped
                self._retired.append(self._children[ns_pid])
            self._children[ns_pid] = (child, group)
            early = self._early_exits.pop(ns_pid, None)
            self._early_exits.clear()  # one fork in flight: any other is stale
        if early is not None:
            child.exited(early)
        self.forks += 1
        return child, proto_r, group

    def _host_pid(self, ns_pid: int) -> int | None:
        """The host pid of the server's child ``ns_pid``: the process in the server's cgroup whose
        innermost pid (``NSpid``) it is."""
        assert self.proc is not None
        from bench.sandbox import launcher

        group = launcher.cgroup_of(self.proc)
        for pid in sorted(group.pids_in()) if group is not None else []:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("NSpid:") and line.split()[-1] == str(ns_pid) and len(line.split()) > 2:
                    return pid
        return None

    @staticmethod
    def _move(pid: int, group: Cgroup) -> bool:
        for path in group.procs_files():
            try:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, str(pid).encode())
                finally:
                    os.close(fd)
            except OSError:
                return False
        return pid in group.pids_in()

    def alive_under(self, directory: Path) -> list[int]:
        """The host pids of this server's children still running (as far as the server said) whose
        working directory lies in ``directory``: a job's, once its children were closed, none."""
        directory = directory.resolve()
        with self._lock:
            children = [child for child, _ in [*self._children.values(), *self._retired]]
        return [child.pid for child in children if child.returncode is None and _within(child.workdir, [directory])]

    def kill_child(self, ns_pid: int) -> None:
        """Ask the server to SIGKILL the process group of its child ``ns_pid`` (a no-op once reaped)."""
        sock = self.sock
        if sock is None:
            return
        try:
            sock.send(json.dumps({"kill": ns_pid}).encode())
        except OSError:
            pass

    def close(self) -> None:
        """Kill the server and every child it still has (its PID namespace goes with it)."""
        from bench.sandbox import launcher

        if self.proc is not None:
            launcher.kill(self.proc)
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._reader is not None:
            self._reader.join(timeout=10)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        with self._lock:
            children = [*self._children.values(), *self._retired]
        for child, group in children:  # marked exited by the reader; a child no session closed:
            group.kill_all()
            child.exited(-9)
            launcher.kill(child)  # its cgroup removed
