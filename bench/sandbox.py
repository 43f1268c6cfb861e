"""Starts the child process that runs submitted code inside a sandbox, and kills it.

Layers (``isolation_layers()`` lists those that actually ran for the last child):

- ``namespaces``: bubblewrap (``bwrap``) gives the child private mount, PID, IPC,
  UTS and network namespaces (no network, loopback included). Its file system is
  read-only: Python's prefix and the virtualenv, the bench and track packages,
  the job's data directory (read-only) and its own working directory (writable),
  a fresh ``/proc``, a minimal ``/dev`` with a private writable ``/dev/shm``.
  Nothing else of the host (no checkout, no ``/etc``, no other users' data).
- ``empty_env``: bwrap itself starts with an empty environment (its PID 1 keeps
  its parent's, visible in ``/proc/1/environ``); the child gets a fixed minimal one.
- ``cgroup_memory``, ``cgroup_pids``, ``cgroup_kill``: a per-child cgroup (v2, or
  v1 controllers on hybrid hosts) with a memory and a process-count limit, and a
  kill that reaches every process in it, ``setsid()`` daemons included.
- ``rlimits``: CPU time, core dumps, file size (the output cap), open files; and
  address space (``rlimit_as``) only where no memory cgroup is available.
- ``no_new_privs`` and ``seccomp``: set by the bootstrap (``python -m
  bench.sandbox``) before ``bench.child`` runs: non-UNIX sockets and namespace,
  mount, ptrace, bpf, keyctl-style calls fail with EPERM.
- ``output_cap``: the child's stdout/stderr go to a file capped by RLIMIT_FSIZE.
- ``process_group_kill``: the child runs in its own session; the kill reaches
  its process group (the only kill left where neither bwrap nor cgroups exist).

Where a layer is unavailable the launcher logs it and runs without it, unless
full isolation is required (``require_full_isolation=True`` or the environment
variable ``IDEABENCH_REQUIRE_FULL_ISOLATION=1``): then ``launch`` refuses with a
``BenchError`` (code ``internal``) naming the missing layers.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import logging
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from bench.errors import BenchError, ErrorCode

log = logging.getLogger(__name__)

# RLIMIT_AS below ~1 GB breaks `import torch`; keep a floor.
MIN_MEMORY_MB = 1536
REQUIRE_ENV = "IDEABENCH_REQUIRE_FULL_ISOLATION"
BWRAP_ENV = "IDEABENCH_BWRAP"  # path of bwrap, or "0" to disable it
CGROUP_PREFIX = "ideabench-"
STATUS_TIMEOUT_S = 60.0
BOOT_LOG = "sandbox.log"

FULL_ISOLATION = (
    "namespaces", "no_network", "empty_env", "cgroup_memory", "cgroup_pids", "cgroup_kill",
    "rlimits", "no_new_privs", "seccomp", "output_cap",
)


@dataclass(frozen=True)
class Limits:
    """Resource limits of one child."""

    memory_mb: int = 6144
    file_size_mb: int = 256  # also the cap on the child's stdout/stderr
    open_files: int = 256
    pids: int = 128  # processes and threads (torch's thread pools count)
    cpu_s: int = 4 * 3600


@dataclass(frozen=True)
class ExitInfo:
    """How a child ended, as far as the sandbox can tell."""

    returncode: int | None
    signal: int | None  # the signal that killed the child's Python, if any
    oom_killed: bool  # the memory cgroup's OOM killer fired
    output_capped: bool  # its log reached the output cap


# -- cgroups --------------------------------------------------------------------
def _cgroup_mounts() -> tuple[Path | None, dict[str, Path]]:
    """(cgroup v2 mount, {v1 controller: mount}) from /proc/self/mounts."""
    v2: Path | None = None
    v1: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None, {}
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        mnt, fstype, opts = parts[1], parts[2], parts[3].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = Path(mnt)
        elif fstype == "cgroup":
            for ctrl in ("memory", "pids"):
                if ctrl in opts:
                    v1.setdefault(ctrl, Path(mnt))
    return v2, v1


def _own_cgroups() -> dict[str, str]:
    """{controller or '' for v2: path} of this process."""
    own: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for ctrl in ctrls.split(",") if ctrls else [""]:
                own[ctrl] = path
    except (OSError, ValueError):
        pass
    return own


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _subtree_controllers(directory: Path) -> set[str]:
    try:
        return set((directory / "cgroup.subtree_control").read_text().split())
    except OSError:
        return set()


def _v2_parent(mount: Path, own: Path) -> Path:
    """Where to create a child's v2 cgroup: the worker's own cgroup, or its parent.

    v2 enables controllers for children only in a cgroup without processes of
    its own (the root excepted). A worker that moved itself into a leaf (e.g.
    ``<container root>/worker``) gets its children's cgroups as siblings.
    """
    for candidate in (own, own.parent):
        if not candidate.is_relative_to(mount):
            continue
        for ctrl in ("memory", "pids"):
            if ctrl not in _subtree_controllers(candidate):
                _write(candidate / "cgroup.subtree_control", f"+{ctrl}")  # EBUSY if it has processes
        if {"memory", "pids"} <= _subtree_controllers(candidate):
            return candidate
    return own


def _cgroup_parents() -> list[Path]:
    """Directories where this process creates its children's cgroups."""
    v2, v1 = _cgroup_mounts()
    own = _own_cgroups()
    parents = [v1[c] / own.get(c, "/").lstrip("/") for c in v1]
    if v2 is not None and "" in own:
        base = v2 / own[""].lstrip("/")
        parents += [base, base.parent] if base.parent.is_relative_to(v2) else [base]
    return parents


