"""Where a track's paired differences vary: init, data order, split, evaluation (issue 29.1).

The protocol's MDE is about 1.15 times the sd of the eight paired differences ``idea -
baseline`` (``bench.stats.minimum_detectable_effect``). This script measures what that sd is
made of, for honest ideas, with the bench's own pieces: protocol seeds expanded by
``bench.seeding.run_seeds`` (a public secret), the track's splits (``bench.data.splits_for``),
the bench's initial values (``bench.redraw``) and its trainer (``bench.trainer.train``, with
the card's learning-rate schedule), one torch thread per process, two processes. Each arm runs at its own best learning rate of the
card's grid (mean validation metric over the sweep seeds, as the protocol picks it).

Designs, ``--pairs`` pairs each; pair k uses protocol seed k's split / order / init seeds
where the design lets that seed vary, and pair 0's where it holds it fixed:

* ``protocol``: all three vary (what a job does);
* ``init``: only the initial values vary;
* ``order``: only the minibatch order varies;
* ``split``: only the split (and so the training rows and the evaluated rows) varies;
* ``replicates`` (with ``--replicates K``): as ``protocol``, each arm's value of a pair the
  mean of K runs on the pair's split, each with its own order and init seeds (replicate 0 is
  the protocol design's run): the figures for 1, 2, ... K replicates, from the same runs.

``eval`` is the evaluation's own noise inside one pair: the sd of the per-row differences
over the square root of the evaluated rows (the part a larger test set would remove); where
the test rows cycle through fewer patients or digits (the card's ``test_patients``,
``test_images``), the sd of each one's mean difference over the square root of their number.
Every figure is a percentage of the baseline's mean test metric; ``mde8`` is the MDE at
eight pairs for that design's sd. The estimates carry the sampling error of ``--pairs``
values (about 20 % of the sd at 12).

    .venv/bin/python benchmarks/variance_components.py [--tracks vision tabular] [--pairs 12]
        [--idea examples/ideas/kinetic_mixing_dynamics.py]

It prints one JSON object per track and idea, then a markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from protocol_speed import _ARM, _arm_start, trained  # noqa: E402 - (a worker: one torch thread, the track, the idea)

BUILT_IN = ("tabular", "correlated_tokens", "dynamics", "sequence", "vision")
DESIGNS = ("protocol", "init", "order", "split")
SEED_BASE = 1_500  # protocol seeds of this study (below the confirmation seeds, which need a job key)


def _row_losses(metric: str, pred: Any, target: Any) -> Any:
    """Each evaluated row's loss (float64), whose mean is the track's metric."""
    from bench.metrics import cross_entropy_rows

    if metric == "cross_entropy":
        return cross_entropy_rows(pred, target)
    diff = (pred.astype(np.float64) - target.astype(np.float64)).reshape(len(target), -1)
    return (diff * diff).mean(axis=1)


def _run(arm: str, lr: float, hparams: dict[str, Any], seeds: tuple[int, int, int], split: str) -> Any:
    """One training run of ``arm`` with (split, order, init) protocol seeds: per-row losses on
    ``split`` (None when the run diverged)."""
    from bench.seeding import RunSeeds, run_seeds

    name = _ARM["track"].name
    expand = [run_seeds(s, _ARM["secret"], track=name) for s in seeds]
    mixed = RunSeeds(seed=seeds[0], split=expand[0].split, order=expand[1].order, init=expand[2].init)
    result, _, y_eval = trained(arm, lr, hparams, mixed, split)
    pred = result.predictions.numpy()
    if result.diverged or not np.all(np.isfinite(pred)):
        return None
    return _row_losses(_ARM["track"].card["metric"]["name"], pred, y_eval.numpy())


def study(track_name: str, idea_path: Path, pairs: int, designs: tuple[str, ...] = DESIGNS,
          replicates: int = 1, forced_lr: float | None = None) -> dict[str, Any]:
    """The sd of the paired differences under each design, for one idea on one track (the idea
    at ``forced_lr`` where given, in place of its best of the grid)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from bench.contract import check_hparams
    from bench.protocol import config_grid
    from bench.registry import load_track
    from bench.seeding import sweep_seeds
    from bench.stats import minimum_detectable_effect

    source = idea_path.read_text()
    module = types.ModuleType("studied_idea")
    exec(compile(source, str(idea_path), "exec"), module.__dict__)
    card = load_track(track_name).card
    sign = 1.0 if card["metric"]["direction"] == "lower" else -1.0
    grids = {"baseline": [{}], "idea": config_grid(check_hparams(getattr(module, "HPARAMS", {}) or {},
                                                           max_configs=int(card.get("max_configs", 12))))}
    start = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context, initializer=_arm_start, initargs=(track_name, source)) as pool:
        best: dict[str, tuple[float, dict[str, Any]]] = {}
        for arm, grid in grids.items():
            configs = [(lr, hp) for lr in card["defaults"]["lr_grid"] for hp in grid]
            futures = {(lr, json.dumps(hp, sort_keys=True)): [pool.submit(_run, arm, lr, hp, (s, s, s), "val")
                                                              for s in sweep_seeds(int(card["defaults"]["sweep_seeds"]))]
                       for lr, hp in configs}
            means = {}
            for key, runs in futures.items():
                values = [f.result() for f in runs]
                means[key] = math.inf if any(v is None for v in values) else sign * statistics.fmean(
                    float(v.mean()) for v in values)
            lr, hp = min(means, key=lambda k: means[k])
            best[arm] = (forced_lr if forced_lr and arm == "idea" else lr, json.loads(hp))

        def seeds(design: str, k: int, r: int = 0) -> tuple[int, int, int]:
            s, zero = SEED_BASE + k, SEED_BASE
            if r:  # another replicate of pair k: its own order and init (seeds past the pairs')
                t = SEED_BASE + pairs * (1 + r) + k
                return (s, t, t)
            return {"protocol": (s, s, s), "init": (zero, zero, s), "order": (zero, s, zero),
                    "split": (s, zero, zero)}[design]

        jobs = {(design, k, arm): pool.submit(_run, arm, *best[arm], seeds(design, k), "test")
                for design in designs for k in range(pairs) for arm in ("baseline", "idea")}
        if replicates > 1:
            for k in range(pairs):
                for arm in ("baseline", "idea"):
                    jobs[("replicates", k, arm, 0)] = (jobs[("protocol", k, arm)] if "protocol" in designs else
                                                       pool.submit(_run, arm, *best[arm], seeds("protocol", k), "test"))
                    for r in range(1, replicates):
                        jobs[("replicates", k, arm, r)] = pool.submit(_run, arm, *best[arm], seeds("", k, r), "test")
        out: dict[str, Any] = {"track": track_name, "idea": idea_path.name, "pairs": pairs,
                               "lr": {arm: best[arm][0] for arm in best}, "hparams": best["idea"][1]}
        baseline_means = []
        sizes = card["sizes"]
        distinct = int(sizes.get("test_patients") or sizes.get("test_images") or sizes["test"])  # rows cycle them
        def pair(design: str, k: int, arm: str) -> Any:
            """An arm's per-row losses in pair k (the mean over a replicated design's runs)."""
            if design.startswith("replicates"):
                runs = [jobs[("replicates", k, arm, r)].result() for r in range(int(design.split("x")[1]))]
                return None if any(v is None for v in runs) else np.mean(runs, axis=0)
            return jobs[(design, k, arm)].result()

        measured = [*designs, *(f"replicates x{n}" for n in range(2, replicates + 1) if replicates > 1)]
        for design in measured:
            diffs, within = [], []
            for k in range(pairs):
                base, idea = pair(design, k, "baseline"), pair(design, k, "idea")
                if base is None or idea is None:
                    continue
                diffs.append(float(idea.mean() - base.mean()))
                # rows of one patient or digit (tabular's measurements, vision's redraws) move
                # together: the evaluation's noise is that of their means, one per cluster
                clusters = (idea - base).reshape(-1, distinct).mean(axis=0)
                within.append(float(np.std(clusters, ddof=1) / math.sqrt(distinct)))
                baseline_means.append(float(base.mean()))
            if len(diffs) < 3:
                out[design] = None
                continue
            sd = statistics.stdev(diffs)
            out[design] = {"mean": statistics.fmean(diffs), "sd": sd, "eval": math.sqrt(statistics.fmean(
                w * w for w in within)), "mde8": minimum_detectable_effect(sd, 8), "diverged": pairs - len(diffs)}
        scale = abs(statistics.fmean(baseline_means))
        out["baseline_mean"] = scale
        if replicates > 1:
            out["nested"] = nested(jobs, pairs, replicates, scale)
        for design in measured:
            if out[design] is not None:
                out[design] = {k: (round(100.0 * v / scale, 2) if k != "diverged" else v)
                               for k, v in out[design].items()}
        out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def nested(jobs: dict[Any, Any], pairs: int, replicates: int, scale: float) -> dict[str, Any] | None:
    """The replicated runs as a nested design: the paired difference of one run's repeat r on
    pair k is d_kr = between_k + within_kr. ``within``: the sd of one run's difference about
    its pair's mean (the training noise, pooled over the pairs: pairs x (K - 1) degrees of
    freedom); ``between``: the sd the pairs' means keep whatever K (the split's own effect and
    the evaluation's noise, which every run of a pair shares); and the MDE at eight pairs
    predicted for K = 1 .. 8 runs a pair, sd = sqrt(between^2 + within^2 / K). Percentages of
    the baseline's mean; None when fewer than three pairs trained without divergence."""
    from bench.stats import minimum_detectable_effect

    diffs = []
    for k in range(pairs):
        runs = [(jobs[("replicates", k, "idea", r)].result(), jobs[("replicates", k, "baseline", r)].result())
                for r in range(replicates)]
        if all(i is not None and b is not None for i, b in runs):
            diffs.append([float(i.mean() - b.mean()) for i, b in runs])
    if len(diffs) < 3:
        return None
    within = statistics.fmean(statistics.variance(d) for d in diffs)
    direct = robust(jobs, pairs, replicates, scale)
    between = max(0.0, statistics.variance([statistics.fmean(d) for d in diffs]) - within / replicates)
    return {"pairs": len(diffs), "within": round(100.0 * math.sqrt(within) / scale, 2),
            "between": round(100.0 * math.sqrt(between) / scale, 2),
            "mde8": {str(n): round(100.0 * minimum_detectable_effect(math.sqrt(between + within / n), 8) / scale, 2)
                     for n in (1, 2, 3, 4, 6, 8, 12, 16)},
            "diffs": [[round(100.0 * v / scale, 3) for v in d] for d in diffs], "direct": direct}


