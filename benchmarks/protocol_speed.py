"""Protocol speed: the engine against the careful hand loop, per built-in track (issue 29.3).

For each track this runs the track's full default protocol (example idea vs the
canonical baseline: union-grid sweep on the sweep seeds with one edge extension,
the best configs on the screening seeds, the baseline at the idea's lr when the two
differ, the confirmation after a win, the mechanism measurement) twice, in this
one invocation:

* **engine**: ``bench.judge.judge`` (sandboxed children, both arms at once,
  vectorized runs where the models batch) with a fresh, empty baseline cache
  directory, so the baseline arm is a cache miss and is trained;
* **reference**: the same protocol as a careful engineer runs it by hand: one process
  per arm (their start, torch imported, inside its time), one torch thread each (two
  threads on these two cores were 1.6-5x slower per step) with denormals flushed, as the
  engine's children compute (``bench.child.torch_settings``), plain PyTorch
  (``bench.trainer.train``) one model after another.

Both sides' work is counted: training runs per side (steps per run are the card's), equal
unless float noise picked another learning rate on one side; then the ratios are per run
and the table shows the two counts. CPU seconds are the machine's (``/proc/stat``): run it
alone. GFLOP per CPU-second uses the bench's own count of each arm's forward FLOPs (three
times that per training step) against one core's measured matmul peak.

It prints a table (wall and CPU seconds and their ratios, reference / engine; GFLOP per
CPU-second; agreement of the screening's test metric) and, as its last line, one JSON
object ``{"wall": {track: ratio}, "cpu": {track: ratio}, ...}``.

    .venv/bin/python benchmarks/protocol_speed.py [--tracks smoke dynamics] [--cold]

By default the engine runs as a worker judging a stream of jobs does: each job
adopts sandboxed children started (torch imported, first-use work done) after the
previous job (``bench.warm``), and starts the next job's before it returns; that
start is inside the engine's time. ``--cold`` starts each job's children with it, as a
cold ``ideabench run`` does.
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
    from bench.judge import JudgeRequest, judge
    from bench.options import EngineOptions
    from bench.seeding import public_secret

    _forget_data()

    with tempfile.TemporaryDirectory(prefix="ideabench-speed-cache-") as cache:
        start = time.perf_counter()
        request = JudgeRequest(track=track, idea_code=idea, timeout_s=3600.0, seed_secret=public_secret(),
                               job_key=JOB_KEY, options=EngineOptions(cache_dir=Path(cache)))
        report = judge(request, keep_warm=warm).model_dump(mode="json")
        seconds = time.perf_counter() - start
    return seconds, report["bench_report"]


_ARM: dict[str, Any] = {}  # an arm process's track, builders and secret (``_arm_start``)


def _arm_start(track_name: str, idea: str) -> None:
    """An arm process of the reference at its start: as the engine's children compute (one torch
    thread, denormals flushed: ``bench.child.torch_settings``; a careful engineer on a CPU sets
    both), the track, the idea."""
    from bench.child import torch_settings
    from bench.registry import load_track
    from bench.seeding import public_secret, task_seed

    torch_settings()
    track = load_track(track_name)
    module = types.ModuleType("reference_idea")
    exec(compile(idea, "idea.py", "exec"), module.__dict__)
    secret = public_secret()
    _ARM.update(track=track, module=module, secret=secret, task=task_seed(track.name, secret),
                builders={"baseline": track.build_baseline, "idea": module.build_model})


def trained(arm: str, lr: float, hparams: dict[str, Any], seeds: Any, split: str,
            build_init: int | None = None) -> tuple[Any, Any, Any]:
    """One run of ``arm`` in an arm process as the engine trains it (the bench's initial values,
    the card's trainer settings and schedule), on ``seeds`` (split / order / init), the model
    built with ``build_init`` where given (a seed's repeat run: the seed's own build, as the
    engine's trainer starts it from the seed's captured build): the run's result, the splits
    and the evaluated labels."""
    import torch

    from bench.data import splits_for
    from bench.redraw import redraw
    from bench.trainer import RunConfig, build_checked, train

    track, card = _ARM["track"], _ARM["track"].card
    defaults = card["defaults"]
    splits, _ = splits_for(track, seeds.split, _ARM["task"])
    spec = dict(track.spec, hparams=dict(hparams))
    model = build_checked(_ARM["builders"][arm], spec, init_seed=seeds.init if build_init is None else build_init,
                          param_cap=int(card["param_cap"]),
                          device=torch.device("cpu"), role=arm)
    # The bench's initial values (bench.redraw), as the engine trains: the same models
    parameters = dict(model.named_parameters())
    fresh = redraw({name: value.detach() for name, value in parameters.items()}, list(parameters), seeds.init)
    with torch.no_grad():
        for name, value in parameters.items():
            value.copy_(fresh[name])
    cfg = RunConfig(lr=lr, epochs=int(defaults["epochs"]), batch_size=int(defaults["batch_size"]),
                    weight_decay=float(defaults.get("weight_decay", 0.0)), loss=card["metric"]["loss"],
                    schedule=defaults.get("schedule", "constant"))
    x_eval, y_eval = (splits.x_val, splits.y_val) if split == "val" else (splits.x_test, splits.y_test)
    return train(model, cfg, splits.x_train, splits.y_train, x_eval, order_seed=seeds.order), splits, y_eval


Run = tuple[float, dict[str, Any], int, str, bool, int]  # lr, hparams, protocol seed, eval split, measure, repeat


def _arm_runs(arm: str, runs: list[Run]) -> list[tuple[float, float | None]]:
    """Train ``runs`` (lr, hparams, protocol seed, eval split, measure the mechanism, the seed's
    repeat) of ``arm`` one after another in this process: each run's score (nan when diverged)
    and measurement."""
    from bench.metrics import score
    from bench.seeding import run_seeds

    track = _ARM["track"]
    measure = getattr(_ARM["module"], "measure", None) if getattr(_ARM["module"], "MECHANISM", None) else None
    out: list[tuple[float, float | None]] = []
    for lr, hp, seed, split, wants_measure, repeat in runs:
        seeds = run_seeds(seed, _ARM["secret"], JOB_KEY, track=track.name, repeat=repeat)
        build = run_seeds(seed, _ARM["secret"], JOB_KEY, track=track.name).init if repeat else None
        result, splits, y_eval = trained(arm, lr, hp, seeds, split, build)
        value = score(track.card["metric"]["name"], result.predictions.numpy(), y_eval.numpy())
        if result.diverged or not math.isfinite(value):
            value = math.nan
        measured = None
        if wants_measure and measure is not None:
            result.model.eval()
            measured = float(measure(result.model, splits.x_test[:256]))
        out.append((value, measured))
    return out


def cpu_seconds() -> float:
    """The machine's busy CPU seconds so far, all cores, user and system (``/proc/stat``).

    Per-process accounting misses the engine's children: they run in the sandbox's own
    session and cgroups and are killed, not reaped through this process, so
    ``RUSAGE_CHILDREN`` saw 0.04 of a smoke job's 10.7 busy seconds. So the benchmark counts
    the whole machine and must run alone on it (``background`` says how busy it was idle)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is inside user's


def settle(limit_s: float = 60.0) -> None:
    """Wait until the machine is idle again (under 0.2 busy cores over half a second): the
    warm children a worker starts after a job import torch then, and that CPU is the job's."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and background(0.5) > 0.2:
        pass


def background(seconds: float = 2.0) -> float:
    """Busy cores while this benchmark sleeps: what the CPU ratios include of other work."""
    before = cpu_seconds()
    time.sleep(seconds)
    return (cpu_seconds() - before) / seconds


def run_reference(track_name: str, idea: str) -> tuple[float, float, dict[str, Any]]:
    """The protocol as a careful engineer runs it by hand (issue 29.3): one process per arm,
    one torch thread each (denormals flushed), plain PyTorch (``bench.trainer.train``) one model after another in
    each, the processes' start (``spawn``, torch imported) included. Seconds, CPU seconds and
    per-arm results (``runs``: training runs per arm, for the equal-work check)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import numpy as np

    from bench.contract import check_hparams
    from bench.decide import (
        diverged_score,
        efficacy,
        efficacy_possible,
        fill_diverged,
        repeats_futile,
        seed_means,
        stage_better,
        stage_comparisons,
        stage_p,
    )
    from bench.protocol import config_grid
    from bench.registry import load_track
    from bench.seeding import confirmation_seeds, public_secret, screening_seeds, sweep_seeds
    from bench.stats import ALPHA, CONFIRMATION_LOOKS, CONFIRMATION_SHARES, confirmation_continues

    start, cpu_start = time.perf_counter(), cpu_seconds()
    context = multiprocessing.get_context("spawn")
    arms = {arm: ProcessPoolExecutor(1, mp_context=context, initializer=_arm_start, initargs=(track_name, idea))
            for arm in ("baseline", "idea")}
    try:
        card = load_track(track_name).card
        defaults = card["defaults"]
        sign = 1.0 if card["metric"]["direction"] == "lower" else -1.0
        ceiling = float(card.get("divergence_ceiling", 1e6))
        secret = public_secret()
        module = types.ModuleType("reference_idea")
        exec(compile(idea, "idea.py", "exec"), module.__dict__)
        grids = {
            "baseline": [{}],
            "idea": config_grid(check_hparams(getattr(module, "HPARAMS", {}) or {},
                                        max_configs=int(card.get("max_configs", 12)))),
        }
        wants_measure = bool(getattr(module, "MECHANISM", None))
        runs = {"baseline": 0, "idea": 0}

        def both(work: dict[str, list[Run]]) -> dict[str, list[Any]]:
            """Each arm's runs in its own process, the two at once."""
            futures = {arm: arms[arm].submit(_arm_runs, arm, batch) for arm, batch in work.items() if batch}
            for arm, batch in work.items():
                runs[arm] += len(batch)
            return {arm: future.result() for arm, future in futures.items()}

        sweep: dict[str, dict[tuple[float, str], list[float]]] = {"baseline": {}, "idea": {}}

        def do_sweep(lrs: list[float]) -> None:
            keys = {arm: [(lr, hp, seed) for seed in sweep_seeds(int(defaults["sweep_seeds"]))
                          for lr in lrs for hp in grids[arm]] for arm in ("baseline", "idea")}
            done = both({arm: [(lr, hp, seed, "val", False, 0) for lr, hp, seed in keys[arm]] for arm in keys})
            for arm, results in done.items():
                for (lr, hp, _), (value, _) in zip(keys[arm], results, strict=True):
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
        chosen = {arm: best(arm) for arm in ("baseline", "idea")}
        matched = chosen["baseline"][0] != chosen["idea"][0]

        # As the engine: the screening (the engine's draw of seeds), the baseline at the idea's lr
        # when the two differ, and the confirmation on fresh seeds after a win against both; on a
        # card with ``repeats`` K, each seed once, then K - 1 times more unless those first runs
        # are futile, a seed's runs averaged (the mechanism measured on the first).
        repeats = int(defaults.get("repeats", 1))

        def test_runs(seeds: list[int], measure: bool, rs: range) -> dict[str, list[tuple[int, float]]]:
            """Each key's (seed, value) of the runs ``rs`` of every seed."""
            work = {arm: [(*chosen[arm], s, "test", measure and r == 0, r) for s in seeds for r in rs]
                    for arm in ("baseline", "idea")}
            if matched:
                work["baseline"] += [(chosen["idea"][0], {}, s, "test", False, r) for s in seeds for r in rs]
            done = both(work)
            n = len(seeds) * len(rs)
            by_seed = [s for s in seeds for _ in rs]
            values = {"baseline": list(zip(by_seed, [v for v, _ in done["baseline"][:n]], strict=True)),
                      "idea": list(zip(by_seed, [v for v, _ in done["idea"]], strict=True))}
            if matched:
                values["matched"] = list(zip(by_seed, [v for v, _ in done["baseline"][n:]], strict=True))
            return values

        def means(runs_of: dict[str, list[tuple[int, float]]]) -> dict[str, list[float]]:
            """Per seed, the mean of its runs, diverged runs filled over every run given (as
            ``Job.stage_values``: a stage's runs, both looks of the confirmation)."""
            every = [v for pairs in runs_of.values() for _, v in pairs]
            fill = diverged_score(every, ceiling, sign > 0)
            return {k: seed_means([s for s, _ in pairs], fill_diverged([v for _, v in pairs], fill))
                    for k, pairs in runs_of.items()}

        def stage(seeds: list[int], looked_at: dict[int, dict[str, list[float]]], level: float,
                  measure: bool = False,
                  prior: dict[str, list[tuple[int, float]]] | None = None) -> dict[str, list[tuple[int, float]]]:
            """One look's runs: the first of each seed, then the repeats unless the look's test
            (pooled with ``prior``, the confirmation's first look) is futile on them or already
            wins on every pair; ``looked_at`` keeps, by pairs, what a look that went on looked at."""
            first = test_runs(seeds, measure, range(1))
            pooled = first if prior is None else {k: prior[k] + first[k] for k in first}
            looked = means(pooled)
            tests = stage_comparisons(looked, sign > 0)
            n_pairs = len(looked["idea"])
            may_stop = efficacy_possible(n_pairs, level)
            if repeats == 1 or repeats_futile(tests, sign > 0) or (may_stop and efficacy(tests)):
                return first
            if may_stop:
                looked_at[n_pairs] = looked
            more = test_runs(seeds, False, range(1, repeats))
            return {k: first[k] + more[k] for k in first}

        def tests_of(values: dict[str, list[float]], looked_at: dict[int, dict[str, list[float]]]) -> list[Any]:
            return stage_comparisons(values, sign > 0, looked_at.get(len(values["idea"])))

        n = int(defaults["n_seeds"])
        screened: dict[int, dict[str, list[float]]] = {}
        screening = means(stage(screening_seeds(n, secret, JOB_KEY), screened, ALPHA / 2, measure=wants_measure))
        out: dict[str, Any] = {arm: {"lr": chosen[arm][0], "hparams": chosen[arm][1],
                                     "per_seed": fill_diverged(screening[arm], ceiling)}
                               for arm in ("baseline", "idea")}
        if stage_better(tests_of(screening, screened)):  # up to two looks, as the engine
            confirmed: dict[int, dict[str, list[float]]] = {}
            seeds = confirmation_seeds(CONFIRMATION_LOOKS * n)
            looked = stage(seeds[:n], confirmed, CONFIRMATION_SHARES[0] * ALPHA)
            if confirmation_continues(stage_p(tests_of(means(looked), confirmed)), ALPHA):
                more = stage(seeds[n:], confirmed, CONFIRMATION_SHARES[1] * ALPHA, prior=looked)
                looked = {k: looked[k] + more[k] for k in looked}
            out["confirmation"] = means(looked)
        out["runs"] = dict(runs)
    finally:
        for executor in arms.values():
            executor.shutdown(wait=True)
    return time.perf_counter() - start, cpu_seconds() - cpu_start, out


def engine_runs(report: dict[str, Any]) -> int:
    """Training runs the engine made for ``report`` (both arms; none came from a cache)."""
    if report["execution"].get("baseline_cache_hits"):
        raise SystemExit("the engine hit its baseline cache: the two sides would not do the same work")
    from bench.report import runs_made

    return runs_made(report)


def training_flops(report: dict[str, Any], card: dict[str, Any], runs: dict[str, int]) -> float:
    """The floating-point operations of ``runs`` training runs per arm: per example, the
    bench's count of each arm's forward pass (``flops_per_example``), three times over for a
    training step (forward and backward), over every epoch's training rows, plus one forward
    over the evaluation rows."""
    per_example = report["parameter_parity"]["flops_per_example"]
    sizes, epochs = card["sizes"], int(card["defaults"]["epochs"])
    per_run = 3 * epochs * int(sizes["train"]) + int(sizes.get("test", sizes.get("val", 0)))
    return float(sum(count * per_run * float(per_example[arm]) for arm, count in runs.items()))


def matmul_peak_gflops(seconds: float = 1.0) -> float:
    """One core's measured float32 matmul throughput (1024 x 1024, one torch thread), GFLOP/s."""
    import torch

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        count += 1
    return 2 * 1024**3 * count / (time.perf_counter() - start) / 1e9


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
                     lower_is_better=lower_is_better).verdict
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

    peak, idle_load = matmul_peak_gflops(), background()
    print(f"# one core's float32 matmul peak: {peak:.1f} GFLOP/s; busy cores while idle: {idle_load:.2f}",
          file=sys.stderr, flush=True)
    if not args.cold:
        warm.prepare(Limits())  # a worker at start
        settle()

    rows = []
    speedups: dict[str, float] = {}
    cpu_ratios: dict[str, float] = {}
    for track in available(args.tracks):
        card = get_card(track)
        idea = card.get("example_idea")
        if not idea:
            print(f"# {track}: no example idea; skipped", file=sys.stderr)
            continue
        reference_s, reference_cpu, reference = run_reference(track, idea)
        cpu_before = cpu_seconds()
        engine_s, engine = run_engine(track, idea, warm=not args.cold)
        settle()  # the next job's warm children start: their CPU is this job's (not its wall)
        engine_cpu = cpu_seconds() - cpu_before
        lower = card["metric"]["direction"] == "lower"
        agreement = compare(engine, reference, lower)
        ours, theirs = engine_runs(engine), sum(reference["runs"].values())
        # Equal work, counted: both sides trained the same runs (steps per run are the card's).
        # The two may differ only where float noise picked another learning rate (and so another
        # edge or confirmation); then the ratios are per run, and the row says so.
        per_run = theirs / ours
        speedup, cpu_ratio = reference_s / engine_s * per_run, reference_cpu / engine_cpu * per_run
        speedups[track], cpu_ratios[track] = round(speedup, 2), round(cpu_ratio, 2)
        flops = training_flops(engine, card, reference["runs"])
        rows.append((track, engine_s, reference_s, speedup, engine_cpu, reference_cpu, cpu_ratio, ours, theirs,
                     flops / 1e9 / reference_cpu, flops / 1e9 / engine_cpu * per_run, engine["execution"]["path"],
                     agreement))
        print(f"# {track}: engine {engine_s:.1f} s ({engine_cpu:.1f} CPU-s, {ours} runs), reference "
              f"{reference_s:.1f} s ({reference_cpu:.1f} CPU-s, {theirs} runs)", file=sys.stderr, flush=True)
    header = ("track", "engine s", "reference s", "wall ratio", "engine CPU-s", "reference CPU-s", "CPU ratio",
              "runs (engine / reference)", "reference GFLOP/CPU-s", "engine GFLOP/CPU-s", "engine path",
              "max rel diff per seed", "max rel diff of arm means", "same best lr", "same verdict")
    print(f"one core's float32 matmul peak: {peak:.1f} GFLOP/s; busy cores before the runs: {idle_load:.2f}")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    yes = {True: "yes", False: "no"}
    for track, e, r, s, ec, rc, cr, ours, theirs, rg, eg, path, agree in rows:
        print(f"| {track} | {e:.1f} | {r:.1f} | {s:.2f}x | {ec:.1f} | {rc:.1f} | {cr:.2f}x | {ours} / {theirs} "
              f"| {rg:.2f} | {eg:.2f} | {path} | {agree['seed']:.1e} | {agree['mean']:.1e} | {yes[agree['lr']]} "
              f"| {yes[agree['verdict']]} |")
    print(json.dumps({"wall": speedups, "cpu": cpu_ratios, "matmul_peak_gflops": round(peak, 1),
                      "busy_cores_idle": round(idle_load, 2)}))


if __name__ == "__main__":
    main()
