"""bench.stats: every property listed at the end of PROTOCOL.md, plus hand-computed cases."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from bench.report import Comparison
from bench.stats import (
    EFFECT_SIZE_CAP,
    MC_SEED,
    after_efficacy_look,
    compare,
    hedges_g,
    minimum_detectable_effect,
    paired_sign_flip_p,
    sign_flip_ci,
)


def p_of(d: object, **kwargs: object) -> float:
    return paired_sign_flip_p(d, **kwargs)[0]  # type: ignore[arg-type]


def zero_outside(ci: tuple[float | None, float | None]) -> bool:
    low, high = ci
    return (low is not None and 0.0 < low) or (high is not None and 0.0 > high)


def all_finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(all_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(all_finite(v) for v in value)
    return True


# --- the four exact p-values and the degenerate case ------------------------------------


@pytest.mark.parametrize(
    ("diffs", "k"),
    [
        ([1, 2, 3, 4, 5, 6, 7, 8], 2),
        ([-1, 2, 3, 4, 5, 6, 7, 8], 4),
        ([-1, -2, 3, 4, 5, 6, 7, 8], 10),
        ([1, 1, 1, 1, 1, 1, 1, -1], 18),
    ],
)
def test_exact_p_values(diffs: list[int], k: int) -> None:
    p, method = paired_sign_flip_p(diffs)
    assert p == k / 256
    assert method == "exact sign-flip (2^8 = 256 patterns)"


def test_all_eight_one_sign_is_exactly_2_over_256() -> None:
    assert p_of([-0.3, -0.1, -2.0, -1e-4, -5.0, -0.7, -0.2, -1.1]) == 0.0078125


def test_one_sided_p_values() -> None:
    d = [1, 2, 3, 4, 5, 6, 7, 8]
    assert p_of(d, alternative="greater") == 1 / 256
    assert p_of(d, alternative="less") == 1.0
    assert p_of([-x for x in d], alternative="less") == 1 / 256


def test_all_zero_diffs() -> None:
    assert paired_sign_flip_p([0.0] * 8)[0] == 1.0
    assert sign_flip_ci([0.0] * 8) == (0.0, 0.0)
    out = compare([0.5] * 8, [0.5] * 8).as_dict()
    assert out["p_value"] == 1.0
    assert out["verdict"] == "no significant win"
    assert out["effect_size"] == 0.0 and out["mde"] == 0.0
    assert all_finite(out)
    json.dumps(out, allow_nan=False)


def test_zero_baseline_mean_gives_zero_relative_numbers() -> None:
    out = compare([0.0] * 4, [1.0, 2.0, 3.0, 4.0]).as_dict()
    assert out["rel_delta_pct"] == 0.0 and out["mde_rel_pct"] == 0.0
    json.dumps(out, allow_nan=False)


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        paired_sign_flip_p([])
    with pytest.raises(ValueError):
        paired_sign_flip_p([1.0, float("nan")])
    with pytest.raises(ValueError):
        paired_sign_flip_p([1.0, 2.0], alternative="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        compare([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        compare([1.0], [2.0])
    with pytest.raises(ValueError):
        compare([1.0, 2.0], [1.0, float("inf")])


# --- structure of the exact p-value ------------------------------------------------------


def test_p_times_2n_is_even_integer_without_zero_diffs() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(2, 13))
        d = rng.normal(size=n)
        d[d == 0] = 0.5
        if rng.random() < 0.5:
            d = np.rint(d * 3) + np.sign(d)  # small integers, with ties
        count = p_of(d) * 2**n
        assert count == round(count) and round(count) % 2 == 0


def test_agrees_with_scipy_permutation_test() -> None:
    rng = np.random.default_rng(2)

    def mean_diff(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        return np.mean(x - y, axis=axis)

    for _ in range(40):
        n = int(rng.integers(3, 11))
        base = rng.normal(size=n)
        idea = base + rng.normal(0.3, 1.0, size=n)
        for alternative in ("two-sided", "less", "greater"):
            ref = sps.permutation_test(
                (idea, base),
                mean_diff,
                permutation_type="samples",
                n_resamples=np.inf,
                vectorized=True,
                alternative=alternative,
            )
            ours = p_of(idea - base, alternative=alternative)
            assert abs(ours - ref.pvalue) <= 1e-12


def test_symmetry_scale_and_order_invariance() -> None:
    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(2, 12))
        d = rng.normal(size=n) + rng.normal()
        p = p_of(d)
        assert p_of(-d) == p
        for c in (1e-6, 0.37, 3.0, 1e6):
            assert p_of(c * d) == p
        assert p_of(rng.permutation(d)) == p


# --- the test-inversion confidence interval ---------------------------------------------


def test_ci_hand_computed() -> None:
    # n = 6: reject when at most 3 of 64 patterns are as extreme; the ends are the means
    # of the 2nd-most-extreme subsets {1} and {6}.
    assert sign_flip_ci([1, 2, 3, 4, 5, 6]) == (1.0, 6.0)
    # 18/256 > 0.05: 0 is accepted and is the lower end (the subset {1, -1} has mean 0).
    assert sign_flip_ci([1, 1, 1, 1, 1, 1, 1, -1]) == (0.0, 1.0)
    # Too few pairs for any p <= 0.05 (min p = 2/32): the interval is unbounded.
    assert sign_flip_ci([1, 2, 3, 4, 5]) == (None, None)


def _vectors(rng: np.random.Generator, count: int) -> list[np.ndarray]:
    out = []
    for i in range(count):
        n = int(rng.integers(5, 11))
        kind = i % 4
        if kind == 0:
            out.append(rng.normal(0.8, 1.0, size=n))
        elif kind == 1:
            out.append(rng.integers(-2, 5, size=n).astype(float))  # ties and zeros
        elif kind == 2:
            out.append(np.round(rng.normal(0.2, 0.3, size=n), 1))  # near-ties in floating point
        else:
            out.append(rng.exponential(size=n) * rng.choice([-1.0, 1.0], size=n) + 0.5)
    return out


def test_zero_outside_ci_exactly_when_p_le_alpha() -> None:
    rng = np.random.default_rng(4)
    rejections = 0
    for d in _vectors(rng, 400):
        n = d.size
        p = p_of(d)
        # 0.05 and 0.10 plus an alpha that p can equal exactly (boundary convention)
        for alpha in (0.05, 0.10, 12 / 2**n if n >= 8 else 4 / 2**n):
            outside = zero_outside(sign_flip_ci(d, alpha))
            assert outside == (p <= alpha), (d.tolist(), alpha, p)
            rejections += outside
    assert rejections > 50  # the property was exercised on both sides


def test_ci_is_the_set_of_accepted_shifts() -> None:
    rng = np.random.default_rng(5)
    for d in _vectors(rng, 40):
        low, high = sign_flip_ci(d)
        if low is None or high is None:
            continue
        step = 1e-6 * (float(np.max(np.abs(d))) + 1.0)
        assert p_of(d - low) > 0.05 and p_of(d - high) > 0.05
        assert p_of(d - (low - step)) <= 0.05 and p_of(d - (high + step)) <= 0.05
        assert p_of(d - (low + high) / 2) > 0.05


# --- size under the null ----------------------------------------------------------------


def test_aa_false_positive_rate_matches_exact_size() -> None:
    rng = np.random.default_rng(6)
    runs, size = 2000, 12 / 256  # P(p <= 0.05) at n = 8 is exactly 12/256
    hits = sum(p_of(rng.normal(size=8)) <= 0.05 for _ in range(runs))
    sigma = math.sqrt(size * (1 - size) / runs)
    assert abs(hits / runs - size) <= 4 * sigma


# --- the Monte Carlo branch -------------------------------------------------------------


def _exact_p_integer(d: np.ndarray) -> float:
    """Exact two-sided p for integer diffs by convolution over the sum distribution."""
    total = int(np.sum(np.abs(d)))
    counts = np.zeros(2 * total + 1, dtype=np.int64)
    counts[total] = 1
    for x in np.abs(d).astype(int):
        counts = np.roll(counts, x) + np.roll(counts, -x)
    sums = np.arange(-total, total + 1)
    return float(counts[np.abs(sums) >= abs(int(np.sum(d)))].sum() / 2**d.size)


def test_monte_carlo_is_deterministic_and_close_to_exact() -> None:
    d = np.array([3, -1, 2, 4, -2, 1, 5, -3, 2, 1, -1, 4, 2, -4, 3, 1, 2, -2, 1, 3], dtype=float)
    p, method = paired_sign_flip_p(d)
    assert (p, method) == paired_sign_flip_p(d)
    assert method == f"monte carlo sign-flip (200000 draws, seed {MC_SEED})"
    exact = _exact_p_integer(d)
    assert abs(p - exact) <= 4 * math.sqrt(exact * (1 - exact) / 200_000) + 1e-5
    other, other_method = paired_sign_flip_p(d, rng=np.random.default_rng(7))
    assert "caller's generator" in other_method and abs(other - exact) < 0.01
    assert paired_sign_flip_p(np.arange(1.0, 17.0))[1] == "exact sign-flip (2^16 = 65536 patterns)"


def test_monte_carlo_ci_matches_its_p() -> None:
    rng = np.random.default_rng(8)
    for shift in (0.0, 0.45, 0.8):
        d = rng.normal(shift, 1.0, size=20)
        p = p_of(d, mc_draws=20_000)
        ci = sign_flip_ci(d, mc_draws=20_000)
        assert zero_outside(ci) == (p <= 0.05)


# --- compare ----------------------------------------------------------------------------


def test_mde_is_about_1_15_sd_at_n8() -> None:
    assert minimum_detectable_effect(1.0, 8) == pytest.approx(1.153, abs=2e-3)
    base = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    idea = [b + x for b, x in zip(base, [0.1, -0.2, 0.3, 0.0, 0.2, -0.1, 0.4, 0.1], strict=True)]
    sd = float(np.std(np.subtract(idea, base), ddof=1))
    assert compare(base, idea).mde == pytest.approx(1.153 * sd, rel=2e-3)


def test_compare_hand_computed() -> None:
    base = [10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]
    idea = [9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0]  # diffs -1..-8
    out = compare(base, idea).as_dict()
    assert out["per_seed_diffs"] == [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0]
    assert out["delta_mean"] == -4.5 and out["idea_wins"] == 8 and out["n_pairs"] == 8
    assert out["p_value"] == 2 / 256 and out["verdict"] == "idea better (significant)"
    assert out["system_worked"] is True
    assert out["rel_delta_pct"] == -45.0
    assert out["baseline_mean"] == 10.0 and out["idea_mean"] == 5.5
    assert out["ci_level"] == 0.95 and out["alpha"] == 0.05
    assert out["ci_high"] is not None and out["ci_high"] < 0
    assert out["ci90_low"] >= out["ci_low"] and out["ci90_high"] <= out["ci_high"]
    sd = math.sqrt(6.0)  # sample sd of 1..8
    half = sps.t.ppf(0.975, 7) * sd / math.sqrt(8)
    assert out["t_ci_low"] == pytest.approx(-4.5 - half)
    assert out["t_ci_high"] == pytest.approx(-4.5 + half)
    assert out["effect_size"] == pytest.approx(-4.5 / sd * (1 - 3 / 27))
    json.dumps(out, allow_nan=False)


def test_compare_direction_and_ties() -> None:
    base = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    idea = [2.0, 3.0, 2.5, 4.0, 1.0, 2.0, 3.0, 2.0]  # one tie, seven higher
    lower = compare(base, idea).as_dict()
    assert lower["idea_wins"] == 0 and lower["verdict"] == "idea worse (significant)"
    higher = compare(base, idea, lower_is_better=False).as_dict()
    assert higher["idea_wins"] == 7 and higher["verdict"] == "idea better (significant)"
    assert higher["per_seed_diffs"] == lower["per_seed_diffs"]  # always idea - baseline


def test_effect_size_never_infinite() -> None:
    assert hedges_g([0.5, 0.5, 0.5]) == EFFECT_SIZE_CAP
    assert hedges_g([-0.5, -0.5, -0.5]) == -EFFECT_SIZE_CAP
    assert hedges_g([0.0, 0.0]) == 0.0
    out = compare([1.0, 2.0, 3.0], [1.5, 2.5, 3.5]).as_dict()
    assert all_finite(out) and abs(out["effect_size"]) <= EFFECT_SIZE_CAP


def test_a_comparison_is_frozen_and_its_block_is_json() -> None:
    """``compare`` returns an immutable value (a decision reads it; nothing rewrites it), and its
    block holds exactly the report's comparison fields, in JSON types."""
    out = compare([1.0, 2.0, 3.0], [0.5, 1.5, 2.5])
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.p_value = 0.0  # type: ignore[misc]
    block = out.as_dict()
    assert isinstance(block["per_seed_diffs"], list) and block["per_seed_diffs"] == [-0.5, -0.5, -0.5]
    assert set(block) == set(Comparison.model_fields) - {"model_config"}
    assert Comparison.model_validate(block).model_dump() == block


