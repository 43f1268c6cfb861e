"""Fixed cost of the sandbox per child: a sandboxed child vs a plain one, both importing torch.

Each start launches ``bench.child`` (which imports torch and answers ``ready``)
and times launch -> ready, then the teardown (exit command + kill, cgroup
removal); and, separately, the start of a bare interpreter (``startup``: the
sandbox's own part, free of torch's import noise). Modes:

- ``plain``: ``python -m bench.child`` in its own session, nothing else (the
  engine before the sandbox);
- ``no_bwrap``: the sandbox without bubblewrap (cgroups, rlimits, seccomp);
- ``sandbox``: every layer this host has (bubblewrap, cgroups, rlimits, seccomp).

Usage: ``.venv/bin/python benchmarks/sandbox_cost.py [--repeats 5] [--json]``.
The modes run interleaved so slow drifts of the machine hit all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import sandbox

REPO = Path(__file__).resolve().parent.parent


def _wait_ready(fd: int, timeout_s: float = 120.0) -> None:
    data = b""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in data:
        if time.monotonic() > deadline:
            raise TimeoutError("child did not answer ready")
        readable, _, _ = select.select([fd], [], [], 0.5)
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("child died before ready")
            data += chunk
    message = json.loads(data.split(b"\n", 1)[0])
    if not message.get("ready"):
        raise RuntimeError(f"child failed: {message}")


def _plain(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    read_fd, write_fd = os.pipe()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HOME": str(workdir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.child", str(write_fd)], cwd=workdir, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        pass_fds=(write_fd,), start_new_session=True,
    )
    os.close(write_fd)
    return proc, read_fd


def _launch(mode: str, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``sandbox.launch`` with bubblewrap switched off for mode ``no_bwrap`` (a weak sandbox,
    allowed for the measurement only)."""
    previous = sandbox.policy()
    if mode == "no_bwrap":
        sandbox.configure(sandbox.SandboxPolicy(bwrap="0", allow_weak=True))
    try:
        return sandbox.launch(workdir, sandbox.Limits())
    finally:
        sandbox.configure(previous)


def _one(mode: str, root: Path) -> tuple[float, float]:
    """(launch -> ready seconds, teardown seconds) of one child."""
    workdir = root / mode / "idea"
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if mode == "plain":
        proc, fd = _plain(workdir)
    else:
        proc, fd = _launch(mode, workdir)
    _wait_ready(fd)
    ready = time.perf_counter() - started
    started = time.perf_counter()
    assert proc.stdin is not None
    proc.stdin.write(b'{"op": "exit"}\n')
    proc.stdin.close()
    proc.wait(timeout=30)
    sandbox.kill(proc)
    os.close(fd)
    return ready, time.perf_counter() - started


def _startup(mode: str, root: Path) -> float:
    """Seconds until a bare interpreter has started: the sandbox's part without torch.

    ``plain``: ``python -c "import bench.sandbox"`` to completion (the bootstrap's
    own imports, no layers); otherwise: until ``launch``
    returns, i.e. the bootstrap ran inside the sandbox (Python started,
    no_new_privs and seccomp installed) and reported its layers.
    """
    started = time.perf_counter()
    if mode == "plain":
        env = {"PYTHONPATH": str(REPO)}
        subprocess.run([sys.executable, "-c", "import bench.sandbox"], check=True, env=env)
        return time.perf_counter() - started
    workdir = root / f"startup-{mode}" / "idea"
    proc, fd = _launch(mode, workdir)
    elapsed = time.perf_counter() - started
    sandbox.kill(proc)
    os.close(fd)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    modes = ["plain", "no_bwrap", "sandbox"]
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="ideabench-cost-") as tmp:
        for mode in modes:  # warm the page cache once per mode
            _one(mode, Path(tmp))
        for _ in range(args.repeats):
            for mode in modes:
                times[mode].append(_one(mode, Path(tmp)))
        startup: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(3 * args.repeats):
            for mode in modes:
                startup[mode].append(_startup(mode, Path(tmp)))
    blocks: dict[str, dict[str, float]] = {
        m: {
            "ready_median_s": round(statistics.median(t[0] for t in times[m]), 3),
            "ready_min_s": round(min(t[0] for t in times[m]), 3),
            "teardown_median_s": round(statistics.median(t[1] for t in times[m]), 3),
            "startup_median_s": round(statistics.median(startup[m]), 3),
        }
        for m in modes
    }
    for block in blocks.values():
        block["overhead_vs_plain_s"] = round(block["ready_median_s"] - blocks["plain"]["ready_median_s"], 3)
    layers = sandbox.isolation_layers()
    if args.json:
        print(json.dumps({"repeats": args.repeats, "layers": layers, "modes": blocks}, indent=2))
        return
    print(f"layers (sandbox mode): {', '.join(layers)}; {args.repeats} starts per mode")
    print(f"{'mode':<10} {'ready median':>13} {'ready min':>10} {'overhead':>9} {'teardown':>9} {'startup':>8}")
    for m, b in blocks.items():
        print(f"{m:<10} {b['ready_median_s']:>12.3f}s {b['ready_min_s']:>9.3f}s "
              f"{b['overhead_vs_plain_s']:>+8.3f}s {b['teardown_median_s']:>8.3f}s {b['startup_median_s']:>7.3f}s")

if __name__ == "__main__":
    main()
