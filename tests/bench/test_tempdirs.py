"""Directories a killed worker left behind are removed by the next one, and only those."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.tempdirs import OWNER, OwnedDir, sweep

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
