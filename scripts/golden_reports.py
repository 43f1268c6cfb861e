"""Golden reports for a refactor of the engine (issue 26): judge a fixed set of ideas under one
fixed, public seed secret and job key, and write each report without what legitimately differs
between two runs (wall times, seconds, versions, cache counts), so that the reports of two
commits can be compared field by field.

    python scripts/golden_reports.py OUT_DIR [--only smoke,tabular]
    python scripts/golden_reports.py OUT_DIR --compare OTHER_DIR

The first writes ``OUT_DIR/<case>.json``; the second also compares them with ``OTHER_DIR``'s
and exits 1 at the first difference, naming its path in the report. Every verdict, p-value, CI,
per-seed value, sweep table and seed must be identical (bit for bit: the engine is
deterministic on a fixed secret and key on one machine). One exception: the values of a
mechanism the idea measures with its own ``measure()`` may differ in the last bits from run to
run (tabular's example fits least squares, whose LAPACK call is not bit-reproducible), so
those compare to a relative 1e-12.

The cases cover the protocol's paths: a screened win that the confirmation replicates (with its
second look when the first is close), a matched baseline, a declared mechanism, and a track
example per built-in track that trains in under a minute here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.judge import JudgeRequest, judge  # noqa: E402
from bench.seeding import public_secret  # noqa: E402

MLP = """
from torch import nn


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1))
"""
LINEAR = """
from torch import nn


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["n_features"], 35), nn.Linear(35, 1))
"""
CHECKED = {"n_params": 351, "n_buffers": 0, "flops": 702.0, "n_tensors": 4}


def _example(track: str) -> str:
    return (ROOT / "tracks" / track / "example_idea.py").read_text()


def cases() -> dict[str, JudgeRequest]:
    return {
        "smoke_example": JudgeRequest(track="smoke", idea_code=_example("smoke")),
        # (the linear baseline is weaker than the track's: its check against the canonical
        # baseline is skipped with the canonical counts given, as tests/bench/test_confirmation.py does)
        "smoke_confirmed": JudgeRequest(track="smoke", idea_code=MLP, baseline_code=LINEAR, n_seeds=7,
                                        canonical=CHECKED),
        "smoke_null_matched": JudgeRequest(track="smoke", idea_code=MLP, baseline_code=MLP, canonical=CHECKED),
        "tabular_example": JudgeRequest(track="tabular", idea_code=_example("tabular")),
        "correlated_tokens_example": JudgeRequest(track="correlated_tokens", idea_code=_example("correlated_tokens")),
        # (attention: the children's kernel settings show here)
        "sequence_example": JudgeRequest(track="sequence", idea_code=_example("sequence")),
        "dynamics_example": JudgeRequest(track="dynamics", idea_code=_example("dynamics")),
        "vision_example": JudgeRequest(track="vision", idea_code=_example("vision")),
        "correlated_tokens_set_model": JudgeRequest(
            track="correlated_tokens", idea_code=(ROOT / "examples/ideas/set_model_correlated_tokens.py").read_text()),
    }


# Fields that measure the machine, not the protocol.
VOLATILE = {"wall_time_s", "seconds", "versions", "execution", "total", "run_s", "baseline_cache",
            "baseline_cache_hits", "baseline_cache_misses", "elapsed_s"}


def scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'the first' if key in a else 'the second'}"
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(a, float) and ".mechanism_signature." in path and math.isclose(a, b, rel_tol=1e-12):
        return None  # an idea's own measure() (self_measured) may round differently run to run
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--compare", type=Path, default=None)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = [c for c in args.only.split(",") if c]
    failed = 0
    for name, request in cases().items():
        if wanted and name not in wanted:
            continue
        request.seed_secret = public_secret(epoch=1)
        request.job_key = f"golden_{name}"
        report = scrub(judge(request).model_dump(mode="json"))
        (args.out / f"{name}.json").write_text(json.dumps(report, indent=1, sort_keys=True))
        line = f"{name}: {report['system_verdict']}/{report['practical_verdict']}"
        if args.compare is not None:
            other = json.loads((args.compare / f"{name}.json").read_text())
            diff = first_difference(report, other)
            line += " identical" if diff is None else f" DIFFERS at {diff}"
            failed += diff is not None
        print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