def robust(jobs: dict[Any, Any], pairs: int, replicates: int, scale: float) -> dict[str, dict[str, float]]:
    """The MDE at eight pairs with each arm's value of a pair the mean, the trimmed mean
    (``bench.decide.seed_value``) or the median of its first K runs' test metrics, for K = 4, 8,
    12, 16 up to ``replicates``: the direct design, one estimate per statistic from the same runs."""
    from bench.decide import seed_value
    from bench.stats import minimum_detectable_effect

    def trimmed_mean(values: list[float]) -> float:
        return seed_value(values, "trimmed")

    out: dict[str, dict[str, float]] = {}
    for name, stat in (("mean", statistics.fmean), ("trimmed", trimmed_mean), ("median", statistics.median)):
        out[name] = {}
        for n in (4, 8, 12, 16):
            if n > replicates:
                continue
            diffs = []
            for k in range(pairs):
                runs = {arm: [jobs[("replicates", k, arm, r)].result() for r in range(n)] for arm in ("idea", "baseline")}
                if all(v is not None for arm in runs for v in runs[arm]):
                    diffs.append(stat([float(v.mean()) for v in runs["idea"]])
                                 - stat([float(v.mean()) for v in runs["baseline"]]))
            if len(diffs) >= 3:
                out[name][str(n)] = round(100.0 * minimum_detectable_effect(statistics.stdev(diffs), 8) / scale, 2)
    return out


