"""Per-child cgroups: a memory and a process-count limit, and a kill that reaches every process.

cgroup v2 where the worker's cgroup can hand the controllers down, else v1 controllers
(hybrid hosts). Each child's cgroup is named ``ideabench-<worker pid>-<random>``;
empty ones left by dead workers are removed when the next one is made.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.sandbox.limits import MIN_MEMORY_MB, Limits

log = logging.getLogger("bench.sandbox")
CGROUP_PREFIX = "ideabench-"


def cgroup_mounts() -> tuple[Path | None, dict[str, Path]]:
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


def own_cgroups() -> dict[str, str]:
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


def cgroup_parents() -> list[Path]:
    """Directories where this process creates its children's cgroups."""
    v2, v1 = cgroup_mounts()
    own = own_cgroups()
    parents = [v1[c] / own.get(c, "/").lstrip("/") for c in v1]
    if v2 is not None and "" in own:
        base = v2 / own[""].lstrip("/")
        parents += [base, base.parent] if base.parent.is_relative_to(v2) else [base]
    return parents


def sweep_stale() -> None:
    """Remove empty cgroups left by workers that died before cleaning up.

    Their processes died with them where bwrap ran (``--die-with-parent``).
    """
    for parent in cgroup_parents():
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
            stale = Cgroup(dirs=[directory])
            if not stale.pids_in():  # only empty ones: the owner may live in another PID namespace
                stale.remove(attempts=1)


@dataclass
class Cgroup:
    """The per-child cgroup(s): v2 where it has the controllers, else v1 ones."""

    dirs: list[Path] = field(default_factory=list)
    memory: Path | None = None  # dir whose memory limit applies
    memory_v2: bool = False
    pids: Path | None = None
    kill_file: Path | None = None  # v2 cgroup.kill

    @classmethod
    def create(cls, limits: Limits) -> Cgroup:
        group = cls()
        sweep_stale()
        name = f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        v2, v1 = cgroup_mounts()
        own = own_cgroups()
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
