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
import stat
import tempfile
import threading
from typing import Any

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
        remove_tree(self.name)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def remove_tree(path: str | os.PathLike[str]) -> None:
    """``shutil.rmtree`` that also removes what a child made unreadable or unwritable for its
    owner: a directory it cannot list or empty is given the owner's rights back and removed
    again (a worker not run as root kept a child's directory of mode 0o300, red team). Only for
    trees no process writes any more (their children are dead); a link is never followed."""

    def owner_rights(directory: str) -> bool:
        try:
            if stat.S_ISDIR(os.lstat(directory).st_mode):
                os.chmod(directory, 0o700)
                return True
        except OSError:
            pass  # not ours to change (the tree's root's parent): tried, then the removal says
        return False

    root = os.path.abspath(path)
    tried: set[str] = set()

    def inside(candidate: str) -> bool:  # never a right changed outside the tree (its parent: /tmp)
        return candidate == root or candidate.startswith(root + os.sep)

    def retry(_function: object, failed: str, exc: Any) -> None:
        failed = os.path.abspath(failed)
        error = exc[1] if isinstance(exc, tuple) else exc
        if failed in tried or isinstance(error, FileNotFoundError) or not inside(failed):
            return  # once per path: what still fails stays (a file the kernel keeps)
        tried.add(failed)
        if inside(os.path.dirname(failed)):
            owner_rights(os.path.dirname(failed))
        try:
            if owner_rights(failed):
                shutil.rmtree(failed, onerror=retry)
            else:
                os.unlink(failed)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)
    if os.path.lexists(path):  # a directory emptied by ``retry`` after its own rmdir failed
        shutil.rmtree(path, ignore_errors=True)


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
            remove_tree(entry.path)
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