def test_the_means_test_after_an_efficacy_look_counts_the_stop_it_passed() -> None:
    """Gains (idea better: positive). Seven first runs favour the idea, one not; every mean
    does. The means' own p is the top pattern alone (1/256); the stop's pattern (flip the eighth
    seed) is not among the means' patterns at least as extreme, so it counts: 2/256."""
    first, means = [1.0] * 7 + [-1.0], [1.0] * 7 + [5.0]
    plain = compare([0.0] * 8, [-m for m in means])  # MSE-like: idea - baseline = -gain
    after = after_efficacy_look(plain, [-f for f in first], lower_is_better=True)
    assert plain.p_better == pytest.approx(1 / 256) and after.p_better == pytest.approx(2 / 256)
    assert after.p_value == pytest.approx(plain.p_value + 2 / 256) and after.better
    # the stop's pattern already among the means' extremes (first runs favour where the means do): unchanged
    same = after_efficacy_look(plain, [-1.0] * 7 + [-0.5], lower_is_better=True)
    assert same == plain
    # a first difference of 0: no pattern makes every first run favour the idea, nothing to count
    assert after_efficacy_look(plain, [-f for f in first[:7]] + [0.0], lower_is_better=True) == plain
    with pytest.raises(ValueError):  # first runs of other pairs: a wrong look's, never silently ignored
        after_efficacy_look(plain, [-f for f in first[:7]], lower_is_better=True)


