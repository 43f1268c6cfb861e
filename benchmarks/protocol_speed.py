"""Protocol speed: the engine against a plain sequential reference loop, per built-in track.

For each track this runs the track's full default protocol (example idea vs the
canonical baseline: union-grid sweep on the sweep seeds with one edge extension,
best config on the fresh final seeds, the mechanism measurement) twice, in this
one process and invocation:

* **engine**: ``bench.protocol.judge`` (sandboxed children, both arms at once,
  vectorized runs where the models batch) with a fresh, empty baseline cache
  directory, so the baseline arm is a cache miss and is trained;
* **reference**: the same protocol as a hand-run bench does it: one model at a
  time in this process (one torch thread), ``bench.trainer.train`` per run.

It prints a table (seconds, speedup, agreement of the final test metric) and, as
its last line, one JSON object ``{track: speedup}``.

    .venv/bin/python benchmarks/protocol_speed.py [--tracks smoke dynamics] [--cold]

By default the engine runs as a worker judging a stream of jobs does: each job
adopts sandboxed children started (torch imported, first-use work done) after the
previous job (``bench.warm``), and starts the next job's before it returns; that
start is inside the engine's time. ``--cold`` starts each job's children with it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUILT_IN = ("smoke", "tabular", "correlated_tokens", "dynamics", "sequence", "vision")
JOB_KEY = "protocol-speed"  # both sides draw the same screening seeds (the engine's confirmation
# seeds are its models' key's, so the reference's confirmation, when one runs, is on others)


def available(names: list[str]) -> list[str]:
    """The tracks of ``names`` whose implementation loads here."""
    from bench.registry import load_track

    found = []
    for name in names:
        try:
            load_track(name)
        except Exception as exc:  # noqa: BLE001 - a missing track is skipped, with a note
            print(f"# {name}: not available ({type(exc).__name__}: {str(exc)[:120]})", file=sys.stderr)
            continue
        found.append(name)
    return found


def _forget_data() -> None:
    """Drop this process's cached splits: each side makes its own data, as a fresh run would."""
    from bench import data

    with data._cache_lock:
        data._cache.clear()


def run_engine(track: str, idea: str, warm: bool) -> tuple[float, dict[str, Any]]:
    """``judge`` with a fresh cache directory (a baseline cache miss); seconds and bench_report.

    ``warm``: as a worker judges a stream of jobs (``keep_warm``): this job adopts the
    children started after the previous one, and starts the next job's before it returns.
    """
    from bench.protocol import JudgeRequest, judge
    from bench.seeding import public_secret

    _forget_data()

    with tempfile.TemporaryDirectory(prefix="ideabench-speed-cache-") as cache:
        os.environ["IDEABENCH_CACHE_DIR"] = cache
        start = time.perf_counter()
        request = JudgeRequest(track=track, idea_code=idea, timeout_s=3600.0, seed_secret=public_secret(),
                               job_key=JOB_KEY)
        report = judge(request, keep_warm=warm)
        seconds = time.perf_counter() - start
    return seconds, report["bench_report"]


