"""Exact paired statistics for the stage-2 protocol (PROTOCOL.md section 3).

Pure numpy/scipy: this module never imports torch. Everything is a function of
its arguments; the only randomness (the Monte Carlo branch above 16 pairs) comes
from an explicit ``np.random.Generator`` with a fixed default seed, so the same
inputs give the same numbers, bit for bit.

The test statistic is the sum (equivalently the mean) of the paired differences
``d_i = idea_i - baseline_i``. Under the null hypothesis each ``d_i`` is symmetric
about 0, so flipping any subset of signs is equally likely. For a sign pattern
``s`` with ``A = {i: s_i = +1}`` and ``B = {i: s_i = -1}``,
``|sum(s * (d - mu))| >= |sum(d - mu)|`` holds exactly when ``mu`` lies between
``mean(d[A])`` and ``mean(d[B])`` (always, when ``A`` or ``B`` is empty). Every
such interval contains ``mean(d)``, so the p-value as a function of ``mu`` falls
monotonically away from ``mean(d)`` and the test-inversion confidence set is an
interval whose ends are order statistics of those subset means: that is how
``sign_flip_ci`` computes it exactly, with no search.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

Alternative = Literal["two-sided", "less", "greater"]
FloatArray = NDArray[np.float64]

EXACT_MAX_N = 16
"""Up to this many pairs all 2^n sign patterns are enumerated."""
MC_DRAWS = 200_000
"""Monte Carlo draws above ``EXACT_MAX_N`` pairs (PROTOCOL asks for >= 100,000)."""
MC_SEED = 20240601
"""Seed of the default Monte Carlo generator."""
TIE_RTOL = 1e-12
"""Pattern sums within ``TIE_RTOL * sum(|d|)`` of the observed one count as ties."""
EFFECT_SIZE_CAP = 1e6
"""|Hedges' g| is capped here; it is what a nonzero mean with zero spread reports."""
CI90_ALPHA = 0.10

ALPHA = 0.05  # the protocol's level: each stage's test, the CI's 95 %
VERDICT_BETTER = "idea better (significant)"
VERDICT_WORSE = "idea worse (significant)"
VERDICT_NONE = "no significant win"

_MC_CHUNK = 8192  # rows per Monte Carlo block; fixed, so the draws never depend on memory


def _as_diffs(diffs: ArrayLike) -> FloatArray:
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"diffs must be a non-empty 1-D sequence, got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError("diffs must be finite (no NaN or inf)")
    return d


@lru_cache(maxsize=EXACT_MAX_N)
def _all_sign_patterns(n: int) -> FloatArray:
    """(2^n, n) matrix of +-1; row k flips position i when bit i of k is set (row 0: none)."""
    bits = (np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)[None, :]) & 1
    signs = 1.0 - 2.0 * bits.astype(np.float64)
    signs.flags.writeable = False
    return signs


def _sign_blocks(n: int, mc_draws: int, rng: np.random.Generator | None) -> Iterator[FloatArray]:
    """All 2^n patterns (n <= 16) or ``mc_draws`` random ones, in blocks of rows."""
    if n <= EXACT_MAX_N:
        yield _all_sign_patterns(n)
        return
    gen = rng if rng is not None else np.random.default_rng(MC_SEED)
    remaining = mc_draws
    while remaining > 0:
        rows = min(_MC_CHUNK, remaining)
        yield 1.0 - 2.0 * gen.integers(0, 2, size=(rows, n)).astype(np.float64)
        remaining -= rows


def _check_mc_draws(mc_draws: int) -> None:
    if int(mc_draws) != mc_draws or mc_draws < 1:
        raise ValueError(f"mc_draws must be a positive integer, got {mc_draws!r}")


def _method(n: int, mc_draws: int, rng: np.random.Generator | None) -> str:
    if n <= EXACT_MAX_N:
        return f"exact sign-flip (2^{n} = {2**n} patterns)"
    seed = f"seed {MC_SEED}" if rng is None else "caller's generator"
    return f"monte carlo sign-flip ({mc_draws} draws, {seed})"


