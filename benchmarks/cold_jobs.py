"""Cold jobs of two checkouts, alternating: wall seconds and the machine's busy CPU-seconds.

    .venv/bin/python benchmarks/cold_jobs.py OTHER_CHECKOUT [--rounds 6] [--only smoke_example,...]

Each round runs ``scripts/golden_reports.py`` in this checkout and in ``OTHER_CHECKOUT`` (a
``git worktree`` of an earlier commit, say), one after the other, with the same cases: one
process judging them in turn, every child started cold. CPU is the machine's busy time from
``/proc/stat`` over the run, so run it alone (children run in their own cgroups, which a
process's own rusage does not always see). It prints each run, the means and this checkout's
ratios to the other's: the figures docs/performance.md quotes for a change to what a job starts.
This checkout's reports are compared with the other's (``golden_reports.py --compare``): they
should be identical for a change of cost alone.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CASES = "smoke_example,tabular_example,correlated_tokens_example"


def busy_ticks() -> int:
    """Busy clock ticks of the whole machine so far (user + nice + system + irq + softirq + steal)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return user + nice + system + irq + softirq + steal


def run(checkout: Path, out: Path, only: str, compare: Path | None) -> tuple[float, float, bool]:
    """(wall s, busy CPU-s, identical to ``compare``'s reports) of one golden run of ``checkout``."""
    ticks_per_s = 100  # USER_HZ on Linux
    before, started = busy_ticks(), time.monotonic()
    done = subprocess.run([sys.executable, "scripts/golden_reports.py", str(out), "--only", only,
                           *(["--compare", str(compare)] if compare else [])], cwd=checkout, stdout=subprocess.PIPE,
                          text=True)
    wall, cpu = time.monotonic() - started, (busy_ticks() - before) / ticks_per_s
    if done.returncode != 0 and (compare is None or "DIFFERS" not in done.stdout):  # 1 with --compare: differs
        raise SystemExit(f"{checkout}: golden_reports.py failed:\n{done.stdout}")
    return wall, cpu, done.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="another checkout of ideabench (e.g. a git worktree)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--only", default=CASES, help="golden cases (scripts/golden_reports.py)")
    args = parser.parse_args()
    checkouts = {"other": args.other.resolve(), "this": HERE}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in checkouts}
    same = True
    with tempfile.TemporaryDirectory(prefix="cold-jobs-") as tmp:
        for round_ in range(args.rounds):
            for name, checkout in checkouts.items():
                compare = Path(tmp) / "other" if name == "this" else None
                wall, cpu, identical = run(checkout, Path(tmp) / name, args.only, compare)
                same = same and identical
                figures[name].append((wall, cpu))
                print(f"round {round_ + 1} {name}: wall {wall:.2f} s, busy {cpu:.2f} CPU-s", flush=True)
    means = {name: (statistics.mean(w for w, _ in runs), statistics.mean(c for _, c in runs))
             for name, runs in figures.items()}
    for name, (wall, cpu) in means.items():
        print(f"{name}: mean wall {wall:.2f} s, mean busy {cpu:.2f} CPU-s")
    print(f"this / other: wall {means['this'][0] / means['other'][0]:.3f}, "
          f"CPU {means['this'][1] / means['other'][1]:.3f}; reports identical: {same}")


if __name__ == "__main__":
    main()
