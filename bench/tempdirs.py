"""Temporary directories that a later worker can remove after their owner was killed.

A worker killed without running its cleanup (SIGKILL, SIGQUIT, a lost machine
restart without tmpfs) leaves its job directories behind: the exported data of up
to ten seeds (a custom track may produce 512 MiB per seed) and the children's
outputs. Each directory made here holds an ``.owner`` file that the process that
made it keeps locked (``flock``) while it uses the directory. The kernel drops the
lock when that process dies, in whatever PID namespace it ran, so ``sweep`` removes
exactly the directories nobody holds; the first ``OwnedDir`` of a process sweeps.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import threading

log = logging.getLogger(__name__)
PREFIX = "ideabench-"
OWNER = ".owner"

_swept = False
_sweep_lock = threading.Lock()


class OwnedDir:
    """A fresh ``ideabench-<kind>-*`` directory, locked by this process until ``cleanup()``."""

    def __init__(self, kind: str, parent: str | None = None) -> None:
        _sweep_once(parent)
        self.name = tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-", dir=parent)
        # Lock under another name, then rename: a sweeper never sees an unlocked .owner.
        pending = os.path.join(self.name, OWNER + ".new")
        self._fd: int | None = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.rename(pending, os.path.join(self.name, OWNER))

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *_exc: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        """Remove the directory, then drop the lock."""
        shutil.rmtree(self.name, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def sweep(parent: str | None = None) -> list[str]:
    """Remove the ``ideabench-*`` directories in ``parent`` (default: the temp dir) whose
    owner is gone; return their paths. Directories without an ``.owner`` file are left."""
    removed: list[str] = []
    base = parent or tempfile.gettempdir()
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(os.path.join(entry.path, OWNER), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its owner is alive
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d directories left by killed workers: %s", len(removed), removed)
    return removed


def _sweep_once(parent: str | None) -> None:
    global _swept
    if parent is not None:
        return
    with _sweep_lock:
        if _swept:
            return
        _swept = True
    sweep()