def run_reference(track_name: str, idea: str) -> tuple[float, dict[str, Any]]:
    """The protocol one model at a time, in this process: seconds and per-arm results."""
    import numpy as np
    import torch

    from bench.contract import check_hparams
    from bench.data import splits_for
    from bench.metrics import score
    from bench.protocol import _grid, diverged_score, fill_diverged
    from bench.registry import load_track
    from bench.seeding import (
        confirmation_seeds,
        public_secret,
        run_seeds,
        screening_seeds,
        sweep_seeds,
        task_seed,
    )
    from bench.stats import ALPHA, CONFIRMATION_LOOKS, VERDICT_BETTER, confirmation_continues
    from bench.stats import compare as paired
    from bench.trainer import RunConfig, build_checked, train

    torch.set_num_threads(1)
    _forget_data()
    start = time.perf_counter()
    track = load_track(track_name)
    card = track.card
    defaults = card["defaults"]
    metric, loss = card["metric"]["name"], card["metric"]["loss"]
    sign = 1.0 if card["metric"]["direction"] == "lower" else -1.0
    ceiling = float(card.get("divergence_ceiling", 1e6))
    secret = public_secret()
    task = task_seed(track.name, secret)
    module = types.ModuleType("reference_idea")
    exec(compile(idea, "idea.py", "exec"), module.__dict__)
    builders = {"baseline": track.build_baseline, "idea": module.build_model}
    max_configs = int(card.get("max_configs", 12))
    grids = {
        "baseline": [{}],
        "idea": _grid(check_hparams(getattr(module, "HPARAMS", {}) or {}, max_configs=max_configs)),
    }

    def run(arm: str, lr: float, hp: dict[str, Any], seed: int, split: str) -> tuple[float, Any]:
        seeds = run_seeds(seed, secret, JOB_KEY, track=track.name)
        splits, _ = splits_for(track, seeds.split, task)
        spec = dict(track.spec, hparams=dict(hp))
        model = build_checked(builders[arm], spec, init_seed=seeds.init, param_cap=int(card["param_cap"]),
                              device=torch.device("cpu"), role=arm)
        cfg = RunConfig(lr=lr, epochs=int(defaults["epochs"]), batch_size=int(defaults["batch_size"]),
                        weight_decay=float(defaults.get("weight_decay", 0.0)), loss=loss)
        x_eval, y_eval = (splits.x_val, splits.y_val) if split == "val" else (splits.x_test, splits.y_test)
        result = train(model, cfg, splits.x_train, splits.y_train, x_eval, order_seed=seeds.order)
        value = score(metric, result.predictions.numpy(), y_eval.numpy())
        if result.diverged or not math.isfinite(value):
            value = math.nan
        return value, result.model

    sweep: dict[str, dict[tuple[float, str], list[float]]] = {"baseline": {}, "idea": {}}

    def do_sweep(lrs: list[float]) -> None:
        for seed in sweep_seeds(int(defaults["sweep_seeds"])):
            for arm in ("baseline", "idea"):
                for lr in lrs:
                    for hp in grids[arm]:
                        value, _ = run(arm, lr, hp, seed, "val")
                        sweep[arm].setdefault((lr, json.dumps(hp, sort_keys=True)), []).append(value)

    def best(arm: str) -> tuple[float, dict[str, Any]]:
        rows = sweep[arm]
        every = [v for arm_rows in sweep.values() for vals in arm_rows.values() for v in vals]
        flat = fill_diverged([v for vals in rows.values() for v in vals],
                             diverged_score(every, ceiling, sign > 0))
        means, i = {}, 0
        for key, vals in rows.items():
            means[key] = float(np.mean(flat[i : i + len(vals)]))
            i += len(vals)
        ordered = sorted(means, key=lambda k: (k[0], k[1]))
        key = min(ordered, key=lambda k: sign * means[k])
        return key[0], json.loads(key[1])

    lrs = sorted(float(v) for v in defaults["lr_grid"])
    do_sweep(lrs)
    extra = []
    bests = [best(arm)[0] for arm in ("baseline", "idea")]
    if lrs[0] in bests:
        extra.append(lrs[0] / 2)
    if lrs[-1] in bests:
        extra.append(lrs[-1] * 2)
    if extra:
        do_sweep(extra)
    out: dict[str, Any] = {}
    measure = getattr(module, "measure", None) if getattr(module, "MECHANISM", None) else None
    for arm in ("baseline", "idea"):
        lr, hp = best(arm)
        values, measured = [], []
        for seed in screening_seeds(int(defaults["n_seeds"]), secret, JOB_KEY):  # the engine's draw
            value, model = run(arm, lr, hp, seed, "test")
            values.append(value)
            if measure is not None:
                model.eval()
                probe = splits_for(track, run_seeds(seed, secret, JOB_KEY, track=track.name).split, task)[0].x_test[:256]
                measured.append(float(measure(model, probe)))
        out[arm] = {"lr": lr, "hparams": hp, "per_seed": fill_diverged(values, ceiling)}

    # As the engine: the baseline at the idea's lr when the two differ, and the confirmation
    # on the job's own seeds when the screening finds a win against both.
    def stage(seeds: list[int]) -> dict[str, list[float]]:
        runs = {"baseline": (out["baseline"]["lr"], {}), "idea": (out["idea"]["lr"], out["idea"]["hparams"])}
        if out["baseline"]["lr"] != out["idea"]["lr"]:
            runs["matched"] = (out["idea"]["lr"], {})
        values = {k: [run("idea" if k == "idea" else "baseline", lr, hp, s, "test")[0] for s in seeds]
                  for k, (lr, hp) in runs.items()}
        every = [v for vals in values.values() for v in vals]
        fill = diverged_score(every, ceiling, sign > 0)
        return {k: fill_diverged(v, fill) for k, v in values.items()}

    def better(values: dict[str, list[float]]) -> bool:
        return all(paired(values[k], values["idea"], lower_is_better=sign > 0)["verdict"] == VERDICT_BETTER
                   for k in ("baseline", "matched") if k in values)

    n = int(defaults["n_seeds"])
    screening = {"baseline": out["baseline"]["per_seed"], "idea": out["idea"]["per_seed"]}
    if out["baseline"]["lr"] != out["idea"]["lr"]:
        screening["matched"] = [run("baseline", out["idea"]["lr"], {}, s, "test")[0] for s in screening_seeds(n, secret, JOB_KEY)]
    if better(screening):  # up to two looks, as the engine (bench.stats.confirmation_continues)
        seeds = confirmation_seeds(CONFIRMATION_LOOKS * n)
        first = stage(seeds[:n])
        p_first = max(paired(first[k], first["idea"], lower_is_better=sign > 0)["p_better"]
                      for k in ("baseline", "matched") if k in first)
        if confirmation_continues(p_first, ALPHA):
            more = stage(seeds[n:])
            first = {k: first[k] + more[k] for k in first}
        out["confirmation"] = first
    return time.perf_counter() - start, out