def paired_sign_flip_p(
    diffs: ArrayLike,
    *,
    alternative: Alternative = "two-sided",
    rng: np.random.Generator | None = None,
    mc_draws: int = MC_DRAWS,
) -> tuple[float, str]:
    """Sign-flip permutation p-value of the mean of paired differences.

    ``diffs``: shape (n,), finite, ``d_i = idea_i - baseline_i``. For n <= 16 all
    2^n sign patterns are enumerated (exact; with no zero diffs ``p * 2^n`` is an
    even integer). Above that, ``mc_draws`` random patterns from ``rng`` (default: a
    fresh generator seeded with ``MC_SEED``) give ``(hits + 1) / (mc_draws + 1)``.
    ``alternative``: "two-sided" counts ``|mean(s*d)| >= |mean(d)|``, "greater"
    counts ``mean(s*d) >= mean(d)`` (small p: mean > 0), "less" counts
    ``mean(s*d) <= mean(d)`` (small p: mean < 0). Floating ties within
    ``TIE_RTOL * sum(|d|)`` count as extreme. All-zero diffs give p = 1.0.

    Returns ``(p, p_method)``, e.g. ``(0.0078125, "exact sign-flip (2^8 = 256 patterns)")``.
    """
    d = _as_diffs(diffs)
    _check_mc_draws(mc_draws)
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(f"alternative must be two-sided, less or greater, got {alternative!r}")
    n = d.size
    tol = TIE_RTOL * float(np.sum(np.abs(d)))
    observed = float(np.sum(d))
    hits = 0
    for signs in _sign_blocks(n, mc_draws, rng):
        sums = signs @ d
        if alternative == "two-sided":
            hits += int(np.count_nonzero(np.abs(sums) >= abs(observed) - tol))
        elif alternative == "greater":
            hits += int(np.count_nonzero(sums >= observed - tol))
        else:
            hits += int(np.count_nonzero(sums <= observed + tol))
    p = hits / 2**n if n <= EXACT_MAX_N else (hits + 1) / (mc_draws + 1)
    return min(float(p), 1.0), _method(n, mc_draws, rng)


def _covering_intervals(d: FloatArray, mc_draws: int) -> tuple[FloatArray, FloatArray, int, int]:
    """For each sign pattern, the closed interval of mu where it is at least as extreme.

    Returns ``(lo, hi, offset, total)``: p(d - mu) = (offset + #{lo <= mu <= hi}) / total.
    A subset sum within ``tol / 2`` of 0 is snapped to exactly 0: that is the tie rule of
    ``paired_sign_flip_p`` at mu = 0, so 0 is outside the interval set exactly when that
    function's p is small, and integer-like data keep their exact ends.
    """
    n = d.size
    half_tol = TIE_RTOL * float(np.sum(np.abs(d))) / 2.0
    los: list[FloatArray] = []
    his: list[FloatArray] = []
    for signs in _sign_blocks(n, mc_draws, None):
        plus = (signs > 0).astype(np.float64)
        minus = 1.0 - plus
        n_a = plus.sum(axis=1)
        n_b = minus.sum(axis=1)
        trivial = (n_a == 0) | (n_b == 0)
        sum_a = plus @ d
        sum_b = minus @ d
        sum_a[np.abs(sum_a) <= half_tol] = 0.0
        sum_b[np.abs(sum_b) <= half_tol] = 0.0
        mean_a = sum_a / np.where(n_a == 0, 1.0, n_a)
        mean_b = sum_b / np.where(n_b == 0, 1.0, n_b)
        lo = np.minimum(mean_a, mean_b)
        hi = np.maximum(mean_a, mean_b)
        los.append(np.where(trivial, -np.inf, lo))
        his.append(np.where(trivial, np.inf, hi))
    exact = n <= EXACT_MAX_N
    return (
        np.concatenate(los),
        np.concatenate(his),
        0 if exact else 1,
        2**n if exact else mc_draws + 1,
    )


def _min_covering(alpha: float, offset: int, total: int) -> int:
    """Smallest count k of covering patterns with (offset + k) / total > alpha."""
    k = max(0, math.floor(alpha * total) - offset - 1)
    while (offset + k) / total <= alpha:
        k += 1
    return k


