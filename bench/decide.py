"""The protocol's decisions, as pure functions (issue 26): typed values in, typed values out.

No torch, no processes, no files. ``bench.protocol`` gathers the numbers (the runs' scores,
the trainers' counts) and asks this module what they mean; ``bench.assemble`` asks it the same
questions of a finished report's blocks, so a rule is written once and tested as a function
(tests/bench/test_decide.py), not through sandboxed children.

- **Divergence**: a diverged run scores the worst of the track's ceiling and both arms' finite
  values (``diverged_score``); more than ``MAX_DIVERGED_SHARE`` of an arm's test runs diverged:
  no verdict.
- **Sweep**: the table of an arm's configs (``sweep_table``), its best row (``best``), the
  grid's extension when an arm's best lies at an edge (``edge_steps``), and the baseline's
  denser grid when the idea has more configs (``densify``).
- **Matched learning rate**: the baseline is also trained at the idea's best lr when the two
  differ (``matched_config``), and a stage's win must hold against both (intersection-union:
  ``stage_p``, ``stage_better``).
- **Parity**: parameters, parameter tensors, buffer words and forward FLOPs of every idea config
  against the limits (``parity_error``, ``compute_error``).
- **Verdict inputs**: whether the baseline's lr is trustworthy (``lr_matched``), whether the
  effect reaches the track's smallest effect (``reaches``), and the p-value that enters the
  false-discovery accounting (``p_helps``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.errors import BenchError, ErrorCode
from bench.stats import (
    EXACT_MAX_N,
    Comparison,
    after_efficacy_look,
    compare,
    harms_judged_on_first_runs,
)

MAX_DIVERGED_SHARE = 0.25  # more diverged final runs than this in an arm: no verdict
BASELINE_KEYS = ("baseline", "matched")  # a stage's baselines: the track's, and at the idea's lr


# -- divergence ---------------------------------------------------------------------------------
def diverged_score(values: Sequence[float], ceiling: float, lower_is_better: bool) -> float:
    """The score of a diverged run: the track's ceiling, or the worst finite value of the
    comparison (``values``: both arms' runs of one stage) when that is worse still. A run can
    then never look better by diverging, whatever the arm's other runs scored."""
    finite = [v for v in values if math.isfinite(v)]
    if lower_is_better:
        return max([ceiling, *finite])
    return min([-ceiling, *finite])


def fill_diverged(values: Sequence[float], fill: float) -> list[float]:
    """``values`` with every non-finite entry (a diverged run) replaced by ``fill``."""
    return [v if math.isfinite(v) else fill for v in values]


def seed_value(runs: Sequence[float], statistic: str = "mean") -> float:
    """One seed's value from its runs' values: their mean, or (``trimmed``) the mean of what is
    left once the lowest and the highest ``len(runs) // 8`` are dropped (none under eight runs).
    A run of a small CNN at a high learning rate now and then lands far worse than its seed's
    others (vision@5, a baseline copy at lr 0.03: 16 runs a seed kept an MDE of 19.9 %), and the
    mean keeps that tail; the trimmed mean of 16 runs gave an MDE of 6.4 % against the mean's 8.5
    % on the same runs, and 3.0 % against 3.8 % for the track's example (docs/tracks.md,
    "vision@6"). Computed alike for both arms, so swapping the arms of a seed negates its paired
    difference: the sign-flip test stays exact."""
    if statistic == "trimmed":
        cut = len(runs) // 8
        runs = sorted(runs)[cut:len(runs) - cut]
    return runs[0] if len(runs) == 1 else math.fsum(runs) / len(runs)


def seed_means(seeds: Sequence[int], values: Sequence[float], statistic: str = "mean") -> list[float]:
    """One value per seed, in the seeds' first order: ``seed_value`` of that seed's runs (a
    card's ``defaults.repeats`` runs each; one run's value as it is). Averaging before the
    paired test keeps its unit the seed (the split every run of it shares): the pairs stay
    ``n_seeds`` and only their training noise shrinks."""
    by_seed: dict[int, list[float]] = {}
    for seed, value in zip(seeds, values, strict=True):
        by_seed.setdefault(seed, []).append(value)
    return [seed_value(runs, statistic) for runs in by_seed.values()]


def too_many_diverged(diverged: int, runs: int) -> bool:
    """More than ``MAX_DIVERGED_SHARE`` of ``runs`` diverged: the comparison means nothing."""
    return diverged > MAX_DIVERGED_SHARE * runs


# -- the sweep ----------------------------------------------------------------------------------
def report_cfg(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A run config as reports show it: lr, epochs, batch_size, weight_decay, hparams flat."""
    shown = {k: cfg[k] for k in ("lr", "epochs", "batch_size", "weight_decay")}
    shown.update(cfg.get("hparams", {}))
    return shown


@dataclass(frozen=True)
class SweepRun:
    """One sweep run of an arm: its config, validation value (NaN when it diverged), and whether
    it diverged."""

    cfg: Mapping[str, Any]
    value: float
    diverged: bool


@dataclass
class SweepRow:
    """One config of an arm's sweep: the config run (``config``), as reports show it (``cfg``),
    its value per sweep seed (diverged runs filled) and how many diverged."""

    config: Mapping[str, Any]
    cfg: dict[str, Any]
    per_seed: list[float] = field(default_factory=list)
    diverged: int = 0

    @property
    def mean(self) -> float:
        return float(np.mean(self.per_seed))

    def report(self) -> dict[str, Any]:
        """The row as the report's sweep table holds it."""
        return {"cfg": self.cfg, "per_seed": self.per_seed, "diverged": self.diverged, "mean": self.mean}


def sweep_table(runs: Sequence[SweepRun], fill: float) -> list[SweepRow]:
    """An arm's sweep, one row per config in (lr, config) order, diverged runs scored ``fill``."""
    rows: dict[str, SweepRow] = {}
    for run, value in zip(runs, fill_diverged([r.value for r in runs], fill), strict=True):
        shown = report_cfg(run.cfg)
        row = rows.setdefault(str(sorted(shown.items())), SweepRow(config=run.cfg, cfg=shown))
        row.per_seed.append(value)
        row.diverged += int(run.diverged)
    return sorted(rows.values(), key=lambda r: (r.cfg["lr"], str(r.cfg)))


def best(table: Sequence[SweepRow], lower_is_better: bool) -> SweepRow:
    """The row with the best mean validation value (the first on ties)."""
    sign = 1.0 if lower_is_better else -1.0
    return min(table, key=lambda row: sign * row.mean)


def dense_size(n: int, factor: int) -> int:
    """How many learning rates ``densify`` makes of a grid of ``n`` (part ``grid``): the grid
    and ``ceil(n (factor - 1) / (n - 1))`` more in each of its intervals, at least ``factor * n``."""
    if factor <= 1 or n < 2:
        return n
    return n + (n - 1) * math.ceil(n * (factor - 1) / (n - 1))


def densify(lrs: Sequence[float], factor: int, part: str) -> list[float]:
    """At least ``factor`` times as many learning rates as ``lrs``, over the same range.

    ``part`` ``grid``: ``lrs`` is the track's (sorted) grid, kept, with the same number of
    points spaced geometrically inside each of its intervals (``dense_size`` in all). Each of
    the track's own rates stays on the denser grid: a grid of ``factor * n`` points from end to
    end held none of 0.01, 0.03, 0.1's middle, and an arm swept on it never ran where the other
    arm found its best (a matched baseline sharp at 0.03, red team). ``below`` / ``above``:
    ``lrs`` is one edge step (lo/2 or 2*hi), which becomes ``factor`` points in [lo/2, lo) or
    (hi, 2*hi]. ``factor == 1`` returns ``lrs``.
    """
    if factor <= 1:
        return list(lrs)
    if part == "grid":
        if lrs[0] == lrs[-1]:
            return list(lrs)
        inside = (dense_size(len(lrs), factor) - len(lrs)) // (len(lrs) - 1)
        dense = [float(lrs[0])]
        for lo, hi in zip(lrs, lrs[1:], strict=False):
            dense += [float(v) for v in np.geomspace(lo, hi, inside + 2)[1:-1]] + [float(hi)]
        return dense
    (lr,) = lrs
    if part == "below":
        return [float(v) for v in np.geomspace(lr, 2 * lr, factor + 1)[:-1]]
    return [float(v) for v in np.geomspace(lr / 2, lr, factor + 1)[1:]]


def at_edge(lr: float, grid: Sequence[float]) -> bool:
    """``lr`` is the lowest or the highest of the (sorted) ``grid``."""
    return lr in (grid[0], grid[-1])


def edge_steps(lrs: Sequence[float], bests: Mapping[str, float],
               grids: Mapping[str, Sequence[float]]) -> list[tuple[str, list[float]]]:
    """The grid's extension, once for both arms (PROTOCOL.md 1): one step below (``lrs[0] / 2``)
    when any arm's best lr is its grid's lowest, one above (``lrs[-1] * 2``) when any is its
    highest. ``lrs``: the track's sorted grid; ``grids``: each arm's swept (sorted) lrs."""
    below = any(lr == grids[arm][0] for arm, lr in bests.items())
    above = any(lr == grids[arm][-1] for arm, lr in bests.items())
    return [(part, [value]) for part, value, wanted in (("below", lrs[0] / 2, below), ("above", lrs[-1] * 2, above))
            if wanted]


def matched_config(baseline: Mapping[str, Any], idea: Mapping[str, Any]) -> dict[str, Any] | None:
    """The baseline's best config at the idea's best learning rate, when the two differ.

    Within a seed epoch every job shares the baseline's sweep (and its cache), so a sweep that
    happened to pick a worse learning rate would stay wrong for the whole epoch, and every
    re-roll of a null idea that picks the better one would win, on the screening and on fresh
    seeds alike (the null-stream benchmark measured it: docs/statistics.md). So the baseline is
    also trained at the idea's learning rate, and a win must hold against both (an
    intersection-union test: each exact, no data-dependent choice)."""
    if float(baseline["lr"]) == float(idea["lr"]):
        return None
    return {**baseline, "lr": idea["lr"]}


# -- a stage's tests ----------------------------------------------------------------------------
def stage_comparisons(values: Mapping[str, Sequence[float]], lower_is_better: bool,
                      first: Mapping[str, Sequence[float]] | None = None, *,
                      repeated: bool = False) -> list[Comparison]:
    """The stage's tests of the idea against each baseline it ran (the track's, and the matched
    one when run), in ``BASELINE_KEYS`` order. ``first``: the same pairs' first-run values, where
    the stage looked at them (a stop for efficacy possible) before making its repeats: each test
    then counts that stop's pattern (``bench.stats.after_efficacy_look``). ``repeated``: ``values``
    are means of repeat runs, made because the first runs favoured the idea (else the stage stops
    on them: ``repeats_futile``), so ``harms`` is left to those first runs
    (``bench.stats.harms_judged_on_first_runs``)."""
    keys = [key for key in BASELINE_KEYS if key in values]
    tests = [compare(list(values[key]), list(values["idea"]), lower_is_better=lower_is_better) for key in keys]
    if first is not None:
        tests = [after_efficacy_look(test, [i - b for i, b in zip(first["idea"], first[key], strict=True)],
                                     lower_is_better) for test, key in zip(tests, keys, strict=True)]
    return [harms_judged_on_first_runs(test) for test in tests] if repeated else tests


def efficacy(first: Sequence[Comparison]) -> bool:
    """A test stage's first runs (one a seed) favour the idea on every pair against every
    baseline it must beat: one-sided p = 1 / 2^n, the most extreme sign pattern. Where that is
    significant at the look's level (``efficacy_possible``) the look stops there, its test run
    on those runs; the means' test of a look that goes on counts this pattern
    (``bench.stats.after_efficacy_look``), so the look's level is what it was. A win never in
    doubt then costs one run a seed."""
    return all(c.p_better <= 1.0 / float(2**c.n_pairs) for c in first)


def efficacy_possible(n_pairs: int, level: float) -> bool:
    """Whether a look of ``n_pairs`` pairs can stop for efficacy: its most extreme sign pattern
    (one-sided p = 1 / 2^n, exact only up to ``EXACT_MAX_N`` pairs) wins at the look's one-sided
    ``level`` on its own: alpha / 2 for the screening (six pairs and more), a confirmation look's
    share of alpha (``CONFIRMATION_SHARES``: seven pairs for the first). A stop that would not
    decide its look is no stop: at six pairs a confirmation's first look stopped at p = 1/64
    would go on to a second look that pools single runs where other patterns pool means, and the
    second look's test lost its exactness (review: 227 of 4,096 patterns on one orbit, > alpha)."""
    return n_pairs <= EXACT_MAX_N and 1.0 / float(2**n_pairs) <= level


def repeats_futile(first: Sequence[Comparison], lower_is_better: bool) -> bool:
    """A test stage's first runs (one a seed) show the idea no better than some baseline it must
    beat (its mean gain is not positive): the seeds' repeat runs (a card's ``defaults.repeats``)
    are not made. A win needs all of them significant, which these runs already make unlikely;
    stopping here can only turn a would-be win into none, so the stage's test keeps its level.
    Most ideas that do not help end here, at a K-th of the stage's training."""
    return any(effect(c, lower_is_better) <= 0 for c in first)


def stage_p(comparisons: Sequence[Comparison]) -> float:
    """A stage's one-sided p that the idea is better: the largest of its tests' (intersection-union)."""
    return max(c.p_better for c in comparisons)


def stage_better(comparisons: Sequence[Comparison]) -> bool:
    """The idea is significantly better than every baseline the stage ran."""
    return all(c.better for c in comparisons)


# -- parity ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParityLimits:
    """What every idea config may hold: ``ratio`` x the baseline's ``base_params`` parameters,
    ``tensor_cap`` parameter tensors, ``buffer_cap`` buffer words."""

    base_params: int
    ratio: float
    buffer_cap: int
    tensor_cap: int


# What an idea's buffers, constants and literals may hold beyond its baseline's, in 32-bit words of
# information (bench.graph.info_words): 1,024 bits, room for the fixed maps of every example (the
# vision example's blur kernels 16 words beyond its baseline's, seed 002's pair indices 21), not
# for a network: 273 words held vision's pretrained baseline at 3 bits a weight (red team).
MIN_BUFFER_ROOM = 32
MIN_MAX_TENSORS = 64


def max_tensors(baseline_tensors: int) -> int:
    """How many parameter tensors an idea may hold: four times its baseline's, at least 64 (the
    bench redraws each one's initial values and keeps only its scheme: ``bench.redraw``)."""
    return max(MIN_MAX_TENSORS, 4 * baseline_tensors)


def parity_error(limits: ParityLimits, hparams: Mapping[str, Any], n_params: int, n_buffers: int,
                 n_tensors: int) -> BenchError | None:
    """Why one idea config breaks parity (PROTOCOL.md 1), or None."""
    where = f" (config {dict(hparams)})" if hparams else ""
    if n_tensors > limits.tensor_cap:
        return BenchError(
            ErrorCode.PARAMETER_PARITY,
            f"The idea holds {n_tensors} parameter tensors{where}; this track allows {limits.tensor_cap} "
            "(four times the baseline's, at least 64): the bench redraws every tensor's initial "
            "values and keeps only its scheme, two numbers a tensor.",
            "Hold related weights in one tensor (a (k, n) parameter, not k of shape (n,)).",
        )
    if n_params > limits.ratio * limits.base_params:
        return BenchError(
            ErrorCode.PARAMETER_PARITY,
            f"The idea holds {n_params} parameters{where}, more than {limits.ratio:g} x the baseline's "
            f"{limits.base_params}: it is not judged.",
        )
    if n_buffers > limits.buffer_cap:
        return BenchError(
            ErrorCode.PARAMETER_PARITY,
            f"The idea's buffers, constants and literal numbers hold {n_buffers} words (32-bit, "
            f"compressed){where}; this track allows {limits.buffer_cap} (its buffer_cap): room for "
            "normalisation statistics and small fixed maps, not for a table or a network.",
            "Build fixed maps in forward from a few numbers (torch.eye, an outer product, "
            "expand per channel) instead of storing them.",
        )
    return None


FIXED_FREE = float(2**20)  # operations any forward may spend besides its rows' share (about 1 ms)


def dearest_per_example(rows: int, cost: float, batch_size: int) -> float:
    """The cost per example of a forward of ``rows`` rows costing ``cost`` operations: past
    ``FIXED_FREE``, over its rows but at least a training batch (an epoch's last batch and the
    rows predicted alone may cost what a whole batch may, no more)."""
    return max(0.0, cost - FIXED_FREE) / max(rows, batch_size, 1)


def dearest_forward(rows: Sequence[int], costs: Sequence[float], batch_size: int) -> tuple[int, float]:
    """Of the forwards a trainer counted (their rows and costs), the dearest per example."""
    return max(zip(rows, costs, strict=True), key=lambda f: dearest_per_example(f[0], f[1], batch_size))


def compute_error(hparams: Mapping[str, Any], cost: float, base_flops: float, ratio: float,
                  dearest: tuple[int, float] | None = None, batch_size: int = 1,
                  base_dearest: float = 0.0) -> BenchError | None:
    """Why one idea config costs too much compute (compute parity), or None: its forward's
    operations per example (``bench.cost``), and those of the dearest forward the trainer runs
    (``dearest``: its rows and its cost; ``dearest_per_example``), at most ``ratio`` times the
    baseline's per example (for the second, the larger of that and its own dearest forward's,
    ``base_dearest``). A cost per added row misses what does not grow with the batch and what
    grows faster: until session 33 a model that summed an expanded constant of 2**29 elements
    each forward made a smoke job 45 times slower and was judged, and a red team's cost was 0
    at the 8 and 16 rows counted and 2**59 at 2."""
    where = f" (config {dict(hparams)})" if hparams else ""
    limit = ratio * base_flops
    if cost > limit:
        return BenchError(
            ErrorCode.COMPUTE_PARITY,
            f"The idea costs {cost:.4g} forward FLOPs per example{where}, more than {ratio:g} x the "
            f"baseline's {base_flops:.4g}: it is not judged.",
        )
    rows, total = dearest if dearest is not None else (0, 0.0)
    reference = max(base_flops, base_dearest)
    if dearest_per_example(rows, total, batch_size) > ratio * reference:
        return BenchError(
            ErrorCode.COMPUTE_PARITY,
            f"A forward of the idea on {rows} rows costs {total:.4g} operations{where}: "
            f"{dearest_per_example(rows, total, batch_size):.4g} per example past the first {FIXED_FREE:.4g} "
            f"(over at least a batch of {batch_size}), more than {ratio:g} x the baseline's {reference:.4g} "
            "per example: it is not judged.",
        )
    return None


@dataclass(frozen=True)
class Counted:
    """What the trusted trainer counted of one arm's configs, in the grid's order
    (``bench.wire.CheckReply``): parameters, buffer words, parameter tensors, forward cost per
    example, and each counted forward's (rows, cost) (``bench.cost.forward_sizes``)."""

    n_params: tuple[int, ...]
    n_buffers: tuple[int, ...]
    n_tensors: tuple[int, ...]
    flops: tuple[float, ...]
    forwards: tuple[tuple[tuple[int, float], ...], ...]

    def dearest(self, batch_size: int) -> list[tuple[int, float]]:
        """Per config, its dearest forward per example (``dearest_forward``)."""
        return [dearest_forward([r for r, _ in f], [c for _, c in f], batch_size) for f in self.forwards]

    def dearest_cost(self, batch_size: int) -> float:
        """The dearest forward of any config, per example (``dearest_per_example``)."""
        return max(dearest_per_example(*f, batch_size=batch_size) for f in self.dearest(batch_size))


@dataclass(frozen=True)
class Reference:
    """A matched baseline's job: the track's canonical baseline's counts, from its check
    (``bench.judge.check_matched_baseline``), which parity and compute parity hold the idea to."""

    n_params: int
    n_buffers: int
    flops: float
    n_tensors: int
    dearest: float = 0.0  # its dearest forward per example (0: unknown, its cost per example rules)


@dataclass(frozen=True)
class CountLimits:
    """The limits a check holds every idea config to (``count_limits``)."""

    parity: ParityLimits
    base_flops: float  # the baseline's forward cost per example, at least two per parameter
    compute_ratio: float
    base_dearest: float  # its dearest forward per example (against a reference, the reference's)
    batch_size: int


def count_limits(baseline: Counted, *, reference: Reference | None, parity_ratio: float, buffer_cap: int | None,
                 compute_ratio: float, batch_size: int, buffer_room: int) -> CountLimits:
    """The limits of parity and compute parity (PROTOCOL.md 1) from the baseline's counts, or from
    the track's canonical baseline's (``reference``) in a matched baseline's job: at most
    ``parity_ratio`` x its parameters, four times its parameter tensors (``max_tensors``), its
    buffer words plus ``buffer_room`` (or the track's ``buffer_cap``), ``compute_ratio`` x its
    forward cost per example (at least two per parameter: what a dense layer costs, so a
    baseline of cheap ops does not make every idea too dear), and as much for its dearest forward."""
    base, base_buffers, base_tensors = max(baseline.n_params), max(baseline.n_buffers), max(baseline.n_tensors)
    flops = max(baseline.flops)
    base_dearest = baseline.dearest_cost(batch_size)
    if reference is not None:  # every limit: a matched baseline is an agent's file (its tensors too, session 36)
        base, base_buffers, base_tensors = reference.n_params, reference.n_buffers, reference.n_tensors
        flops, base_dearest = reference.flops, reference.dearest
    return CountLimits(
        parity=ParityLimits(base_params=base, ratio=parity_ratio, buffer_cap=buffer_cap or base_buffers + buffer_room,
                            tensor_cap=max_tensors(base_tensors)),
        base_flops=max(flops, 2.0 * base), compute_ratio=compute_ratio, base_dearest=base_dearest,
        batch_size=batch_size)


def counts_error(limits: CountLimits, grid: Sequence[Mapping[str, Any]], idea: Counted,
                 baseline: Counted) -> BenchError | None:
    """Why the idea's configs (``grid``, in order) may not be judged, or None: parity of every
    config first (``parity_error``), then compute parity (``compute_error``). A count that is
    not finite is the bench's own failure (the trusted trainer made it)."""
    for hparams, n_params, n_buffers, n_tensors in zip(grid, idea.n_params, idea.n_buffers, idea.n_tensors,
                                                       strict=True):
        error = parity_error(limits.parity, hparams, n_params, n_buffers, n_tensors)
        if error is not None:
            return error
    batch = limits.batch_size
    dearest = idea.dearest(batch)
    numbers = [*idea.flops, *baseline.flops] + [c for _, c in (*dearest, *baseline.dearest(batch))]
    if not all(math.isfinite(f) and f >= 0 for f in numbers):
        return BenchError(ErrorCode.INTERNAL, "a trainer counted FLOPs that are not finite")
    for hparams, cost, forward in zip(grid, idea.flops, dearest, strict=True):
        error = compute_error(hparams, cost, limits.base_flops, limits.compute_ratio, forward, batch,
                              limits.base_dearest)
        if error is not None:
            return error
    return None


# -- builds ---------------------------------------------------------------------------------------
def duplicate_config_error(arm: str, grid: Sequence[Mapping[str, Any]], graph_sha256: Sequence[str],
                           seed_sha256: Sequence[Sequence[str]]) -> BenchError | None:
    """Every config of an arm's grid must build another model (its graph, or its tensors at some
    init seed: ``graph_sha256`` and ``seed_sha256`` per config, in the grid's order): an HPARAMS
    key the model never reads doubled the sweep silently (issue 27), and an idea's re-roll by an
    unread key is no new configuration."""
    seen: dict[tuple[str, tuple[str, ...]], int] = {}
    for config, built in enumerate(zip(graph_sha256, (tuple(s) for s in seed_sha256), strict=True)):
        first = seen.setdefault(built, config)
        if first != config:
            changed = sorted(k for k in grid[config] if grid[config][k] != grid[first].get(k))
            return BenchError(
                ErrorCode.HPARAM_NO_EFFECT,
                f"The {arm}'s HPARAMS configurations number {first + 1} and {config + 1} build the "
                f"same model: changing {', '.join(repr(k) for k in changed)[:200]} has no effect on it.",
            )
    return None


def same_build_error(found: Mapping[str, Any] | None, graph_sha256: Sequence[str], tensors_sha256: Sequence[str],
                     configs: Sequence[str]) -> BenchError | None:
    """A matched baseline must build in its job exactly what it built in its check against the
    canonical baseline (``found``: the check's graphs, tensors and configs; None: no check): a
    file that reads its role (its file name, its directory, its caller's frames) built a weak
    model in the job and a sound one in the check, and a copy of the canonical baseline then
    "helped" 12 of 12 times (red team). A model is its graphs and tensors, so the same build is
    the same model. Its configs too, by name and in order: the job trains the config its check
    chose by name (``Job.pinned``), and a file that swapped its HPARAMS labels by role built the
    same models by index in both and named the weak one as the check's choice in the job (red team)."""
    if found is None:
        return None
    if (list(graph_sha256) != list(found["graph_sha256"]) or list(tensors_sha256) != list(found["tensors_sha256"])
            or list(configs) != list(found["configs"])):
        return BenchError(
            ErrorCode.INCONSISTENT_BUILD,
            "The matched baseline built other models, or declared other configs, in this job than in its "
            "check against the track's canonical baseline (the same configs and init seeds).",
        )
    return None


def tuned_for_error(n_configs: int, tuned_for: int) -> BenchError | None:
    """A pinned matched baseline's tuning budget is its check's, sized for the idea's configs as
    declared before the check (``tuned_for``; ``bench.judge.declared_configs``): an idea whose
    child reports more (``n_configs``: a grid no statement of the file names,
    ``globals()["HPARAMS"] = ...``) would out-tune it, and is refused. A check that says nothing
    of its size was sized for one config (deny by default)."""
    if n_configs <= tuned_for:
        return None
    return BenchError(
        ErrorCode.INVALID_HPARAMS,
        f"The idea's HPARAMS give {n_configs} configurations, but {tuned_for} were declared "
        "before its matched baseline was tuned (the hparams field, else a literal HPARAMS dict in the "
        "file): the matched baseline's tuning budget must equal the idea's.",
        "Write HPARAMS as a literal dict at the top level of the file (or send hparams), so that the "
        "matched baseline is tuned on as many configurations.",
    )


# -- what the verdict is made of ----------------------------------------------------------------
def unchecked_at(lr: float, check: Mapping[str, Any] | None, lower_is_better: bool) -> bool:
    """Whether a matched baseline pinned by its check (``check``: ``matched_baseline_check``, with
    ``chosen``) is untrusted at ``lr``, the idea's, where the job trains it as the lr confound's
    guard (``lr_matched``'s ``pinned_baseline``). Its check measured it on test at its chosen
    config only: a matched baseline that was the track's model there and weak at every other lr
    turned the confound into ``helps`` (red team, session 36). Trusted at ``lr`` only where its
    check's sweep (validation, the sweep seeds: ``sweep``) holds its chosen hparams at ``lr`` no
    worse than the track's baseline's row at ``lr`` (``canonical_sweep``); no row at ``lr`` (an
    lr its check did not sweep): untrusted. No margin: a sandbag worse by 0.9 of the smallest
    effect there was trusted and lent the idea a win (red team). A file cannot
    tell the sweep's seeds or its validation split from the screening's test: what it does at
    an lr shows on validation too. False without a pinned check (the job swept the baseline)."""
    if not check or check.get("chosen") is None:
        return False
    hparams = dict(check["chosen"].get("hparams") or {})

    def mean_at(rows: Any, want: Mapping[str, Any]) -> float | None:
        wanted = json.dumps(dict(want), sort_keys=True)  # by type too: 1, 1.0 and True are three configs
        for row in rows or []:
            cfg = dict(row["cfg"])
            if math.isclose(float(cfg.pop("lr")), lr, rel_tol=1e-9) and json.dumps(
                    {k: v for k, v in cfg.items() if k not in ("epochs", "batch_size", "weight_decay")},
                    sort_keys=True) == wanted:
                value = float(row["mean"])
                return value if math.isfinite(value) else None
        return None

    matched, canonical = mean_at(check.get("sweep"), hparams), mean_at(check.get("canonical_sweep"), {})
    if matched is None or canonical is None:
        return True
    # no worse at all: a matched baseline worse there by just under m lent the idea that much
    # (red team, session 36); its check judged it at its chosen config alone
    return (matched > canonical) if lower_is_better else (matched < canonical)


def lr_matched(screening: Sequence[Comparison], baseline_lr: float, baseline_grid: Sequence[float],
               pinned_baseline: bool = False) -> bool | None:
    """Whether a win is free of the learning rate's confound: None when the arms chose one lr
    (``screening`` holds one test); else whether the idea also beat the baseline at its own lr;
    False whenever the baseline's best lr is at an edge of its extended grid, where its optimum
    may lie outside (a win may come from an under-tuned baseline, or from an idea that rescales
    its own weights, under Adam an effective learning rate of its own): such a win cannot be
    "helps" (lr_confounded).

    ``pinned_baseline``: the baseline is a matched one (an agent's own file) its check did not
    vouch for at the idea's lr (``unchecked_at``): its test there is no guard, so the arms' lrs
    must agree."""
    matched = None if len(screening) < 2 else stage_better(screening)
    if at_edge(float(baseline_lr), baseline_grid) or (pinned_baseline and matched is not None):
        return False
    return matched


def effect(comparison: Comparison, lower_is_better: bool) -> float:
    """The idea's gain, in the metric's units (positive: better)."""
    return -comparison.delta_mean if lower_is_better else comparison.delta_mean


def reaches(smallest: float, lower_is_better: bool, screening: Comparison,
            confirmation: Comparison | None, shortfall: float = 0.0) -> bool:
    """The idea's gain reaches the track's smallest effect in the screening and, when one ran,
    in the confirmation (each against the track's baseline): over the track's own baseline too,
    when a matched baseline stood in for it. ``shortfall``: how much worse than the track's
    baseline the matched one was in its check (``matched_baseline_check.worse_by``, on the
    screening's seeds and builds; 0 when it was better or there was none). Non-inferiority lets
    a matched baseline fall short by up to the smallest effect, so without it an agent's
    sandbagged matched baseline (worse by 0.9 m) turned an idea 0.6 m better than the track's
    baseline into ``helps`` (a win of 1.5 m over the sandbag): the gain counted is the gain over
    the sandbag less what the sandbag lost."""
    handicap = max(0.0, shortfall)
    return effect(screening, lower_is_better) - handicap >= smallest and (
        confirmation is None or effect(confirmation, lower_is_better) - handicap >= smallest)


def p_helps(screening: Sequence[Comparison], confirmation_p: float | None) -> float:
    """The evidence that the idea helps, for the false-discovery accounting across ideas: the
    screening's one-sided p (``screening``: its tests), or the larger of both stages' when a
    confirmation ran (``confirmation_p``, adjusted for its looks; a valid p-value: both must be
    small, P(max <= t) <= t under the null)."""
    p = stage_p(screening)
    return p if confirmation_p is None else max(p, confirmation_p)
