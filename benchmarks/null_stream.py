"""A stream of ideas through the real engine: how often does an idea that cannot help get
``worked``, how many real gains survive, and what does the confirmation stage cost?

    .venv/bin/python benchmarks/null_stream.py [--nulls 200] [--gains 20] [--epochs 4]

Every job runs the whole protocol (``bench.protocol.judge``: sweep, screening, and the
confirmation stage when the screening finds a win) on the smoke track, one after another
on warm children, with a fresh baseline cache. Ideas:

- **null** (``--nulls``, three kinds in turn), each against the track's own baseline: the
  baseline's architecture with another init stream (the file draws ``k`` numbers before
  building), the same plus a no-op layer, the same plus an irrelevant hyperparameter.
  None can help in expectation; within a seed epoch they share the screening's seeds
  and the cached baseline, as an agent's re-rolls do.
- **gain** (``--gains``): the baseline's architecture (another init stream) against a
  matched baseline that sees only 7 of the 8 input features: a real gain by construction.
  Since a matched baseline is judged first against the track's own (issue 25.5), this one is
  a sandbagged baseline and its jobs end ``baseline_inferior``: the gains arm now counts those
  refusals (``gains_refused``); a gain by construction against the canonical baseline that
  reaches the smallest effect is still to be built.

Jobs are spread over ``--epochs`` seed epochs (another deployment secret each), so that
one epoch's lucky screening seeds do not decide the figures. "Without confirmation" reads
the same jobs' screening verdicts (``idea better (significant)`` = ``helps``): both columns
come from one run. Compute counts training runs actually trained (cache hits excluded) and
wall seconds. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NULL_KINDS = ("init_stream", "noop_layer", "unused_hparam")

MLP = '''
import torch
from torch import nn
{hparams}

def build_model(spec):
    torch.randn({k})  # another init stream: the same architecture, other initial weights
    layers = [nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1)]{noop}
    return nn.Sequential(*layers)
'''
SEVEN_FEATURES = '''
from torch import nn


class SevenOfEight(nn.Module):
    """The baseline's MLP seeing only the first 7 of the 8 features (325 parameters)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(7, 36), nn.ReLU(), nn.Linear(36, 1))

    def forward(self, x):
        return self.body(x[:, :7])


def build_model(spec):
    return SevenOfEight()