def test_a_stage_that_may_stop_for_efficacy_keeps_its_level_on_every_orbit() -> None:
    """Exactness: under the null the sign flips act on each seed's first run and mean together.
    On every orbit, the patterns that win (all first runs favour the idea: the stop; else the
    means' test with the stop's pattern counted) are at most the level's 6 of 256. Without the
    count the means' plain test wins on 7 of some orbits."""
    rng = np.random.default_rng(7)
    n, signs = 8, np.array([[1.0 if (k >> j) & 1 else -1.0 for j in range(8)] for k in range(256)])
    worst_adjusted = worst_plain = 0
    for _ in range(40):
        first = rng.normal(size=n)
        means = first / 2 + rng.normal(size=n) * 0.6  # a seed's mean holds its first run
        adjusted = plain = 0
        for s in signs:
            f, m = s * first, s * means
            if np.all(f > 0):  # the efficacy stop: significant on its own (2/256 two-sided)
                adjusted += 1
                plain += 1
                continue
            test = compare([0.0] * n, list(-m))
            plain += test.better
            adjusted += after_efficacy_look(test, list(-f), lower_is_better=True).better
        worst_adjusted, worst_plain = max(worst_adjusted, adjusted), max(worst_plain, plain)
    assert worst_adjusted <= 6 < worst_plain