def ideas_for(track_name: str) -> list[Path]:
    """The track's example idea and the seed ideas written for it (``examples/ideas``), and the
    honest ideas kept for this study where a track has no seed idea (``benchmarks/ideas``)."""
    root = Path(__file__).resolve().parents[1]
    found = [root / "tracks" / track_name / "example_idea.py"]
    for path in sorted([*(root / "examples" / "ideas").glob("*.py"), *(root / "benchmarks" / "ideas").glob("*.py")]):
        if f"the {track_name} track" in path.read_text() or path.stem.endswith(track_name):
            found.append(path)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracks", nargs="+", default=list(BUILT_IN))
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--idea", type=Path, action="append", help="an idea file (default: the track's examples)")
    parser.add_argument("--designs", nargs="+", choices=DESIGNS, default=list(DESIGNS))
    parser.add_argument("--replicates", type=int, default=1, help="also the protocol design with 2..K runs per arm and pair")
    parser.add_argument("--lr", type=float, help="the idea at this learning rate (default: its best of the grid)")
    args = parser.parse_args()
    rows = []
    for name in args.tracks:
        for idea in args.idea or ideas_for(name):
            result = study(name, idea, args.pairs, tuple(args.designs), args.replicates, args.lr)
            print(json.dumps(result), flush=True)
            rows.append(result)
    shown = [d for d in DESIGNS if d in args.designs]
    shown += [f"replicates x{n}" for n in range(2, args.replicates + 1)]
    print(f"\n| track | idea | {' | '.join(f'{d} sd' for d in shown)} | eval sd | {' | '.join(f'MDE at 8 ({d})' for d in shown)} |")
    print("|---|---|" + "---|" * (2 * len(shown) + 1))
    for r in rows:
        def cell(design: str, key: str = "sd", r: dict[str, Any] = r) -> str:
            return "-" if r.get(design) is None else f"{r[design][key]:.1f} %"
        print(f"| {r['track']} | {r['idea']} | {' | '.join(cell(d) for d in shown)} | {cell(shown[0], 'eval')} | "
              f"{' | '.join(cell(d, 'mde8') for d in shown)} |")


if __name__ == "__main__":
    main()
