"""Start a sandboxed child (``launch``), tell how it ended (``exit_info``), kill it (``kill``)."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from bench.errors import BenchError, ErrorCode
from bench.sandbox.bwrap import bwrap_args, bwrap_path, hidden_dirs
from bench.sandbox.cgroups import Cgroup
from bench.sandbox.forkserver import ForkedProcess
from bench.sandbox.limits import LOG_NAME, MIN_MEMORY_MB, ExitInfo, Limits, rlimits
from bench.sandbox.policy import policy

if TYPE_CHECKING:
    from bench.sandbox.forkserver import ForkServer

log = logging.getLogger("bench.sandbox")
# The settings behind the policy (``SandboxPolicy``), named in errors an operator reads.
REQUIRE_ENV = "IDEABENCH_REQUIRE_FULL_ISOLATION"
ALLOW_WEAK_ENV = "IDEABENCH_ALLOW_WEAK_SANDBOX"
STATUS_TIMEOUT_S = 60.0
CHILD_ENTRY = "bench.child"  # the module whose main() the bootstrap runs (named, never imported here)
BOOT_LOG = "sandbox.log"

# Every layer a launch can apply. A production worker requires all of them (REQUIRE_ENV).
FULL_ISOLATION = (
    "namespaces", "no_network", "empty_env", "cgroup_memory", "cgroup_pids", "cgroup_kill",
    "rlimits", "no_new_privs", "seccomp", "output_cap",
)
# The layers without which nothing is judged, whatever the settings (fail closed): without
# namespaces an idea reads the host (the service's files, the seed secret) and writes to it;
# without them or seccomp it reaches the network; without an empty environment it reads the
# worker's secrets. The cgroup layers have a fallback (RLIMIT_AS, the process group's kill).
JUDGE_LAYERS = ("namespaces", "no_network", "empty_env", "no_new_privs", "seccomp")


def weak_allowed() -> bool:
    """Whether the policy's development setting lets children run without the judging layers
    (``SandboxPolicy.allow_weak``); their reports then say so and count nowhere."""
    return policy().allow_weak


def required_layers(require_full_isolation: bool | None = None) -> tuple[str, ...]:
    """The layers a launch must have, or refuse: ``FULL_ISOLATION`` when full isolation is
    required (argument, else the policy's ``require_full_isolation``); else ``JUDGE_LAYERS``,
    unless weak sandboxes are allowed (development only: then none)."""
    if require_full_isolation if require_full_isolation is not None else policy().require_full_isolation:
        return FULL_ISOLATION
    return () if weak_allowed() else JUDGE_LAYERS


def missing_judge_layers(layers: list[str]) -> list[str]:
    """The judging layers absent from ``layers`` (a report's ``isolation``): non-empty only
    for a report judged under ``IDEABENCH_ALLOW_WEAK_SANDBOX``."""
    return [layer for layer in JUDGE_LAYERS if layer not in layers]


def _child_env(workdir: Path) -> dict[str, str]:
    """A minimal environment: nothing of the worker's (database or broker URLs, keys)."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "LANG": "C.UTF-8",
    }


class ChildProcess(Protocol):
    """A sandboxed child as its callers hold it: a ``subprocess.Popen`` of a fresh launch, or a
    ``forkserver.ForkedProcess``."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def stdin(self) -> IO[bytes] | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


@dataclass
class _State:
    layers: list[str]
    cgroup: Cgroup | None
    log_path: Path
    limits: Limits
    forked: bool = False  # its exit status is Python's own, not bwrap's (128 + a signal)


_states: dict[int, _State] = {}  # fresh launches', by pid (a Popen's pid is its own until it is reaped)


def _state_of(proc: ChildProcess, *, pop: bool = False) -> _State | None:
    """The launch state of ``proc``. A forked child's travels with its handle: its host pid is
    reaped by its server, so another process may hold that number while the job still holds
    the handle (red team 2)."""
    if isinstance(proc, ForkedProcess):
        state = proc.sandbox_state
        if pop:
            proc.sandbox_state = None
        return state if isinstance(state, _State) else None
    with _states_lock:
        return _states.pop(proc.pid, None) if pop else _states.get(proc.pid)


# Told the seconds each child took from its launch to its bootstrap's report (the sandbox's
# start), by the worker's metrics (``workers.metrics``): bench imports no exporter.
LAUNCH_OBSERVERS: list[Callable[[float], None]] = []
_states_lock = threading.Lock()
_last_layers: list[str] | None = None


def _refuse(missing: list[str], required: tuple[str, ...], why: str = "") -> BenchError:
    setting = (f"full isolation is required ({REQUIRE_ENV}=1)" if required == FULL_ISOLATION
               else "submitted code runs only in a complete sandbox")
    return BenchError(
        ErrorCode.SANDBOX_UNAVAILABLE,
        f"This worker refuses to run submitted code: {setting}, and these sandbox layers are "
        f"unavailable on it: {', '.join(missing)}{why}.",
        "Not your idea's fault: submit it again later. An operator installs bubblewrap and "
        "libseccomp (scripts/system_deps.sh), gives the worker a writable cgroup where full isolation "
        f"is required, or, on a development machine only, sets {ALLOW_WEAK_ENV}=1.",
    )


def probe_layers() -> list[str]:
    """The layers a launch would apply now (without starting anything)."""
    layers = ["process", "empty_env", "private_tmpdir", "rlimits", "output_cap", "process_group_kill"]
    if bwrap_path() is not None:
        layers += ["namespaces", "no_network"]
    group = Cgroup.create(Limits())
    layers += group.layers()
    group.remove()
    layers.append("no_new_privs")
    if importlib.util.find_spec("pyseccomp") is not None:
        layers.append("seccomp")
    return layers


def isolation_layers() -> list[str]:
    """The isolation layers that ran for the most recent child (a probe if none ran yet)."""
    return list(_last_layers) if _last_layers is not None else probe_layers()


def layers_of(proc: ChildProcess) -> list[str]:
    """The isolation layers that ran for ``proc``."""
    state = _state_of(proc)
    return list(state.layers) if state else []


_launch_lock = threading.Lock()


def launch(
    workdir: Path,
    limits: Limits,
    *,
    read_only: list[Path] | None = None,
    require_full_isolation: bool | None = None,
    hide_tracks: bool = True,
    server: ForkServer | None = None,
) -> tuple[ChildProcess, int]:
    """Start ``python -m bench.child`` in ``workdir`` inside the sandbox.

    Returns the process and the protocol fd: the caller reads JSON lines from it
    and writes commands to stdin. ``read_only`` lists host directories the child
    may read (default: the job's ``data`` directory, ``workdir.parent / "data"``,
    created if missing); ``workdir`` is its only writable directory. Host paths
    appear at the same paths inside the sandbox, so paths pass unchanged. Launches
    from several threads run one at a time. With ``server`` (the job's
    ``forkserver.ForkServer``) the child is forked from it where it can give the child this
    view, its layers those of the server's sandbox, its own cgroup's and ``landlock``; else
    it starts fresh.
    """
    required = required_layers(require_full_isolation)
    if server is not None:
        if read_only is None:
            read_only = [workdir.resolve().parent / "data"]
            read_only[0].mkdir(parents=True, exist_ok=True)
        forked = _fork(server, workdir, limits, read_only, hide_tracks, required)
        if forked is not None:
            return forked
    with _launch_lock:
        return _launch(workdir, limits, read_only, required, hidden_dirs(tracks=hide_tracks))


def launch_server(workdir: Path, limits: Limits, *, hide_tracks: bool, entry: str) -> tuple[subprocess.Popen[bytes], int]:
    """Start a fork server (``entry``, run by the bootstrap as a child's program is) in
    ``workdir``, which it may write, with the judging layers required; the second value is its
    end of a ``SOCK_SEQPACKET`` socket pair (``bench.sandbox.forkserver``)."""
    with _launch_lock:
        proc, fd = _launch(workdir, limits, [], required_layers(), hidden_dirs(tracks=hide_tracks),
                           entry=entry, socket_proto=True)
    assert isinstance(proc, subprocess.Popen)
    return proc, fd


def cgroup_of(proc: ChildProcess) -> Cgroup | None:
    """The cgroup ``proc`` was started in (None: none, or ``proc`` is not a live launch)."""
    state = _state_of(proc)
    return state.cgroup if state is not None else None


def _fork(server: ForkServer, workdir: Path, limits: Limits, read_only: list[Path], hide_tracks: bool,
          required: tuple[str, ...]) -> tuple[ChildProcess, int] | None:
    global _last_layers
    started = time.monotonic()
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    forked = server.fork(workdir, limits, read_only, hide_tracks, workdir / BOOT_LOG)
    if forked is None:
        return None
    proc, proto_fd, group = forked
    own = group.layers()  # the child's cgroup's layers where the server's own stood, in their order
    layers = [x for x in server.layers if x in own or not x.startswith("cgroup_")] + ["landlock"]
    layers += [x for x in own if x not in layers]
    if missing := [layer for layer in required if layer not in layers]:  # never: the server had them all
        proc.kill()
        group.kill_all()
        group.remove()
        os.close(proto_fd)
        raise _refuse(missing, required)
    proc.sandbox_state = _State(layers, group, workdir / BOOT_LOG, limits, forked=True)
    _last_layers = layers
    for observe in LAUNCH_OBSERVERS:
        observe(time.monotonic() - started)
    return proc, proto_fd


@dataclass(frozen=True)
class SandboxCheck:
    """What a real launch on this host gave: ``layers`` that ran, the judging layers
    ``missing`` (``JUDGE_LAYERS``), and whether a development setting allows judging without
    them (``weak_allowed``)."""

    layers: list[str]
    missing: list[str]
    weak_allowed: bool

    @property
    def judges(self) -> bool:
        """Whether children may run here (fail closed: only with every judging layer, or weak
        sandboxes allowed)."""
        return not self.missing or self.weak_allowed

    def describe(self) -> str:
        """``complete``, ``weak: missing ...`` (judging, development) or ``refused: missing ...``."""
        if not self.missing:
            return "complete"
        return f"{'weak' if self.weak_allowed else 'refused'}: missing {', '.join(self.missing)}"


def check(workdir: Path) -> SandboxCheck:
    """Start one sandboxed child in ``workdir`` (no data, killed once its bootstrap has reported
    its layers, before it imports torch) and say which judging layers it ran without. A worker
    calls this at start: a worker that cannot sandbox judges nothing."""
    try:
        with _launch_lock:
            proc, fd = _launch(workdir, Limits(), [], (), [])
    except BenchError as exc:
        log.error("sandbox check: no child starts here: %s", exc.message)
        return SandboxCheck([], list(JUDGE_LAYERS), weak_allowed())
    os.close(fd)
    layers = layers_of(proc)
    kill(proc)
    return SandboxCheck(layers, missing_judge_layers(layers), weak_allowed())


def _launch(
    workdir: Path, limits: Limits, read_only: list[Path] | None, required: tuple[str, ...],
    hidden: list[Path], *, entry: str = CHILD_ENTRY, socket_proto: bool = False,
) -> tuple[subprocess.Popen[bytes], int]:
    global _last_layers
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if read_only is None:
        data_dir = workdir.parent / "data"
        data_dir.mkdir(exist_ok=True)
        read_only = [data_dir]
    bwrap = bwrap_path()
    group = Cgroup.create(limits)
    layers = ["process", "empty_env", "private_tmpdir", "rlimits", "output_cap", "process_group_kill"]
    if bwrap is not None:
        layers += ["namespaces", "no_network"]
    layers += group.layers()
    missing = [layer for layer in required if layer not in layers and layer not in ("no_new_privs", "seccomp")]
    if missing:  # known before starting anything (no_new_privs and seccomp: after the bootstrap)
        group.remove()
        raise _refuse(missing, required)

    started = time.monotonic()
    try:
        proc, proto_fd, status = _start(workdir, limits, bwrap, group, read_only, hidden, entry, socket_proto)
        unstartable = None
    except OSError as exc:  # the configured bwrap cannot be executed here (missing, not a program)
        if bwrap is None:
            group.remove()
            raise BenchError(ErrorCode.INTERNAL, f"The sandboxed child failed to start: {exc}") from None
        unstartable = f"{bwrap!r} cannot be started: {exc.strerror}"
    if unstartable is not None or (status is None and bwrap is not None):
        # bwrap could not start here (no namespaces allowed?): degrade, or refuse.
        if unstartable is None:
            reason = _boot_log_tail(workdir)
            _kill_started(proc, group, proto_fd)
        else:
            reason = unstartable
        if "namespaces" in required:
            group.remove()
            raise _refuse(["namespaces", "no_network"], required, f" (bwrap failed: {reason})")
        log.warning("sandbox: bubblewrap failed (%s); running without namespaces (%s=1)", reason, ALLOW_WEAK_ENV)
        layers = [x for x in layers if x not in ("namespaces", "no_network")]
        group.remove()
        group = Cgroup.create(limits)
        proc, proto_fd, status = _start(workdir, limits, None, group, read_only, hidden, entry, socket_proto)
    if status is None:
        reason = _boot_log_tail(workdir)
        _kill_started(proc, group, proto_fd)
        group.remove()
        raise BenchError(ErrorCode.INTERNAL, f"The sandboxed child failed to start: {reason}")
    layers += [x for x in ("no_new_privs", "seccomp") if status.get(x)]
    if not layers.count("rlimit_as") and group.memory is None:
        layers.append("rlimit_as")
    missing = [layer for layer in required if layer not in layers]
    if missing:
        _kill_started(proc, group, proto_fd)
        group.remove()
        raise _refuse(missing, required, f" ({'; '.join(status.get('errors', []))})")
    if weak := [layer for layer in FULL_ISOLATION if layer not in layers]:
        log.warning("sandbox: child runs without %s (%s)", ", ".join(weak), status.get("errors"))
    with _states_lock:
        _states[proc.pid] = _State(layers, group, workdir / BOOT_LOG, limits)
    _last_layers = layers
    for observe in LAUNCH_OBSERVERS:
        observe(time.monotonic() - started)
    return proc, proto_fd


def _boot_log_tail(workdir: Path) -> str:
    try:
        return (workdir / BOOT_LOG).read_text(errors="replace").strip()[-400:] or "no output"
    except OSError:
        return "no output"


def _kill_started(proc: subprocess.Popen[bytes], group: Cgroup, proto_fd: int) -> None:
    group.kill_all()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    os.close(proto_fd)


def _start(
    workdir: Path, limits: Limits, bwrap: str | None, group: Cgroup, read_only: list[Path],
    hidden: list[Path], entry: str, socket_proto: bool,
) -> tuple[subprocess.Popen[bytes], int, dict[str, Any] | None]:
    inner_fds: list[int] = []  # a fork server's own socket pairs (a sandboxed process makes no socket)
    if socket_proto:  # a fork server's: messages both ways, descriptors passed
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        read_fd, write_fd = ours.detach(), theirs.detach()
        os.set_inheritable(write_fd, True)
        for _ in range(2):  # the zygote's to its spares, and to its template (bench.sandbox.zygote)
            pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            inner_fds += [end.detach() for end in pair]
        for fd in inner_fds:
            os.set_inheritable(fd, True)
    else:
        read_fd, write_fd = os.pipe()
    status_r, status_w = os.pipe()
    procs_files = group.procs_files()
    memory = max(limits.memory_mb, MIN_MEMORY_MB) * 1024 * 1024
    set_as = group.memory is None

    child_rlimits = rlimits(limits)

    def preexec() -> None:
        # Join the cgroups first (low-level writes only: we are between fork and exec).
        for path in procs_files:
            try:
                fd = os.open(path, os.O_WRONLY)
                os.write(fd, b"0")
                os.close(fd)
            except OSError:
                pass
        if set_as:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        for which, soft, hard in child_rlimits:
            resource.setrlimit(which, (soft, hard))

    bench_root = str(Path(__file__).resolve().parents[2])
    env = _child_env(workdir)
    env["PYTHONPATH"] = bench_root
    # -s -P: neither the user site of HOME (the working directory) nor the working directory
    # itself is on sys.path, so nothing written there shadows a module before seccomp is set
    proto_arg = ",".join(str(fd) for fd in (write_fd, *inner_fds))
    inner = [sys.executable, "-s", "-P", "-m", "bench.sandbox", proto_arg, str(status_w), str(workdir), entry]
    if bwrap is not None:
        argv, popen_env = bwrap_args(bwrap, workdir, read_only, env, hidden) + inner, {}
    else:
        argv, popen_env = inner, env
    # not through a link: the directory is the child's (hardening, red team 2)
    boot_log = os.fdopen(os.open(workdir / BOOT_LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 0o600), "wb")
    try:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=popen_env,
            stdin=subprocess.PIPE,
            stdout=boot_log,
            stderr=boot_log,
            pass_fds=(write_fd, status_w, *inner_fds),
            start_new_session=True,
            preexec_fn=preexec,  # noqa: PLW1509 - rlimits and cgroup must be set before exec
        )
    except OSError:  # nothing started (bwrap missing or not a program): the parent's ends go too
        os.close(read_fd)
        os.close(status_r)
        raise
    finally:
        boot_log.close()
        for fd in (write_fd, status_w, *inner_fds):
            os.close(fd)
    status = _read_status(status_r, proc)
    return proc, read_fd, status


def _read_status(fd: int, proc: subprocess.Popen[bytes]) -> dict[str, Any] | None:
    """The bootstrap's report of the in-child layers; None if it never came."""
    data = b""
    deadline = time.monotonic() + STATUS_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            readable, _, _ = select.select([fd], [], [], 0.2)
            if readable:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                data += chunk
            elif proc.poll() is not None:
                break
    finally:
        os.close(fd)
    try:
        status: dict[str, Any] = json.loads(data)
        return status
    except ValueError:
        return None



def exit_info(proc: ChildProcess) -> ExitInfo:
    """How ``proc`` ended (call after it exited, before ``kill``)."""
    state = _state_of(proc)
    rc = proc.returncode
    sig: int | None = None
    if rc is not None and rc < 0:
        sig = -rc
    elif state is not None and not state.forked and "namespaces" in state.layers and rc is not None and 128 < rc < 128 + 65:
        sig = rc - 128  # bwrap exits with 128 + the signal that killed its command
    oom = state is not None and state.cgroup is not None and state.cgroup.oom_killed()
    capped = sig == signal.SIGXFSZ
    if state is not None and not capped:
        try:
            size = (state.log_path.parent / LOG_NAME).stat().st_size
            capped = size >= state.limits.file_size_mb * 1024 * 1024
        except OSError:
            pass
    return ExitInfo(rc, sig, oom, capped)


def kill(proc: ChildProcess) -> None:
    """Kill the child and everything it started (cgroup, PID namespace, process group); reap it."""
    state = _state_of(proc, pop=True)
    # Once reaped, the child's pid may be another process's (a later job's child leads a group
    # of that number): a second kill, or one after the child ended, signals no group by number.
    if proc.returncode is None and state is not None and state.forked:
        proc.kill()  # through its server, which has not reaped it: no other process's group
    elif proc.returncode is None:
        try:  # bwrap dies, so does its PID namespace (--die-with-parent): everything in it
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if state is not None and state.cgroup is not None:
        state.cgroup.kill_all()  # and the cgroup catches what left the process group
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    if state is not None and state.cgroup is not None:
        state.cgroup.kill_all()
        state.cgroup.remove()
