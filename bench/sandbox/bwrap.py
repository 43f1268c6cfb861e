"""Bubblewrap: private namespaces and a read-only view of the host for the child.

The child sees Python's prefix and the virtualenv, the bench and track packages,
the directories the caller lists read-only, and its own working directory
(writable), plus a fresh ``/proc``, a minimal ``/dev`` and a private ``/dev/shm``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from importlib.metadata import entry_points
from pathlib import Path

from bench.sandbox.policy import policy


def bwrap_path() -> str | None:
    """Bubblewrap's path by the policy (``SandboxPolicy.bwrap``): the configured one, else
    the one on ``PATH``; None for ``"0"`` or none found."""
    configured = policy().bwrap
    if configured == "0":
        return None
    return configured or shutil.which("bwrap") or (
        "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None
    )


def code_dirs() -> list[Path]:
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


def hidden_dirs(*, tracks: bool) -> list[Path]:
    """Directories the child sees empty: data sets shipped inside packages (scikit-learn's
    bundled diabetes and digits are two built-in tracks' data), and, for ``tracks``, the
    built-in track packages themselves (only the canonical baseline's child needs them)."""
    hidden: list[Path] = []
    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        hidden += [Path(root) / "datasets" / name for name in ("data", "images", "descr")]
    if tracks:
        hidden += [d for d in code_dirs() if d.name != "bench"]
    return [d for d in hidden if d.is_dir()]


def python_dirs() -> list[Path]:
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


def bwrap_args(
    bwrap: str, workdir: Path, read_only: list[Path], env: dict[str, str], hidden: list[Path]
) -> list[str]:
    # --cap-drop ALL: a worker run as root (a development machine, CI) would otherwise hand its
    # children every capability bwrap keeps for root (red team, session 25)
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        args += ["--ro-bind-try", etc, etc]
    for path in python_dirs() + code_dirs() + read_only:
        args += ["--ro-bind-try", str(path), str(path)]
    for path in hidden:  # an empty tmpfs over each (the bind above stays read-only around it)
        args += ["--tmpfs", str(path)]
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