def _sweep_stale() -> None:
    """Remove empty cgroups left by workers that died before cleaning up.

    Their processes died with them where bwrap ran (``--die-with-parent``).
    """
    for parent in _cgroup_parents():
        try:
            entries = list(parent.glob(f"{CGROUP_PREFIX}*-*"))
        except OSError:
            continue
        for directory in entries:
            try:
                owner = int(directory.name[len(CGROUP_PREFIX):].split("-", 1)[0])
            except ValueError:
                continue
            if owner == os.getpid() or os.path.exists(f"/proc/{owner}"):
                continue
            stale = _Cgroup(dirs=[directory])
            if not stale.pids_in():  # only empty ones: the owner may live in another PID namespace
                stale.remove(attempts=1)


@dataclass
class _Cgroup:
    """The per-child cgroup(s): v2 where it has the controllers, else v1 ones."""

    dirs: list[Path] = field(default_factory=list)
    memory: Path | None = None  # dir whose memory limit applies
    memory_v2: bool = False
    pids: Path | None = None
    kill_file: Path | None = None  # v2 cgroup.kill

    @classmethod
    def create(cls, limits: Limits) -> _Cgroup:
        group = cls()
        _sweep_stale()
        name = f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        v2, v1 = _cgroup_mounts()
        own = _own_cgroups()
        memory = max(limits.memory_mb, MIN_MEMORY_MB) * 1024 * 1024
        if v2 is not None and "" in own:
            parent = _v2_parent(v2, v2 / own[""].lstrip("/"))
            directory = parent / name
            try:
                directory.mkdir()
                group.dirs.append(directory)
                created = True
            except OSError:
                created = False
            if created:
                if (directory / "cgroup.kill").exists():
                    group.kill_file = directory / "cgroup.kill"
                if _write(directory / "memory.max", str(memory)):
                    _write(directory / "memory.swap.max", "0")
                    _write(directory / "memory.oom.group", "1")
                    group.memory, group.memory_v2 = directory, True
                if _write(directory / "pids.max", str(limits.pids)):
                    group.pids = directory
        for ctrl in ("memory", "pids"):
            if (group.memory if ctrl == "memory" else group.pids) is not None or ctrl not in v1:
                continue
            directory = v1[ctrl] / own.get(ctrl, "/").lstrip("/") / name
            try:
                directory.mkdir()
            except OSError:
                continue
            group.dirs.append(directory)
            if ctrl == "memory" and _write(directory / "memory.limit_in_bytes", str(memory)):
                _write(directory / "memory.memsw.limit_in_bytes", str(memory))  # no swap either
                group.memory = directory
            if ctrl == "pids" and _write(directory / "pids.max", str(limits.pids)):
                group.pids = directory
        return group

    def layers(self) -> list[str]:
        found = []
        if self.memory is not None:
            found.append("cgroup_memory")
        if self.pids is not None:
            found.append("cgroup_pids")
        if self.kill_file is not None or self.dirs:
            found.append("cgroup_kill")
        return found

    def procs_files(self) -> list[bytes]:
        return [str(d / "cgroup.procs").encode() for d in self.dirs]

    def pids_in(self) -> set[int]:
        found: set[int] = set()
        for directory in self.dirs:
            try:
                found.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return found

    def oom_killed(self) -> bool:
        if self.memory is None:
            return False
        name = "memory.events" if self.memory_v2 else "memory.oom_control"
        try:
            for line in (self.memory / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        except (OSError, ValueError):
            pass
        return False

    def kill_all(self, timeout_s: float = 30.0) -> None:
        """SIGKILL every process in the cgroup(s), repeatedly until none is left.

        Dying processes can take a while to leave (a fork bomb of torch-sized
        processes tears down hundreds of address spaces), hence the patience.
        """
        if self.kill_file is not None:
            _write(self.kill_file, "1")
        deadline = time.monotonic() + timeout_s
        pause = 0.005
        while True:
            pids = self.pids_in()
            if not pids:
                return
            if time.monotonic() > deadline:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
        log.error("sandbox: processes %s survived the cgroup kill", sorted(self.pids_in()))

    def remove(self, attempts: int = 100) -> None:
        for directory in reversed(self.dirs):
            for _ in range(attempts):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
            else:
                log.warning("sandbox: could not remove cgroup %s", directory)
        self.dirs = []


# -- bubblewrap -------------------------------------------------------------------
def _bwrap_path() -> str | None:
    configured = os.environ.get(BWRAP_ENV)
    if configured == "0":
        return None
    return configured or shutil.which("bwrap") or (
        "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None
    )


def _code_dirs() -> list[Path]:
    """Directories of the packages the child imports: bench and every track's top package."""
    names = {"bench"}
    try:
        for ep in entry_points(group="ideabench.tracks"):
            names.add(ep.value.split(":")[0].split(".")[0])
    except Exception:  # noqa: BLE001 - a broken registry shows up later, in the child
        pass
    dirs: list[Path] = []
    for name in sorted(names):
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            dirs.extend(Path(p) for p in spec.submodule_search_locations)
        elif spec.origin:
            dirs.append(Path(spec.origin))
    return dirs


def _python_dirs() -> list[Path]:
    """Python's prefix, the venv and the interpreter's real location."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.base_exec_prefix)}
    paths.add(Path(os.path.realpath(sys.executable)).parent.parent)
    for entry in sys.path:  # site-packages outside the prefixes (rare)
        if entry and "site-packages" in entry and Path(entry).is_dir():
            paths.add(Path(entry))
    system = (Path("/usr"), Path("/lib"), Path("/lib64"), Path("/bin"), Path("/sbin"))
    return sorted(p for p in paths if p not in system and not any(
        p.is_relative_to(s) for s in system if s.exists() and not s.is_symlink()
    ))


def _bwrap_args(bwrap: str, workdir: Path, read_only: list[Path], env: dict[str, str]) -> list[str]:
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session"]
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        args += ["--ro-bind-try", etc, etc]
    for path in _python_dirs() + _code_dirs() + read_only:
        args += ["--ro-bind-try", str(path), str(path)]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]
    args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    nvidia = sorted(str(p) for p in Path("/dev").glob("nvidia*"))
    for node in nvidia:  # a GPU worker: the device nodes (the driver libraries live in /usr)
        args += ["--dev-bind-try", node, node]
    if nvidia:
        args += ["--ro-bind-try", "/sys", "/sys"]
    args += ["--bind", str(workdir), str(workdir), "--remount-ro", "/", "--chdir", str(workdir)]
    args += ["--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


# -- launching --------------------------------------------------------------------
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
    cgroup: _Cgroup | None
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
    if _bwrap_path() is not None:
        layers += ["namespaces", "no_network"]
    group = _Cgroup.create(Limits())
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
        return _launch(workdir, limits, read_only, require_full_isolation)


def _launch(
    workdir: Path, limits: Limits, read_only: list[Path] | None, require_full_isolation: bool | None
) -> tuple[subprocess.Popen[bytes], int]:
    global _last_layers
    required = _requires_full(require_full_isolation)
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if read_only is None:
        data_dir = workdir.parent / "data"
        data_dir.mkdir(exist_ok=True)
        read_only = [data_dir]
    bwrap = _bwrap_path()
    group = _Cgroup.create(limits)
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

    proc, proto_fd, status = _start(workdir, limits, bwrap, group, read_only)
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
        group = _Cgroup.create(limits)
        proc, proto_fd, status = _start(workdir, limits, None, group, read_only)
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


def _kill_started(proc: subprocess.Popen[bytes], group: _Cgroup, proto_fd: int) -> None:
    group.kill_all()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    os.close(proto_fd)


def _start(
    workdir: Path, limits: Limits, bwrap: str | None, group: _Cgroup, read_only: list[Path]
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

    bench_root = str(Path(__file__).resolve().parent.parent)
    env = _child_env(workdir)
    env["PYTHONPATH"] = bench_root
    inner = [sys.executable, "-m", "bench.sandbox", str(write_fd), str(status_w), str(workdir)]
    if bwrap is not None:
        argv, popen_env = _bwrap_args(bwrap, workdir, read_only, env) + inner, {}
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


# -- ending -----------------------------------------------------------------------
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


# -- the child side: bootstrap ------------------------------------------------------
_DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount", "umount2", "pivot_root",
    "chroot", "bpf", "keyctl", "add_key", "request_key", "unshare", "setns", "perf_event_open",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "userfaultfd", "swapon", "swapoff", "reboot",
    "sethostname", "setdomainname", "acct", "syslog", "quotactl", "lookup_dcookie", "vhangup",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "fsopen", "fsmount", "fsconfig",
    "fspick", "move_mount", "open_tree", "mount_setattr", "iopl", "ioperm",
)
_CLONE_NEW_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)


def _set_no_new_privs() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _install_seccomp() -> None:
    import socket

    import pyseccomp as seccomp

    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    eperm = seccomp.ERRNO(errno.EPERM)
    for name in _DENIED_SYSCALLS:
        try:
            flt.add_rule(eperm, name)
        except (OSError, ValueError, RuntimeError):
            pass  # not a syscall on this architecture
    for name in ("socket", "socketpair"):
        flt.add_rule(eperm, name, seccomp.Arg(0, seccomp.NE, socket.AF_UNIX))
    for flag in _CLONE_NEW_FLAGS:
        flt.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    try:  # clone3 passes its flags in memory: make libc fall back to clone
        flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    except (OSError, ValueError, RuntimeError):
        pass
    flt.load()


def _status_field(name: str) -> str:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def violation(exc: BaseException) -> str | None:
    """What the sandbox refused, if ``exc`` is the sandbox refusing something; else None."""
    if not isinstance(exc, OSError):
        return None
    frames = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    in_socket = any(f.endswith(("socket.py", "ssl.py", "connection.py")) for f in frames)
    code = exc.errno
    filename = getattr(exc, "filename", None)
    if in_socket or isinstance(exc, ConnectionError) or code in (
        errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EAFNOSUPPORT
    ):
        return "network access refused (the sandbox has no network, loopback included)"
    if code == errno.EROFS:
        return f"writing {filename or 'a file'} outside the job's temp dir refused (read-only file system)"
    if code == errno.EAGAIN and isinstance(exc, BlockingIOError) and filename is None:
        return "process or thread creation refused (the sandbox's process limit was reached)"
    if code in (errno.EPERM, errno.EACCES):
        what = f"access to {filename}" if filename else "a system call"
        return f"{what} refused by the sandbox (seccomp or file permissions)"
    if isinstance(exc, FileNotFoundError) and filename and os.path.isabs(str(filename)):
        if not str(filename).startswith((os.getcwd(), "/dev/shm")):
            return f"reading {filename} refused: host files outside the sandbox are not visible"
    return None


def _bootstrap(argv: list[str]) -> None:
    """``python -m bench.sandbox PROTO_FD STATUS_FD WORKDIR``: lock down, then run bench.child."""
    proto_fd, status_fd = argv[0], int(argv[1])
    status: dict[str, Any] = {"errors": []}
    try:
        _set_no_new_privs()
    except OSError as exc:
        status["errors"].append(f"no_new_privs: {exc}")
    try:
        _install_seccomp()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        status["errors"].append(f"seccomp: {type(exc).__name__}: {exc}")
    try:
        status["no_new_privs"] = _status_field("NoNewPrivs") == "1"
        status["seccomp"] = _status_field("Seccomp") == "2"
    except OSError as exc:
        status["errors"].append(f"/proc/self/status: {exc}")
    os.write(status_fd, json.dumps(status).encode())
    os.close(status_fd)
    import bench.child as child

    sys.argv = ["bench.child", proto_fd]
    child.main()


if __name__ == "__main__":
    _bootstrap(sys.argv[1:])