def compare(engine: dict[str, Any], reference: dict[str, Any], lower_is_better: bool) -> dict[str, Any]:
    """Agreement of the engine's final test metric with the reference's.

    ``seed``: largest relative difference of one seed's value (either arm);
    ``mean``: largest relative difference of an arm's mean; ``lr``: same best lr in
    both arms; ``verdict``: same statistical verdict of the paired comparison.
    """
    from bench.stats import compare as paired

    worst_seed = worst_mean = 0.0
    same_lr = True
    for arm in ("baseline", "idea"):
        ours, theirs = engine[arm]["full"]["per_seed"], reference[arm]["per_seed"]
        for a, b in zip(ours, theirs, strict=True):
            worst_seed = max(worst_seed, abs(a - b) / max(abs(b), 1e-12))
        mean_a, mean_b = sum(ours) / len(ours), sum(theirs) / len(theirs)
        worst_mean = max(worst_mean, abs(mean_a - mean_b) / max(abs(mean_b), 1e-12))
        same_lr &= math.isclose(engine[arm]["best_cfg"]["lr"], reference[arm]["lr"])
    verdict = paired(reference["baseline"]["per_seed"], reference["idea"]["per_seed"],
                     lower_is_better=lower_is_better)["verdict"]
    return {"seed": worst_seed, "mean": worst_mean, "lr": same_lr,
            "verdict": verdict == engine["comparison"]["verdict"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tracks", nargs="*", default=list(BUILT_IN))
    parser.add_argument("--cold", action="store_true",
                        help="start each job's children with the job (default: a worker's warm children)")
    args = parser.parse_args()
    import torch

    from bench import warm
    from bench.catalog import get_card
    from bench.sandbox import Limits

    torch.set_num_threads(1)  # the reference's setting, and the children's
    import bench.assemble  # noqa: F401 - a worker process imports the report code once, not per job

    if not args.cold:
        warm.prepare(Limits())  # a worker at start; the first reference run gives them time to warm

    rows = []
    speedups: dict[str, float] = {}
    for track in available(args.tracks):
        idea = get_card(track).get("example_idea")
        if not idea:
            print(f"# {track}: no example idea; skipped", file=sys.stderr)
            continue
        # The reference first: meanwhile the warm children (started at the end of the previous
        # engine run, as a worker does between jobs) finish importing torch on the other core.
        reference_s, reference = run_reference(track, idea)
        engine_s, engine = run_engine(track, idea, warm=not args.cold)
        lower = get_card(track)["metric"]["direction"] == "lower"
        agreement = compare(engine, reference, lower)
        speedup = reference_s / engine_s
        speedups[track] = round(speedup, 2)
        rows.append((track, engine_s, reference_s, speedup, engine["execution"]["path"], agreement))
        print(f"# {track}: engine {engine_s:.1f} s, reference {reference_s:.1f} s", file=sys.stderr, flush=True)
    header = ("track", "engine s", "reference s", "speedup", "engine path",
              "max rel diff per seed", "max rel diff of arm means", "same best lr", "same verdict")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for track, e, r, s, path, agree in rows:
        yes = {True: "yes", False: "no"}
        print(f"| {track} | {e:.1f} | {r:.1f} | {s:.2f}x | {path} | {agree['seed']:.1e} | {agree['mean']:.1e} "
              f"| {yes[agree['lr']]} | {yes[agree['verdict']]} |")
    print(json.dumps(speedups))


if __name__ == "__main__":
    main()
