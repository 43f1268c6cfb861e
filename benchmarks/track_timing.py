"""What one job costs on each built-in track, on this machine: the figures a track card's
``timing`` holds, from which the API estimates a job before the track has any history.

    .venv/bin/python benchmarks/track_timing.py [--tracks smoke,tabular] [--write]

For each track, its example idea is judged cold, as a worker's first job on the track would be:
a fresh baseline cache, no warm children. ``fixed_s`` is what a job spends before it trains
(children started, both arms captured and checked: ``bench.judge.check``, after one
throwaway check has paid the parent's imports, as a worker does once), ``run_s`` the rest of
the job's seconds over the training runs it made (sweep, screening, and the confirmation when
it ran). ``--write`` stores both in each track's ``card.json`` with the date
and the machine. Tracks whose data is absent (cifar10 without IDEABENCH_CIFAR10_DIR) are
skipped. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def runs_made(report: dict[str, Any]) -> int:
    """Training runs a report's job made: sweep, screening and confirmation, both arms."""
    from bench.report import runs_made as made

    return made(report["bench_report"])


def measure(track: str) -> dict[str, Any]:
    from bench.judge import JudgeRequest, check, judge

    idea = (ROOT / "tracks" / track / "example_idea.py").read_text()
    request = JudgeRequest(track=track, idea_code=idea, name=f"{track} example (timing)")
    started = time.monotonic()
    check(request)
    fixed_s = time.monotonic() - started
    started = time.monotonic()
    report = judge(request).model_dump(mode="json")
    total_s = time.monotonic() - started
    runs = runs_made(report)
    return {"track": track, "fixed_s": round(fixed_s, 1), "run_s": round(max(0.0, total_s - fixed_s) / runs, 3),
            "runs": runs, "job_s": round(total_s, 1),
            "verdict": f"{report['system_verdict']}/{report['practical_verdict']}"}


def write(track: str, figures: dict[str, Any], machine: str) -> None:
    path = ROOT / "tracks" / track / "card.json"
    card = json.loads(path.read_text())
    card["timing"] = {"fixed_s": figures["fixed_s"], "run_s": figures["run_s"],
                      "measured": f"{dt.date.today().isoformat()}, {machine}, benchmarks/track_timing.py"}
    path.write_text(json.dumps(card, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracks", default="smoke,tabular,correlated_tokens,dynamics,sequence,vision,cifar10")
    parser.add_argument("--write", action="store_true", help="store the figures in each track's card.json")
    args = parser.parse_args()
    from bench import options as engine_options

    engine_options.configure(dataclasses.replace(
        engine_options.current(), engine=dataclasses.replace(
            engine_options.current().engine, cache_dir=Path(tempfile.mkdtemp(prefix="ideabench-track-timing-")))))
    from bench.catalog import unavailable_reason

    machine = f"{os.cpu_count()}-core {platform.machine()} CPU"
    # A worker imports the engine once, at start: a throwaway check pays that here, not the first track.
    from bench.judge import JudgeRequest, check
    check(JudgeRequest(track="smoke", idea_code=(ROOT / "tracks" / "smoke" / "example_idea.py").read_text()))
    rows = []
    for track in args.tracks.split(","):
        why = unavailable_reason(json.loads((ROOT / "tracks" / track / "card.json").read_text()), os.environ)
        if why is not None:  # its data is absent here (cifar10 without IDEABENCH_CIFAR10_DIR): say so, go on
            print(f"{track:<18} skipped: {why}", file=sys.stderr)
            continue
        row = measure(track)
        rows.append(row)
        print(f"{track:<18} fixed {row['fixed_s']:6.1f} s  {row['runs']:4d} runs x {row['run_s']:6.3f} s  "
              f"job {row['job_s']:6.1f} s  {row['verdict']}", file=sys.stderr, flush=True)
        if args.write:
            write(track, row, machine)
    print(json.dumps({"benchmark": "track_timing", "machine": machine, "tracks": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
