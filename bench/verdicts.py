"""Verdicts: mechanism confirmation and the practical / system verdicts (PROTOCOL.md 4-5).

Pure: no torch, no I/O. The engine measures the mechanism quantity on every
final model of both arms; these functions turn numbers into decisions, so that
submitted code never decides its own confirmation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from bench.stats import VERDICT_BETTER, VERDICT_NONE, VERDICT_WORSE, paired_sign_flip_p

PracticalVerdict = Literal["helps", "harms", "inconclusive"]
SystemVerdict = Literal["worked", "partial", "failed"]

CLOSE_TO_RTOL = 0.05
CLOSE_TO_ATOL = 0.0

_PRACTICAL: dict[str, PracticalVerdict] = {
    VERDICT_BETTER: "helps",
    VERDICT_WORSE: "harms",
    VERDICT_NONE: "inconclusive",
}


def _finite(values: Sequence[float], name: str) -> list[float]:
    out = [float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} mechanism values must be finite")
    return out


def _number(expect: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = expect.get(key, default)
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expect kind {expect.get('kind')!r} needs a number {key!r}")
    if not math.isfinite(value):
        raise ValueError(f"expect {key!r} must be finite")
    return float(value)


def mechanism_confirmed(
    expect: Mapping[str, Any],
    idea_values: Sequence[float],
    baseline_values: Sequence[float],
    alpha: float = 0.05,
) -> tuple[bool, dict[str, Any]]:
    """Decide whether a declared mechanism expectation holds (docs/idea-contract.md).

    ``idea_values``, ``baseline_values``: the measured quantity on each final model,
    shape (n,) each, paired by seed. ``expect["kind"]`` is one of:

    - ``close_to``: ``|idea mean - target| <= atol + rtol * |target|`` (rtol 0.05, atol 0)
    - ``less_than`` / ``greater_than``: idea mean ``<`` / ``>`` ``value``
    - ``lower_than_baseline`` / ``higher_than_baseline``: one-sided exact paired
      sign-flip test of ``idea - baseline`` gives ``p <= alpha``

    For the first three, when ``baseline_values`` are given, the baseline's mean must *not*
    meet the same rule (``detail["baseline_meets_it"]``): a signature both arms show does
    not tell the idea's mechanism from the baseline's.

    ``baseline_values`` may be empty for the first three kinds. Returns
    ``(confirmed, detail)``; detail holds kind, rule, idea_mean, baseline_mean,
    p_value and p_method (None when no test is used), n. Raises ValueError for an
    unknown kind, a missing number, non-finite values or unpaired values.
    """
    idea = _finite(idea_values, "idea")
    base = _finite(baseline_values, "baseline")
    if not idea:
        raise ValueError("no idea mechanism values")
    kind = expect.get("kind")
    idea_mean = float(np.mean(idea))
    detail: dict[str, Any] = {
        "kind": kind,
        "idea_mean": idea_mean,
        "baseline_mean": float(np.mean(base)) if base else None,
        "p_value": None,
        "p_method": None,
        "n": len(idea),
    }
    if kind == "close_to":
        target = _number(expect, "target")
        rtol = _number(expect, "rtol", CLOSE_TO_RTOL)
        atol = _number(expect, "atol", CLOSE_TO_ATOL)
        bound = atol + rtol * abs(target)

        def meets(mean: float) -> bool:
            return abs(mean - target) <= bound

        detail["rule"] = (
            f"|idea mean - {target:g}| <= {bound:g} (atol {atol:g} + rtol {rtol:g} * |target|)"
        )
    elif kind in ("less_than", "greater_than"):
        value = _number(expect, "value")

        def meets(mean: float) -> bool:
            return mean < value if kind == "less_than" else mean > value

        detail["rule"] = f"idea mean {'<' if kind == 'less_than' else '>'} {value:g}"
    elif kind in ("lower_than_baseline", "higher_than_baseline"):
        if len(base) != len(idea) or len(idea) < 2:
            raise ValueError(
                f"{kind} needs paired idea and baseline values (n >= 2, equal lengths)"
            )
        diffs = np.asarray(idea) - np.asarray(base)
        alternative: Literal["less", "greater"] = (
            "less" if kind == "lower_than_baseline" else "greater"
        )
        p, method = paired_sign_flip_p(diffs, alternative=alternative)
        ok = p <= alpha
        detail.update(p_value=p, p_method=method)
        side = "lower" if alternative == "less" else "higher"
        detail["rule"] = (
            f"one-sided paired sign-flip test: idea {side} than baseline, p <= {alpha:g}"
        )
    else:
        raise ValueError(f"unknown expect kind {kind!r}")
    if kind in ("close_to", "less_than", "greater_than"):
        # A signature the baseline shows too is no evidence of the idea's mechanism (a claim
        # such as "less than 1e30" holds for any model): it must tell the idea from the baseline.
        ok = meets(idea_mean)
        if base:
            detail["baseline_meets_it"] = meets(float(np.mean(base)))
            detail["rule"] += ", and the baseline mean does not"
            ok = ok and not detail["baseline_meets_it"]
    return bool(ok), detail


def _practical_detail(comparison: Mapping[str, Any], smallest_effect: float) -> str:
    low, high = comparison.get("ci90_low"), comparison.get("ci90_high")
    if low is not None and high is not None and -smallest_effect <= low and high <= smallest_effect:
        return "negligible"
    mde = comparison.get("mde")
    if mde is not None and mde > smallest_effect:
        return "underpowered"
    return "inconclusive"


def system_verdict(helps: bool, mechanism_ok: int | None, self_measured: bool = False) -> SystemVerdict:
    """``worked`` when every declared claim holds, ``partial`` when one of two holds, else
    ``failed``. No mechanism declared: the only claim is that the idea helps (PROTOCOL.md 5).

    A ``self_measured`` mechanism is the idea's own number, which "never alone makes a
    verdict" (PROTOCOL.md 2): it can lower the verdict (an idea whose own measurement says
    its mechanism did not hold is ``partial`` even when it helps), never raise it above what
    the bench's numbers alone give (``worked`` when the idea helps, else ``failed``).
    """
    if self_measured and mechanism_ok is not None:
        return ("worked" if mechanism_ok == 1 else "partial") if helps else "failed"
    claims = [helps] if mechanism_ok is None else [helps, mechanism_ok == 1]
    if all(claims):
        return "worked"
    return "partial" if any(claims) else "failed"


def decide(
    comparison: Mapping[str, Any], mechanism_ok: int | None, smallest_effect: float,
    replicated: bool | None = None, lr_matched: bool | None = None, self_measured: bool = False,
    reaches: bool | None = None, weak_baseline: bool = False,
) -> dict[str, Any]:
    """Practical and system verdicts from a ``comparison`` block (PROTOCOL.md section 5).

    ``comparison`` needs ``verdict``; ``ci90_low``/``ci90_high`` and ``mde`` refine an
    inconclusive result when present. ``mechanism_ok``: 1 confirmed, 0 not, None
    when no mechanism was declared. ``smallest_effect``: the track's smallest effect of
    interest m (metric units, >= 0). ``replicated``: whether the confirmation stage
    (PROTOCOL.md 2.6) was significant in the screened direction; None when none ran (a
    report from before confirmation existed). A screened win that did not replicate is
    ``inconclusive`` with detail ``not_replicated``. ``lr_matched``: whether the screening's
    win also held against the baseline trained at the idea's learning rate (None: the arms
    shared it); when not, ``inconclusive`` with detail ``lr_confounded``. ``self_measured``:
    ``mechanism_ok`` came from the idea's own ``measure`` (``system_verdict``: it can only
    lower the verdict). ``reaches``: whether the effect's point estimate reached the smallest
    effect m in the screening and in the confirmation (PROTOCOL.md 5); when not, a significant
    win is ``inconclusive`` with detail ``below_effect`` (a 1e-7 relative gain on every seed
    is significant and helps nobody; an agent that tries thousands of ideas finds such wins).

    ``weak_baseline``: the baseline (a custom track's, its author's code) did not beat the
    bench's reference fits on every test seed of the job: a win over it is ``inconclusive``
    with detail ``weak_baseline`` (it comes before every other detail).

    Returns ``practical_verdict`` (helps / harms / inconclusive), ``practical_detail``
    (None for helps / harms; else "negligible" when the 90% CI lies inside [-m, m],
    else "underpowered" when mde > m, else "inconclusive"), ``system_verdict``
    (worked: helps and the mechanism is confirmed; partial: exactly one of the two
    claims holds; failed: neither; with no mechanism declared there is one claim,
    so worked when the idea helps, else failed, never partial) and ``worked``.
    """
    verdict = comparison.get("verdict")
    if verdict not in _PRACTICAL:
        raise ValueError(f"unknown comparison verdict {verdict!r}")
    if mechanism_ok not in (0, 1, None) or isinstance(mechanism_ok, float):
        raise ValueError(f"mechanism_ok must be 0, 1 or None, got {mechanism_ok!r}")
    if not (math.isfinite(smallest_effect) and smallest_effect >= 0):
        raise ValueError(f"smallest_effect must be finite and >= 0, got {smallest_effect!r}")
    practical = _PRACTICAL[verdict]
    detail = None if practical != "inconclusive" else _practical_detail(comparison, smallest_effect)
    if practical == "helps" and weak_baseline:
        practical, detail = "inconclusive", "weak_baseline"
    if practical == "helps" and lr_matched is False:
        practical, detail = "inconclusive", "lr_confounded"
    elif practical == "helps" and replicated is False:
        practical, detail = "inconclusive", "not_replicated"
    elif practical == "helps" and reaches is False:
        practical, detail = "inconclusive", "below_effect"
    system = system_verdict(practical == "helps", mechanism_ok, self_measured)
    return {
        "practical_verdict": practical,
        "practical_detail": detail,
        "system_verdict": system,
        "worked": system == "worked",
    }
