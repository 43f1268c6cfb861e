"""Directories a killed worker left behind are removed by the next one, and only those."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.runner import directory_usage
from bench.tempdirs import OWNER, OwnedDir, remove_tree, sweep

REPO = Path(__file__).resolve().parents[2]


def _left_by_a_killed_process(parent: Path) -> Path:
    """An OwnedDir made by a process that then dies without cleaning up."""
    script = (
        "import os, sys\n"
        "from bench.tempdirs import OwnedDir\n"
        "d = OwnedDir('job', parent=sys.argv[1])\n"
        "open(os.path.join(d.name, 'pred.npy'), 'wb').write(b'x' * 1000)\n"
        "print(d.name, flush=True)\n"
        "os._exit(0)  # no cleanup: as SIGKILL would\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(parent)], cwd=REPO, check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip())


def test_sweep_removes_what_a_dead_owner_left_and_nothing_else(tmp_path: Path) -> None:
    orphan = _left_by_a_killed_process(tmp_path)
    assert (orphan / OWNER).is_file() and (orphan / "pred.npy").is_file()
    alive = OwnedDir("job", parent=str(tmp_path))
    unrelated = tmp_path / "ideabench-job-notours"  # no owner file: not made here
    unrelated.mkdir()
    other = tmp_path / "someone-else"
    other.mkdir()

    assert sweep(str(tmp_path)) == [str(orphan)]
    assert not orphan.exists()
    assert Path(alive.name).is_dir() and unrelated.is_dir() and other.is_dir()
    alive.cleanup()
    assert not Path(alive.name).exists()
    assert sweep(str(tmp_path)) == []


def test_job_dirs_are_owned(tmp_path: Path) -> None:
    from bench.warm import JobDir

    with JobDir() as name:
        assert (Path(name) / OWNER).is_file()
        assert Path(name).name.startswith("ideabench-job-")
        assert name not in sweep()  # held by this process
    assert not Path(name).exists()


NOBODY = 65534


def _as_nobody(function: Callable[[], object]) -> str:
    """``repr`` of what ``function`` returns in a fork of this process run as nobody (the
    interpreter cannot start as nobody here: its prefix is under root's home)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked copy
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write, repr(function()).encode())
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            os.write(write, f"error: {exc!r}".encode())
            os._exit(1)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        out = pipe.read().decode()
    os.waitpid(pid, 0)
    return out


def _hide(root: Path) -> None:
    """What a child run as the worker's user could leave: directories their owner may not
    list, empty or search, each over a MiB deep inside."""
    for name, mode in (("unlistable", 0o300), ("unwritable", 0o500), ("unsearchable", 0o600)):
        (root / name / "deeper").mkdir(parents=True)
        (root / name / "deeper" / "blob").write_bytes(b"x" * (1 << 20))
        (root / name).chmod(mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="makes the tree as another user (CI runs as root)")
def test_a_worker_not_run_as_root_counts_and_removes_what_a_child_hid() -> None:
    """Red team 3: a directory of mode 0o300 hid what was written in it from the quota walk
    (``directory_usage``) and from every removal, for a worker not run as root (root's rights
    hid it from the tests). Run as that user, the walk now says past quota and ``remove_tree``
    removes it all."""
    base = Path(tempfile.mkdtemp(prefix="ideabench-test-hidden-"))
    try:
        base.chmod(0o777)
        assert _as_nobody(lambda: _hide(base)) == "None"
        assert _as_nobody(lambda: directory_usage(base, 1000)) == "(0, 1001)"

        def remove() -> list[str]:
            for name in ("unlistable", "unwritable", "unsearchable"):
                remove_tree(base / name)
            return os.listdir(base)
        assert _as_nobody(remove) == "[]"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_removing_a_tree_changes_no_right_outside_it(tmp_path: Path) -> None:
    """``remove_tree`` of a path that is gone, or of a tree whose removal fails, never gives
    its parent (the worker's temp dir) the owner's rights only."""
    tmp_path.chmod(0o1777)
    remove_tree(tmp_path / "gone")
    remove_tree(tmp_path / "gone" / "deeper")
    assert tmp_path.stat().st_mode & 0o7777 == 0o1777


def _descend(root: Path, names: list[str], payload: bytes = b"") -> None:
    """Directories ``names`` nested below ``root``, made one name at a time (the whole path may
    be longer than PATH_MAX), a file with ``payload`` at the bottom."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            os.mkdir(name, dir_fd=fd)
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        if payload:
            out = os.open("blob", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
            os.write(out, payload)
            os.close(out)
    finally:
        os.close(fd)


def test_a_tree_too_deep_or_too_long_to_name_is_counted_and_removed(tmp_path: Path) -> None:
    """Red team 4: a tree 1,500 directories deep raised RecursionError out of the job's cleanup
    (the job ended internal, its directory and lock kept); 17 names of 250 characters made a
    path past PATH_MAX that the quota walk skipped with all 2.4 GiB under it."""
    deep, long = tmp_path / "deep", tmp_path / "long"
    deep.mkdir()
    long.mkdir()
    _descend(deep, ["d"] * 40, b"x")
    _descend(long, [c * 250 for c in "abcdefghijklmnopq"], b"x" * (1 << 20))
    assert directory_usage(deep, 10_000)[1] == 10_001  # deeper than runner.MAX_DEPTH: past the quota
    used, entries = directory_usage(long, 10_000)
    assert used >= 1 << 20 and entries == 18  # counted, past PATH_MAX
    owned = OwnedDir("job", parent=str(tmp_path))
    _descend(Path(owned.name), ["d"] * 1500, b"x")
    owned.cleanup()  # no RecursionError; the lock dropped
    assert not Path(owned.name).exists() and owned._fd is None
    remove_tree(deep)
    remove_tree(long)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