def sign_flip_ci(
    diffs: ArrayLike, alpha: float = 0.05, *, mc_draws: int = MC_DRAWS
) -> tuple[float | None, float | None]:
    """Confidence interval of the mean diff by inverting the two-sided sign-flip test.

    ``diffs``: shape (n,), finite. Returns the closed interval ``[low, high]`` of all
    mu with ``paired_sign_flip_p(d - mu) > alpha`` (level ``1 - alpha``), computed
    exactly from subset means. Hence 0 lies outside ``[low, high]`` exactly when
    ``paired_sign_flip_p(d)[0] <= alpha``. A side with no finite bound (n too small
    for any p <= alpha, e.g. n <= 5 at alpha 0.05) is ``None``; all-zero diffs with
    n >= 6 give ``(0.0, 0.0)``. Above 16 pairs the same seeded Monte Carlo patterns
    as ``paired_sign_flip_p``'s default are used.
    """
    d = _as_diffs(diffs)
    _check_mc_draws(mc_draws)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    lo, hi, offset, total = _covering_intervals(d, mc_draws)
    k = _min_covering(alpha, offset, total)
    if k == 0:
        return None, None
    low = float(np.partition(lo, k - 1)[k - 1])
    high = float(-np.partition(-hi, k - 1)[k - 1])
    return (low if math.isfinite(low) else None), (high if math.isfinite(high) else None)


def hedges_g(diffs: ArrayLike) -> float:
    """Hedges' g of paired diffs (shape (n,), n >= 2): mean/sd * (1 - 3/(4(n-1)-1)).

    sd is the sample sd (ddof=1). Zero spread gives 0.0 for a zero mean and
    ``+-EFFECT_SIZE_CAP`` otherwise; |g| never exceeds the cap (no inf in JSON).
    """
    d = _as_diffs(diffs)
    if d.size < 2:
        raise ValueError("Hedges' g needs at least 2 diffs")
    n = d.size
    mean = float(np.mean(d))
    sd = float(np.std(d, ddof=1))
    correction = 1.0 - 3.0 / (4.0 * (n - 1) - 1.0)
    if sd == 0.0:
        return 0.0 if mean == 0.0 else math.copysign(EFFECT_SIZE_CAP, mean)
    g = mean / sd * correction
    return float(np.clip(g, -EFFECT_SIZE_CAP, EFFECT_SIZE_CAP))


def minimum_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest |delta| detectable with this power: (t_{1-alpha/2} + t_{power}) * sd / sqrt(n).

    t quantiles have n - 1 degrees of freedom; about 1.15 * sd at n = 8.
    """
    if n < 2:
        raise ValueError("the MDE needs at least 2 pairs")
    df = n - 1
    factor = float(sps.t.ppf(1.0 - alpha / 2.0, df) + sps.t.ppf(power, df))
    return factor * sd / math.sqrt(n)


def _as_metric(values: Sequence[float] | ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of per-seed values")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (score diverged runs before comparing)")
    return arr


def _pct(value: float, reference: float) -> float:
    return 100.0 * value / abs(reference) if reference != 0.0 else 0.0


@dataclass(frozen=True, slots=True)
class Comparison:
    """Paired statistics of ``idea - baseline`` for one test (``compare``): every field set,
    every float finite except a CI side that is unbounded (None, see ``sign_flip_ci``).
    Immutable: a decision reads it, nothing rewrites it. ``as_dict`` is the report's
    ``comparison`` block (``bench.report.Comparison`` reads it back, old reports too)."""

    delta_mean: float
    idea_wins: int
    n_pairs: int
    per_seed_diffs: tuple[float, ...]
    p_value: float  # two-sided
    p_method: str
    p_better: float  # one-sided, in the idea-better direction
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    t_ci_low: float
    t_ci_high: float
    ci90_low: float | None
    ci90_high: float | None
    effect_size: float
    rel_delta_pct: float
    mde: float
    mde_rel_pct: float
    baseline_mean: float
    idea_mean: float
    alpha: float
    verdict: str
    system_worked: bool

    @property
    def better(self) -> bool:
        """The idea is significantly better (two-sided test at ``alpha``, in its direction)."""
        return self.verdict == VERDICT_BETTER

    def as_dict(self) -> dict[str, Any]:
        """The block as JSON data, in the field order reports have always had."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["per_seed_diffs"] = list(self.per_seed_diffs)
        return out


