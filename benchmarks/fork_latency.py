"""Fork -> ready latency of children forked from the process's fork server (``bench.warm.lend``).

Forks ``--children`` children one after another from one lent server (``sandbox.launch(...,
server=...)``), times each from the request to the child's first line on its protocol pipe
(``ready``), and prints the median, mean and max of all but the first (the first waits for the
server's own start: ``import torch`` and the exporter's warm-up, printed apart). Compare two trees
by running it from each (``PYTHONPATH=TREE python TREE/benchmarks/fork_latency.py``), alternating.
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import time
from pathlib import Path

from bench import sandbox, warm


def _wait_ready(fd: int, timeout_s: float = 120.0) -> None:
    data = b""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in data:
        readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            raise TimeoutError("the child did not answer ready")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError("the child closed its pipe before ready")
        data += chunk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=20)
    args = parser.parse_args()
    limits = sandbox.Limits()
    slot = warm.lend(limits)
    if slot is None or slot.server is None:
        raise SystemExit("no fork server on this host (bench.sandbox.forkserver.available)")
    times = []
    try:
        for i in range(args.children):
            began = time.perf_counter()
            proc, fd = sandbox.launch(Path(slot.tmp.name) / f"child{i}", limits, server=slot.server)
            try:
                _wait_ready(fd)
                times.append(time.perf_counter() - began)
            finally:
                sandbox.kill(proc)
                os.close(fd)
    finally:
        slot.tmp.cleanup()
        warm.give_back(slot)
        warm.discard()
    rest = [t * 1000 for t in times[1:]]
    print(f"first (with the server's start) {times[0] * 1000:.0f} ms; the next {len(rest)}: median "
          f"{statistics.median(rest):.1f} ms, mean {statistics.mean(rest):.1f}, max {max(rest):.1f}")


if __name__ == "__main__":
    main()
