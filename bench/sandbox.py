"""Starts the child process that runs submitted code, with limits, and kills it.

Layers today: a private working directory, an empty environment, its own session
(process group) for a kill that reaches every descendant, and rlimits (address
space, core dumps, file size, open files). ``isolation_layers()`` says which ran;
the report records it.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# RLIMIT_AS below ~1 GB breaks `import torch`; keep a floor.
MIN_MEMORY_MB = 1536


@dataclass(frozen=True)
class Limits:
    """Resource limits of one child."""

    memory_mb: int = 6144
    file_size_mb: int = 256
    open_files: int = 256


def isolation_layers() -> list[str]:
    """The isolation layers this launcher applies, for the report."""
    return ["process", "empty_env", "private_tmpdir", "rlimits", "process_group_kill"]


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


def launch(workdir: Path, limits: Limits) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``python -m bench.child`` in ``workdir``; returns the process and protocol fd.

    The caller reads JSON lines from the returned fd and writes commands to stdin.
    """
    read_fd, write_fd = os.pipe()
    memory = max(limits.memory_mb, MIN_MEMORY_MB) * 1024 * 1024

    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        size = limits.file_size_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))

    bench_root = str(Path(__file__).resolve().parent.parent)
    env = _child_env(workdir)
    env["PYTHONPATH"] = bench_root
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.child", str(write_fd)],
        cwd=workdir,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(write_fd,),
        start_new_session=True,
        preexec_fn=preexec,  # noqa: PLW1509 - rlimits must be set in the child before exec
    )
    os.close(write_fd)
    return proc, read_fd


def kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child and its whole process group; reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
