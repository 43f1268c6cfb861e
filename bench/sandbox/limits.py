"""What a sandboxed child may use, and how it ended."""

from __future__ import annotations

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

