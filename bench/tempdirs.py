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
import stat
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
        try:
            remove_tree(self.name)
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC  # a directory, never a link


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` and all under it, as far as its owner may; never raises.

    Written here rather than ``shutil.rmtree`` because a child writes the tree (red teams 3 and
    4): Python 3.11's ``rmtree`` recurses once per level, and a tree 1,500 directories deep raised
    ``RecursionError`` out of the job's cleanup (the job ended ``internal``, its directory and
    its lock kept); a path past PATH_MAX cannot be named; a directory of mode 0o300 cannot be
    listed by a worker not run as root. So: a loop, not recursion; one name at a time below a
    held descriptor, following no link; each directory given its owner's rights before it is
    read, and none outside the tree. Only for trees no process writes any more."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        top = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the worker's own directory
    except OSError:
        return
    try:
        _remove_below(top, name)
    except Exception:  # noqa: BLE001 - what is left stays; a cleanup never fails its job
        log.warning("could not remove all of %s", path, exc_info=True)
    finally:
        os.close(top)


def _open_own(parent_fd: int, name: str) -> int:
    try:
        os.chmod(name, 0o700, dir_fd=parent_fd, follow_symlinks=True)  # checked a directory by lstat
    except OSError:
        pass
    return os.open(name, DIR_FLAGS, dir_fd=parent_fd)


def _remove_below(top: int, name: str) -> None:
    """Remove ``name`` in the directory ``top`` holds. Depth-first with one descriptor open at a
    time: each level keeps the names it has left, and goes back up through ``..``."""
    try:
        info = os.stat(name, dir_fd=top, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=top)
        return
    fd = _open_own(top, name)
    levels: list[tuple[str, list[str]]] = [(name, os.listdir(fd))]
    try:
        while levels:
            own, left = levels[-1]
            if left:
                entry = left.pop()
                try:
                    if stat.S_ISDIR(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                        below = _open_own(fd, entry)
                        os.close(fd)
                        fd = below
                        levels.append((entry, os.listdir(fd)))
                    else:
                        os.unlink(entry, dir_fd=fd)
                except OSError:
                    pass  # it stays, and so will the directories above it
                continue
            levels.pop()
            up = top if not levels else os.open("..", DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up if levels else -1
            try:
                os.rmdir(own, dir_fd=up)
            except OSError:
                pass
    finally:
        if fd not in (-1, top):
            os.close(fd)


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