def compare(
    baseline: Sequence[float] | ArrayLike,
    idea: Sequence[float] | ArrayLike,
    *,
    lower_is_better: bool = True,
    alpha: float = ALPHA,
) -> Comparison:
    """The paired test of per-seed test metrics (the report's ``comparison`` block).

    ``baseline``, ``idea``: shape (n,), n >= 2, paired by position (pair i shares
    seed i). Diffs are ``idea - baseline``. ``p_value`` is two-sided; ``p_better`` is the
    one-sided exact p in the idea-better direction (what confirmation and the false-discovery
    accounting use). Never NaN or inf. Raises ValueError on unequal lengths,
    fewer than 2 pairs or non-finite values.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    b = _as_metric(baseline, "baseline")
    i = _as_metric(idea, "idea")
    if b.size != i.size:
        raise ValueError(f"baseline has {b.size} values and idea {i.size}; they must pair up")
    if b.size < 2:
        raise ValueError("compare needs at least 2 pairs")
    d = i - b
    n = int(d.size)
    delta = float(np.mean(d))
    sd = float(np.std(d, ddof=1))
    baseline_mean = float(np.mean(b))
    p, p_method = paired_sign_flip_p(d)
    p_better, _ = paired_sign_flip_p(d, alternative="less" if lower_is_better else "greater")
    ci_low, ci_high = sign_flip_ci(d, alpha)
    ci90_low, ci90_high = sign_flip_ci(d, CI90_ALPHA)
    t_half = float(sps.t.ppf(1.0 - alpha / 2.0, n - 1)) * sd / math.sqrt(n)
    mde = minimum_detectable_effect(sd, n, alpha)
    wins = int(np.count_nonzero(d < 0 if lower_is_better else d > 0))
    idea_better = delta < 0 if lower_is_better else delta > 0
    if p <= alpha:
        verdict = VERDICT_BETTER if idea_better else VERDICT_WORSE
    else:
        verdict = VERDICT_NONE
    return Comparison(
        delta_mean=delta,
        idea_wins=wins,
        n_pairs=n,
        per_seed_diffs=tuple(float(x) for x in d),
        p_value=p,
        p_method=p_method,
        p_better=p_better,
        ci_low=ci_low,
        ci_high=ci_high,
        ci_level=1.0 - alpha,
        t_ci_low=delta - t_half,
        t_ci_high=delta + t_half,
        ci90_low=ci90_low,
        ci90_high=ci90_high,
        effect_size=hedges_g(d),
        rel_delta_pct=_pct(delta, baseline_mean),
        mde=mde,
        mde_rel_pct=_pct(mde, baseline_mean),
        baseline_mean=baseline_mean,
        idea_mean=float(np.mean(i)),
        alpha=float(alpha),
        verdict=verdict,
        system_worked=verdict == VERDICT_BETTER,
    )


def after_efficacy_look(comparison: Comparison, first_diffs: Sequence[float], lower_is_better: bool) -> Comparison:
    """``comparison`` (of a stage's means: each seed's repeat runs averaged) as the second test
    of a sequential stage whose first runs (``first_diffs``: each seed's first-run difference,
    idea - baseline, paired alike) were looked at first, with a stop for efficacy when every
    pair favoured the idea (``bench.decide.efficacy``: one-sided p = 1 / 2^n, the single most
    extreme sign pattern).

    Under the null the sign-flip group acts on each seed's first run and mean together, so on
    every orbit the stage rejects on the pattern that makes all first runs favour the idea (the
    efficacy stop) or on the means' extreme patterns. Counting that pattern among the means'
    whenever it is not one of them already keeps the union at the means' count: ``p_better``
    (and, for a gain, the two-sided ``p_value``) gain 1 / 2^n (2 / 2^n) then, and the verdict is
    decided on them. Exact for n <= EXACT_MAX_N; with a first difference of 0 no pattern makes
    every first run favour the idea, and nothing changes."""
    gains = np.asarray(comparison.per_seed_diffs, dtype=np.float64) * (-1.0 if lower_is_better else 1.0)
    first = np.asarray([float(v) for v in first_diffs], dtype=np.float64) * (-1.0 if lower_is_better else 1.0)
    n = gains.size
    if first.size != n:
        raise ValueError(f"{first.size} first-run differences for a test of {n} pairs")
    if n > EXACT_MAX_N or not np.all(first != 0):
        return comparison
    stop = np.where(first > 0, 1.0, -1.0)  # the pattern under which every first run favours the idea
    tol = TIE_RTOL * float(np.sum(np.abs(gains)))
    if float(stop @ gains) >= float(np.sum(gains)) - tol:
        return comparison  # already among the means' patterns at least as extreme
    extra = 1.0 / 2**n
    p_better = min(1.0, comparison.p_better + extra)
    p_value = min(1.0, comparison.p_value + 2 * extra) if float(np.sum(gains)) > 0 else comparison.p_value
    idea_better = float(np.sum(gains)) > 0
    verdict = (VERDICT_BETTER if idea_better else VERDICT_WORSE) if p_value <= comparison.alpha else VERDICT_NONE
    return replace(
        comparison, p_better=p_better, p_value=p_value, verdict=verdict, system_worked=verdict == VERDICT_BETTER,
        p_method=f"{comparison.p_method}; sequential: + 1 pattern for the first runs' efficacy stop")


HARMS_ON_FIRST_RUNS = "harms is judged on the first runs, which favoured the idea"
# what a report says of such a stage, in words (the summary, the dashboard)
HARMS_WHY = "its means came out worse, but harms is judged on each seed's first run, which favoured the idea"


def harms_judged_on_first_runs(comparison: Comparison) -> Comparison:
    """``comparison`` (of a stage's means) without a ``harms`` finding: a stage makes its repeat
    runs only when its first runs show the idea better on average (``bench.decide.repeats_futile``),
    so ``idea worse`` is decided on those first runs, in the stages that stop there. Under the
    null every pattern whose first runs are significantly worse is such a stop, so ``harms`` keeps
    exactly the one-run test's level; letting the means of a stage whose first runs favoured the
    idea report it too would add their chance of coming out significantly worse. The two-sided
    ``p_value`` stays, as a description; ``p_method`` says why the verdict is none."""
    if comparison.verdict != VERDICT_WORSE:
        return comparison
    return replace(comparison, verdict=VERDICT_NONE, system_worked=False,
                   p_method=f"{comparison.p_method}; {HARMS_ON_FIRST_RUNS}")


def bh_qvalues(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg q-values (adjusted p-values) of ``p_values``, in their order.

    ``q_(i) = min_{j >= i} min(1, m * p_(j) / j)`` over the p-values sorted ascending
    (ranks 1..m, ties share the smaller q): rejecting every hypothesis with ``q <= t``
    controls the false discovery rate at ``t`` for independent (or positively dependent)
    tests. Raises ValueError on a p outside [0, 1]; an empty list gives ``[]``.
    """
    p = np.asarray([float(v) for v in p_values], dtype=np.float64)
    if p.size == 0:
        return []
    if not np.all((p >= 0.0) & (p <= 1.0)):
        raise ValueError("p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    q_sorted = np.minimum.accumulate(scaled[::-1])[::-1]
    q = np.empty(m, dtype=np.float64)
    q[order] = np.minimum(q_sorted, 1.0)
    return [float(v) for v in q]


# The confirmation (PROTOCOL.md 2.6, docs/statistics.md) looks at most twice: at n fresh pairs,
# and, when that look is neither significant nor futile, at 2n (n more). The looks split alpha
# (a weighted Bonferroni): the first is tested at alpha / 5, the second, which has the power
# for the small effects the first misses, at 4 alpha / 5. Whatever the dependence between the
# looks (the second holds the first's pairs) the stage's size stays <= alpha, and its p-value
# is min(1, min_i p_i / share_i).
CONFIRMATION_SHARES = (0.2, 0.8)  # of alpha, per look
CONFIRMATION_LOOKS = len(CONFIRMATION_SHARES)
FUTILITY_P = 0.5  # a first look with one-sided p above this (the idea looked no better) stops


def confirmation_p(look_ps: Sequence[float]) -> float:
    """The confirmation's p-value from the one-sided p of each look that ran, in order: valid
    whatever the looks' dependence, since P(min_i p_i / w_i <= t) <= sum_i P(p_i <= w_i t)
    <= t sum_i w_i = t."""
    if not 1 <= len(look_ps) <= CONFIRMATION_LOOKS or not all(0.0 <= p <= 1.0 for p in look_ps):
        raise ValueError(f"expected 1 to {CONFIRMATION_LOOKS} p-values in [0, 1], got {list(look_ps)!r}")
    return min(1.0, min(float(p) / w for p, w in zip(look_ps, CONFIRMATION_SHARES, strict=False)))


def confirmation_continues(p_first: float, alpha: float) -> bool:
    """Whether the first look (one-sided p ``p_first``) calls for the second: not significant
    at its share of alpha, and not futile (p <= FUTILITY_P)."""
    return p_first > CONFIRMATION_SHARES[0] * alpha and p_first <= FUTILITY_P