'''


def idea_code(kind: str, k: int) -> str:
    hparams = f'HPARAMS = {{"unused": [{k}]}}\n' if kind == "unused_hparam" else ""
    noop = "\n    layers.insert(2, nn.Identity())" if kind == "noop_layer" else ""
    return MLP.format(hparams=hparams, k=k, noop=noop)


def clopper_pearson(hits: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact binomial confidence interval of ``hits / n``."""
    from scipy.stats import beta

    if n == 0:
        return 0.0, 1.0
    alpha = 1.0 - level
    low = 0.0 if hits == 0 else float(beta.ppf(alpha / 2, hits, n - hits + 1))
    high = 1.0 if hits == n else float(beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return low, high


def runs_trained(report: dict[str, Any]) -> tuple[int, int]:
    """(all runs trained, of them the confirmation's) of one report (cache hits excluded)."""
    br = report["bench_report"]
    sweep = sum(len(row["per_seed"]) for arm in ("baseline", "idea") for row in br[arm]["sweep"])
    screening = sum(len(values) for values in br["screening"]["per_seed"].values())  # (matched included)
    confirmation = int(br["confirmation"]["n_runs"]) if br["confirmation"] else 0
    total = sweep + screening + confirmation
    return total - int(br["execution"]["baseline_cache_hits"]), confirmation


def run_one(kind: str, index: int, epoch: int) -> dict[str, Any]:
    from bench.errors import BenchError
    from bench.protocol import JudgeRequest, judge
    from bench.seeding import SeedSecret

    secret = SeedSecret(key=hashlib.sha256(f"null-stream epoch {epoch}".encode()).digest(), epoch=epoch)
    gain = kind == "gain"
    request = JudgeRequest(
        track="smoke", idea_code=idea_code("init_stream" if gain else kind, index + 1),
        baseline_code=SEVEN_FEATURES if gain else None, seed_secret=secret, job_key=f"{kind}-{index}",
        name=f"{kind}-{index}",
    )
    confirm_started: list[float] = []

    def on_progress(p: Any) -> None:
        if p.stage == "confirmation" and not confirm_started:
            confirm_started.append(time.monotonic())

    started = time.monotonic()
    try:
        report = judge(request, on_progress, keep_warm=True)
    except BenchError as exc:  # a gain's sandbagged matched baseline: refused (baseline_inferior)
        return {"kind": kind, "epoch": epoch, "refused": exc.code.value, "screened": False,
                "screened_guarded": False, "helps": False, "worked": False, "runs": 0, "confirmation_runs": 0,
                "looks": 0, "seconds": time.monotonic() - started, "confirmation_seconds": 0.0}
    ended = time.monotonic()
    trained, confirmation_runs = runs_trained(report)
    br = report["bench_report"]
    return {
        "kind": kind, "epoch": epoch,
        # the screening's comparison with the baseline alone (the protocol before the lr guard)
        "screened": br["comparison"]["verdict"] == "idea better (significant)",
        # the screening's verdict: also against the baseline at the idea's lr (it ran the confirmation)
        "screened_guarded": br["confirmation"] is not None,
        "helps": report["practical_verdict"] == "helps", "worked": report["worked"],
        "runs": trained, "confirmation_runs": confirmation_runs,
        "looks": len((br["confirmation"] or {}).get("looks") or []),
        "seconds": ended - started, "confirmation_seconds": ended - confirm_started[0] if confirm_started else 0.0,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Without confirmation: the screening's verdict (against the baseline, and the baseline at
    the idea's lr); with it: ``worked``. ``unguarded``: the screening against the baseline alone."""
    nulls = [r for r in rows if r["kind"] != "gain"]
    gains = [r for r in rows if r["kind"] == "gain"]
    unguarded_nulls = sum(r["screened"] for r in nulls)
    screened_nulls = sum(r["screened_guarded"] for r in nulls)
    worked_nulls = sum(r["worked"] for r in nulls)
    screened_gains = [r for r in gains if r["screened_guarded"]]
    kept = sum(r["worked"] for r in screened_gains)
    runs = sum(r["runs"] for r in rows)
    screening_runs = runs - sum(r["confirmation_runs"] for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    screening_seconds = seconds - sum(r["confirmation_seconds"] for r in rows)
    return {
        "benchmark": "null_stream", "track": "smoke", "jobs": len(rows),
        "epochs": len({r["epoch"] for r in rows}),
        "nulls": len(nulls), "gains": len(gains),
        "null_false_worked_without_confirmation": screened_nulls / max(1, len(nulls)),
        "null_false_worked_without_confirmation_ci95": clopper_pearson(screened_nulls, len(nulls)),
        "null_false_worked": worked_nulls / max(1, len(nulls)),
        "null_false_worked_ci95": clopper_pearson(worked_nulls, len(nulls)),
        "null_screened": screened_nulls, "null_worked": worked_nulls,
        "null_screened_unguarded": unguarded_nulls,
        "null_false_worked_unguarded_ci95": clopper_pearson(unguarded_nulls, len(nulls)),
        "gains_screened": len(screened_gains), "gains_kept": kept,
        "gains_refused": sum(1 for r in gains if r.get("refused")),
        "second_looks": {"nulls": sum(r.get("looks", 0) == 2 for r in nulls),
                         "gains": sum(r.get("looks", 0) == 2 for r in gains)},
        "gains_kept_share": kept / len(screened_gains) if screened_gains else None,
        "runs_screening_only": screening_runs, "runs_with_confirmation": runs,
        "runs_ratio": runs / max(1, screening_runs),
        "seconds_screening_only": round(screening_seconds, 1), "seconds_with_confirmation": round(seconds, 1),
        "seconds_ratio": seconds / max(1e-9, screening_seconds),
        "by_kind": {kind: {"n": sum(r["kind"] == kind for r in rows),
                           "screened_unguarded": sum(r["screened"] for r in rows if r["kind"] == kind),
                           "screened": sum(r["screened_guarded"] for r in rows if r["kind"] == kind),
                           "worked": sum(r["worked"] for r in rows if r["kind"] == kind)}
                    for kind in (*NULL_KINDS, "gain")},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nulls", type=int, default=200)
    parser.add_argument("--gains", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--rows", help="also write every job's row here (JSON lines)")
    parser.add_argument("--summarize", metavar="ROWS", help="only summarize the rows of an earlier run")
    args = parser.parse_args()
    if args.summarize:
        rows = [json.loads(line) for line in Path(args.summarize).read_text().splitlines() if line.strip()]
        for row in rows:  # rows of a run from before the lr guard have no screened_guarded
            row.setdefault("screened_guarded", row["confirmation_runs"] > 0)
        print(json.dumps(summarize(rows)))
        return 0
    os.environ["IDEABENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="ideabench-null-stream-")
    jobs = [(NULL_KINDS[i % len(NULL_KINDS)], i) for i in range(args.nulls)]
    jobs += [("gain", i) for i in range(args.gains)]
    jobs.sort(key=lambda job: job[1] % args.epochs)  # one epoch after another: its cache stays warm
    rows = []
    started = time.monotonic()
    for n, (kind, index) in enumerate(jobs, 1):
        row = run_one(kind, index, epoch=1 + index % args.epochs)
        rows.append(row)
        if args.rows:
            with open(args.rows, "a") as fh:
                fh.write(json.dumps(row) + "\n")
        flag = "WORKED" if row["worked"] else ("screened" if row["screened"] else "")
        print(f"[{n:>3}/{len(jobs)}] {kind:<13} epoch {row['epoch']} {row['runs']:>3} runs "
              f"{row['seconds']:5.1f}s {flag}  ({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)
    result = summarize(rows)
    for key, value in result.items():
        if key != "by_kind":
            print(f"{key:<45} {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
