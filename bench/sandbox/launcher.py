"""Start a sandboxed child (``launch``), tell how it ended (``exit_info``), kill it (``kill``)."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchError, ErrorCode
from bench.sandbox.bwrap import bwrap_args, bwrap_path, hidden_dirs
from bench.sandbox.cgroups import Cgroup
from bench.sandbox.limits import MIN_MEMORY_MB, ExitInfo, Limits

log = logging.getLogger("bench.sandbox")
REQUIRE_ENV = "IDEABENCH_REQUIRE_FULL_ISOLATION"
STATUS_TIMEOUT_S = 60.0
BOOT_LOG = "sandbox.log"

FULL_ISOLATION = (
    "namespaces", "no_network", "empty_env", "cgroup_memory", "cgroup_pids", "cgroup_kill",
    "rlimits", "no_new_privs", "seccomp", "output_cap",
)



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


@dataclass
class _State:
    layers: list[str]
    cgroup: Cgroup | None
    log_path: Path
    limits: Limits


_states: dict[int, _State] = {}
_states_lock = threading.Lock()
_last_layers: list[str] | None = None


def _requires_full(value: bool | None) -> bool:
    if value is not None:
        return value
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _refuse(missing: list[str], why: str = "") -> BenchError:
    return BenchError(
        ErrorCode.INTERNAL,
        f"Full isolation is required ({REQUIRE_ENV}=1) but these sandbox layers are "
        f"unavailable on this worker: {', '.join(missing)}{why}; refusing to run submitted code.",
        "An operator must fix the worker: install bubblewrap (scripts/system_deps.sh), give it a "
        "writable cgroup and the pyseccomp package, or unset the requirement.",
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


def layers_of(proc: subprocess.Popen[bytes]) -> list[str]:
    """The isolation layers that ran for ``proc``."""
    with _states_lock:
        state = _states.get(proc.pid)
    return list(state.layers) if state else []


_launch_lock = threading.Lock()


def launch(
    workdir: Path,
    limits: Limits,
    *,
    read_only: list[Path] | None = None,
    require_full_isolation: bool | None = None,
    hide_tracks: bool = True,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``python -m bench.child`` in ``workdir`` inside the sandbox.

    Returns the process and the protocol fd: the caller reads JSON lines from it
    and writes commands to stdin. ``read_only`` lists host directories the child
    may read (default: the job's ``data`` directory, ``workdir.parent / "data"``,
    created if missing); ``workdir`` is its only writable directory. Host paths
    appear at the same paths inside the sandbox, so paths pass unchanged. Launches
    from several threads run one at a time.
    """
    with _launch_lock:
        return _launch(workdir, limits, read_only, require_full_isolation, hidden_dirs(tracks=hide_tracks))


def _launch(
    workdir: Path, limits: Limits, read_only: list[Path] | None, require_full_isolation: bool | None,
    hidden: list[Path],
) -> tuple[subprocess.Popen[bytes], int]:
    global _last_layers
    required = _requires_full(require_full_isolation)
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
    missing = [layer for layer in FULL_ISOLATION if layer not in layers and layer not in (
        "no_new_privs", "seccomp"
    )]
    if missing:
        log.warning("sandbox: running without %s", ", ".join(missing))
        if required:
            group.remove()
            raise _refuse(missing)

    proc, proto_fd, status = _start(workdir, limits, bwrap, group, read_only, hidden)
    if status is None and bwrap is not None:
        # bwrap could not start here (no namespaces allowed?): degrade, or refuse.
        reason = _boot_log_tail(workdir)
        _kill_started(proc, group, proto_fd)
        log.warning("sandbox: bubblewrap failed (%s); running without namespaces", reason)
        if required:
            group.remove()
            raise _refuse(["namespaces", "no_network"], f" (bwrap failed: {reason})")
        layers = [x for x in layers if x not in ("namespaces", "no_network")]
        group.remove()
        group = Cgroup.create(limits)
        proc, proto_fd, status = _start(workdir, limits, None, group, read_only, hidden)
    if status is None:
        reason = _boot_log_tail(workdir)
        _kill_started(proc, group, proto_fd)
        group.remove()
        raise BenchError(ErrorCode.INTERNAL, f"The sandboxed child failed to start: {reason}")
    layers += [x for x in ("no_new_privs", "seccomp") if status.get(x)]
    if not layers.count("rlimit_as") and group.memory is None:
        layers.append("rlimit_as")
    missing = [layer for layer in FULL_ISOLATION if layer not in layers]
    if missing:
        log.warning("sandbox: child runs without %s (%s)", ", ".join(missing), status.get("errors"))
        if required:
            _kill_started(proc, group, proto_fd)
            group.remove()
            raise _refuse(missing, f" ({'; '.join(status.get('errors', []))})")
    with _states_lock:
        _states[proc.pid] = _State(layers, group, workdir / BOOT_LOG, limits)
    _last_layers = layers
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
    hidden: list[Path],
) -> tuple[subprocess.Popen[bytes], int, dict[str, Any] | None]:
    read_fd, write_fd = os.pipe()
    status_r, status_w = os.pipe()
    procs_files = group.procs_files()
    memory = max(limits.memory_mb, MIN_MEMORY_MB) * 1024 * 1024
    set_as = group.memory is None

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
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
        size = limits.file_size_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))

    bench_root = str(Path(__file__).resolve().parents[2])
    env = _child_env(workdir)
    env["PYTHONPATH"] = bench_root
    inner = [sys.executable, "-m", "bench.sandbox", str(write_fd), str(status_w), str(workdir)]
    if bwrap is not None:
        argv, popen_env = bwrap_args(bwrap, workdir, read_only, env, hidden) + inner, {}
    else:
        argv, popen_env = inner, env
    boot_log = open(workdir / BOOT_LOG, "wb")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=popen_env,
            stdin=subprocess.PIPE,
            stdout=boot_log,
            stderr=boot_log,
            pass_fds=(write_fd, status_w),
            start_new_session=True,
            preexec_fn=preexec,  # noqa: PLW1509 - rlimits and cgroup must be set before exec
        )
    finally:
        boot_log.close()
        os.close(write_fd)
        os.close(status_w)
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



def exit_info(proc: subprocess.Popen[bytes]) -> ExitInfo:
    """How ``proc`` ended (call after it exited, before ``kill``)."""
    with _states_lock:
        state = _states.get(proc.pid)
    rc = proc.returncode
    sig: int | None = None
    if rc is not None and rc < 0:
        sig = -rc
    elif state is not None and "namespaces" in state.layers and rc is not None and 128 < rc < 128 + 65:
        sig = rc - 128  # bwrap exits with 128 + the signal that killed its command
    oom = state is not None and state.cgroup is not None and state.cgroup.oom_killed()
    capped = sig == signal.SIGXFSZ
    if state is not None and not capped:
        try:
            from bench.child import LOG_NAME

            size = (state.log_path.parent / LOG_NAME).stat().st_size
            capped = size >= state.limits.file_size_mb * 1024 * 1024
        except OSError:
            pass
    return ExitInfo(rc, sig, oom, capped)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child and everything it started (cgroup, PID namespace, process group); reap it."""
    with _states_lock:
        state = _states.pop(proc.pid, None)
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
