"""What a sandboxed child may use, and how it ended."""

from __future__ import annotations

import resource
from dataclasses import dataclass

# RLIMIT_AS below ~1 GB breaks `import torch`; keep a floor.
MIN_MEMORY_MB = 1536
# The child's own log in its working directory (its stdout and stderr), capped by file_size_mb.
LOG_NAME = "child.log"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one child."""

    memory_mb: int = 6144
    file_size_mb: int = 256  # also the cap on the child's stdout/stderr
    open_files: int = 256
    pids: int = 128  # processes and threads (torch's thread pools count)
    cpu_s: int = 4 * 3600
    disk_mb: int = 2048  # everything in the child's working directory together
    disk_entries: int = 10_000  # files and directories in it


@dataclass(frozen=True)
class ExitInfo:
    """How a child ended, as far as the sandbox can tell."""

    returncode: int | None
    signal: int | None  # the signal that killed the child's Python, if any
    oom_killed: bool  # the memory cgroup's OOM killer fired
    output_capped: bool  # its log reached the output cap



def rlimits(limits: Limits) -> list[tuple[int, int, int]]:
    """The rlimits every child sets, as ``(resource, soft, hard)``: no core dumps, its CPU time,
    its file size (the output cap) and open files; a fresh launch (``launcher``) and a forked
    child (``zygote``) set the same (RLIMIT_AS, only without a memory cgroup, is the launcher's)."""
    size = limits.file_size_mb * 1024 * 1024
    return [
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 5),
        (resource.RLIMIT_FSIZE, size, size),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
    ]
