"""A stream of ideas through the real engine: how often does an idea that cannot help get
``worked``, how many real gains survive, and what does the confirmation stage cost?

    .venv/bin/python benchmarks/null_stream.py [--nulls 200] [--gains 20] [--epochs 4] [--agents 0]

Every job runs the whole protocol (``bench.judge.judge``: sweep, screening, and the
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

- **agent** (``--agents``, one per seed epoch, issue 25.7): an adaptive agent with only null
  ideas that reads each report the service would show it (the screening's one-sided p) and
  chooses its next submission from them, as an agent hunting a win would: it **probes**
  (``AGENT_PROBES`` init streams), **tunes** (two rounds of ``AGENT_TUNES`` new streams, keeping
  the best p so far), **resubmits** its best file unchanged and with no-op edits (a no-op
  layer, an unused hyperparameter), and **floods** the track with ``AGENT_FLOOD`` new families
  (its best file with 1 to ``AGENT_FLOOD`` idempotent extra ReLUs: the same function, another
  graph). Its figures: the false-``helps`` rate of its jobs, whether its resubmissions drew one
  confirmation, and its discoveries by the service's own rule
  (``app.reports.discoveries.stream_qvalues``: one hypothesis per key and family) beside plain
  BH over its reports.

Jobs are spread over ``--epochs`` seed epochs (another deployment secret each), so that
one epoch's lucky screening seeds do not decide the figures. "Without confirmation" reads
the same jobs' screening verdicts (``idea better (significant)`` = ``helps``): both columns
come from one run. Compute counts training runs actually trained (cache hits excluded) and
wall seconds. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
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


def idea_code(kind: str, k: int, relus: int = 0) -> str:
    """A null idea: the baseline's MLP after ``k`` draws of another init stream; ``kind`` adds a
    no-op layer or an unused hyperparameter; ``relus`` extra ReLUs after the first (idempotent:
    the same function, another graph, hence another family)."""
    hparams = f'HPARAMS = {{"unused": [{k}]}}\n' if kind == "unused_hparam" else ""
    noop = "\n    layers.insert(2, nn.Identity())" if kind == "noop_layer" else ""
    noop += "".join("\n    layers.insert(2, nn.ReLU())" for _ in range(relus))
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
    from bench.report import runs_made

    br = report["bench_report"]
    confirmation = int(br["confirmation"]["n_runs"]) if br["confirmation"] else 0
    return runs_made(br) - int(br["execution"]["baseline_cache_hits"]), confirmation


REPEATS = {"smoke": 1}  # the smoke card's defaults.repeats for this run (--repeats)


def smoke_track() -> Any:
    """The smoke track, its card's ``defaults.repeats`` set by ``--repeats`` (1: the card's own)."""
    from bench.registry import load_track

    track = load_track("smoke")
    if REPEATS["smoke"] == 1:
        return track
    return dataclasses.replace(track, card={**track.card, "defaults": {**track.card["defaults"],
                                                                       "repeats": REPEATS["smoke"]}})


def run_one(kind: str, index: int, epoch: int, code: str | None = None) -> dict[str, Any]:
    """One job through the engine; ``code``: the idea's file (else ``kind``'s null or gain)."""
    from bench.errors import BenchError
    from bench.judge import JudgeRequest, judge
    from bench.seeding import SeedSecret

    secret = SeedSecret(key=hashlib.sha256(f"null-stream epoch {epoch}".encode()).digest(), epoch=epoch)
    gain = kind == "gain"
    request = JudgeRequest(
        track="smoke", idea_code=code or idea_code("init_stream" if gain else kind, index + 1),
        baseline_code=SEVEN_FEATURES if gain else None, seed_secret=secret, job_key=f"{kind}-{index}",
        name=f"{kind}-{index}",
    )
    confirm_started: list[float] = []

    def on_progress(p: Any) -> None:
        if p.stage == "confirmation" and not confirm_started:
            confirm_started.append(time.monotonic())

    started = time.monotonic()
    try:
        report = judge(request, on_progress, keep_warm=True, track=smoke_track()).model_dump(mode="json")
    except BenchError as exc:  # a gain's sandbagged matched baseline: refused (baseline_inferior)
        return {"kind": kind, "epoch": epoch, "refused": exc.code.value, "screened": False,
                "screened_guarded": False, "helps": False, "worked": False, "runs": 0, "confirmation_runs": 0,
                "looks": 0, "seconds": time.monotonic() - started, "confirmation_seconds": 0.0}
    ended = time.monotonic()
    trained, confirmation_runs = runs_trained(report)
    br = report["bench_report"]
    matched = br["screening"]["matched_lr"]
    tests = [br["screening"]["comparison"], *([matched["comparison"]] if matched else [])]
    return {
        "kind": kind, "epoch": epoch,
        # what the agent reads and what the service's accounting keys on
        "p_screening": max(float(t["p_better"]) for t in tests), "p_helps": float(br["p_helps"]),
        "p_confirmation": None if br["confirmation"] is None else float(br["confirmation"]["p_value"]),
        "family": br["capture"]["idea"]["family"],
        # the screening's comparison with the baseline alone (the protocol before the lr guard)
        "screened": br["comparison"]["verdict"] == "idea better (significant)",
        # the screening's verdict: also against the baseline at the idea's lr (it ran the confirmation)
        "screened_guarded": br["confirmation"] is not None,
        "helps": report["practical_verdict"] == "helps", "worked": report["worked"],
        "runs": trained, "confirmation_runs": confirmation_runs,
        "looks": len((br["confirmation"] or {}).get("looks") or []),
        "seconds": ended - started, "confirmation_seconds": ended - confirm_started[0] if confirm_started else 0.0,
    }


AGENT_PROBES = 8  # init streams probed first
AGENT_TUNES = 4  # new init streams per tuning round (two rounds), the best p so far kept
AGENT_RESUBMITS = 4  # the best file resubmitted unchanged (then once with each no-op edit)
AGENT_FLOOD = 8  # new families: the best file with 1 .. AGENT_FLOOD extra ReLUs


def run_agent(epoch: int, first_index: int, log: Any = None) -> list[dict[str, Any]]:
    """An adaptive agent's jobs in one seed epoch: each next file chosen from the reports of the
    earlier ones (the screening's one-sided p, as the service shows it), as described above."""
    rows: list[dict[str, Any]] = []

    def submit(phase: str, k: int, variant: str = "init_stream", relus: int = 0) -> dict[str, Any]:
        row = run_one("agent", first_index + len(rows), epoch, code=idea_code(variant, k, relus))
        row.update(phase=phase, k=k, variant=variant, relus=relus)
        rows.append(row)
        if log is not None:
            log(row)
        return row

    def p_seen(row: dict[str, Any]) -> float:
        return float(row.get("p_screening", 1.0))  # a refused job told the agent nothing good

    best = min((submit("probe", k) for k in range(1, AGENT_PROBES + 1)), key=p_seen)
    k = AGENT_PROBES
    for _ in range(2):
        for _ in range(AGENT_TUNES):
            k += 1
            row = submit("tune", k)
            best = row if p_seen(row) < p_seen(best) else best
    for _ in range(AGENT_RESUBMITS):
        submit("resubmit", best["k"])
    submit("resubmit", best["k"], "noop_layer")
    submit("resubmit", best["k"], "unused_hparam")
    for relus in range(1, AGENT_FLOOD + 1):
        submit("flood", best["k"], relus=relus)
    return rows


def agent_summary(rows: list[dict[str, Any]], everyone: list[dict[str, Any]]) -> dict[str, Any]:
    """The adaptive agents' figures (``rows``): false ``helps``, what resubmitting drew, and
    discoveries in each epoch's stream (``everyone``'s judged canonical nulls: each plain null
    its own key, each agent one key) by the service's rule and by plain BH over reports."""
    from app.reports.discoveries import stream_qvalues
    from bench.stats import bh_qvalues

    judged = [r for r in rows if "p_helps" in r]
    helps = sum(r["helps"] for r in rows)
    # Resubmissions of one file: how many distinct confirmations they drew (1 = re-rolls nothing)
    drawn: dict[tuple[int, int], set[str]] = {}
    for r in judged:
        if r["phase"] in ("resubmit", "tune", "probe") and r["p_confirmation"] is not None:
            drawn.setdefault((r["epoch"], r["k"]), set()).add(f"{r['variant']}:{r['p_confirmation']:.6g}")
    rule_q: list[float] = []
    plain_q: list[float] = []
    for epoch in sorted({r["epoch"] for r in judged}):
        stream = [r for r in everyone if r["epoch"] == epoch and "p_helps" in r and r["kind"] != "gain"]
        mine = [i for i, r in enumerate(stream) if r["kind"] == "agent"]
        by_rule = stream_qvalues([(("agent", r["family"]) if r["kind"] == "agent" else (r["kind"], i), r["p_helps"])
                                  for i, r in enumerate(stream)])
        by_report = bh_qvalues([r["p_helps"] for r in stream])
        rule_q += [by_rule[i] for i in mine]
        plain_q += [by_report[i] for i in mine]
    return {
        "agent_jobs": len(rows), "agent_judged": len(judged),
        "agent_screened": sum(r["screened_guarded"] for r in rows), "agent_helps": helps,
        "agent_false_helps": helps / max(1, len(rows)), "agent_false_helps_ci95": clopper_pearson(helps, len(rows)),
        "agent_by_phase": {phase: {"n": sum(r["phase"] == phase for r in rows),
                                   "screened": sum(r["screened_guarded"] for r in rows if r["phase"] == phase),
                                   "helps": sum(r["helps"] for r in rows if r["phase"] == phase)}
                           for phase in ("probe", "tune", "resubmit", "flood")},
        "agent_families": len({(r["epoch"], r["family"]) for r in judged}),
        "agent_resubmitted_confirmations": {f"epoch {e} k {k}": sorted(v) for (e, k), v in drawn.items()},
        "agent_min_q_by_rule": min(rule_q, default=None), "agent_min_q_plain_bh": min(plain_q, default=None),
        "agent_q_at_most_0.05_by_rule": sum(q <= 0.05 for q in rule_q),
        "agent_q_at_most_0.05_plain_bh": sum(q <= 0.05 for q in plain_q),
        "agent_min_p_screening": min((r["p_screening"] for r in judged), default=None),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Without confirmation: the screening's verdict (against the baseline, and the baseline at
    the idea's lr); with it: ``worked``. ``unguarded``: the screening against the baseline alone."""
    nulls = [r for r in rows if r["kind"] not in ("gain", "agent")]
    gains = [r for r in rows if r["kind"] == "gain"]
    agents = [r for r in rows if r["kind"] == "agent"]
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
        **(agent_summary(agents, rows) if agents else {}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nulls", type=int, default=200)
    parser.add_argument("--gains", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--agents", type=int, default=0, help="adaptive agents, one per epoch in turn")
    parser.add_argument("--rows", help="also write every job's row here (JSON lines)")
    parser.add_argument("--summarize", metavar="ROWS", help="only summarize the rows of an earlier run")
    parser.add_argument("--repeats", type=int, default=1, help="the smoke card's defaults.repeats (runs per test seed)")
    args = parser.parse_args()
    REPEATS["smoke"] = args.repeats
    if args.summarize:
        rows = [json.loads(line) for line in Path(args.summarize).read_text().splitlines() if line.strip()]
        for row in rows:  # rows of a run from before the lr guard have no screened_guarded
            row.setdefault("screened_guarded", row["confirmation_runs"] > 0)
        print(json.dumps(summarize(rows)))
        return 0
    from bench import options as engine_options

    engine_options.configure(dataclasses.replace(
        engine_options.current(), engine=dataclasses.replace(
            engine_options.current().engine, cache_dir=Path(tempfile.mkdtemp(prefix="ideabench-null-stream-")))))
    jobs = [(NULL_KINDS[i % len(NULL_KINDS)], i) for i in range(args.nulls)]
    jobs += [("gain", i) for i in range(args.gains)]
    jobs.sort(key=lambda job: job[1] % args.epochs)  # one epoch after another: its cache stays warm
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    per_agent = AGENT_PROBES + 2 * AGENT_TUNES + AGENT_RESUBMITS + 2 + AGENT_FLOOD
    total = len(jobs) + args.agents * per_agent

    def log(row: dict[str, Any]) -> None:
        rows.append(row)
        if args.rows:
            with open(args.rows, "a") as fh:
                fh.write(json.dumps(row) + "\n")
        flag = "WORKED" if row["worked"] else ("screened" if row["screened"] else "")
        label = row["kind"] if row["kind"] != "agent" else f"agent:{row['phase']}"
        print(f"[{len(rows):>3}/{total}] {label:<14} epoch {row['epoch']} {row['runs']:>3} runs "
              f"{row['seconds']:5.1f}s {flag}  ({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)

    for kind, index in jobs:
        log(run_one(kind, index, epoch=1 + index % args.epochs))
    for agent in range(args.agents):  # after the plain jobs: an agent sees a stream already judged
        run_agent(epoch=1 + agent % args.epochs, first_index=agent * per_agent, log=log)
    result = summarize(rows)
    for key, value in result.items():
        if key not in ("by_kind", "agent_by_phase", "agent_resubmitted_confirmations"):
            print(f"{key:<45} {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
