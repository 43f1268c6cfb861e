"""What the report page says in words: the test that decided, each stage's numbers labelled by
stage and by what they decided, and any value formatted for a person to read.

Pure functions over a report's ``bench_report`` (docs/statistics.md): the screening's test is
two-sided at alpha; when it finds the idea better, a confirmation on fresh seeds decides with a
one-sided test in the screened direction, at up to two looks whose levels share alpha. The
confirmation's own two-sided p and CI then decided nothing (they are descriptive), nor does the
pooled estimate over both stages' pairs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.stats import HARMS_ON_FIRST_RUNS, HARMS_WHY

DIGITS = 4  # significant digits of a number shown to a person


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def human(value: Any, digits: int = DIGITS) -> str:
    """``value`` as a person reads it: a float to ``digits`` significant digits (0.05 * 0.2 is
    "0.01", 641.0 is "641"), a bool "yes"/"no", none "–", a list joined by commas, a dict as
    "key value · key value"; text as it is (the page escapes it)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "∞" if value > 0 else "−∞"
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.{digits}g}"
    if isinstance(value, list | tuple):
        return ", ".join(human(v, digits) for v in value) or "–"
    if isinstance(value, dict):
        return " · ".join(f"{label(str(k))} {human(v, digits)}" for k, v in value.items()) or "–"
    return str(value)


def label(key: str) -> str:
    """A report field's name as words (``max_compute_ratio``: "max compute ratio")."""
    return key.replace("_", " ")


def entries(block: Any, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """A report block's fields as (label, value) pairs for a small definition list, values
    formatted by ``human`` (a nested block on one line); empty for anything but a dict."""
    return [(label(str(k)), human(v)) for k, v in _mapping(block).items() if k not in skip]


def method_of(comparison: Mapping[str, Any]) -> str:
    """How the comparison's p was computed, in a word: "exact", "Monte Carlo", or "" when the
    report does not say (the hand-run seed reports used Monte Carlo p-values)."""
    text = str(comparison.get("p_method") or "").lower()
    if "exact" in text:
        return "exact"
    if "monte" in text or "carlo" in text or "draws" in text:
        return "Monte Carlo"
    return ""


def level_of(comparison: Mapping[str, Any]) -> float | None:
    """The level a comparison was judged at: its ``alpha``, else 1 - its ``ci_level``."""
    alpha = _number(comparison.get("alpha"))
    if alpha is not None and 0 < alpha < 1:
        return alpha
    ci = _number(comparison.get("ci_level"))
    return 1.0 - ci if ci is not None and 0 < ci < 1 else None


@dataclass(frozen=True)
class Look:
    """One look of a confirmation: its pairs, its one-sided p, the level it was tested at."""

    n_pairs: int | None
    p: float | None
    level: float | None


@dataclass(frozen=True)
class Decision:
    """The test that decided the report's verdict, and what it found."""

    stage: str  # screening | confirmation
    sides: str  # two-sided | one-sided
    method: str  # exact | Monte Carlo | "" (not recorded)
    looks: list[Look]
    level: float | None  # the stage's level (alpha), shared among its looks
    p: float | None  # the deciding p (the confirmation's: adjusted for its looks)
    significant: bool | None
    outcome: str  # the screening's verdict, or replicated / not replicated
    matched_lr: float | None  # the baseline also ran at the idea's lr (the larger p counts)

    @property
    def test(self) -> str:
        """The deciding test in words: sidedness, method, direction, looks and level."""
        method = f"{self.method} " if self.method else ""
        words = f"{self.sides} {method}paired sign-flip test"
        if self.sides == "one-sided":
            words += " (idea better, the screened direction)"
        words += f", {self.looks_text}"
        words += f", at α = {human(self.level)}" if self.level is not None else ", level not recorded"
        levels = [look.level for look in self.looks]
        if levels and None not in levels and levels != [self.level]:
            words += (f" (looks at {' and '.join(human(x) for x in levels)})" if len(levels) > 1
                      else f" (its look at {human(levels[0])})")
        if not self.method:
            words += "; p method not recorded"
        return words

    @property
    def looks_text(self) -> str:
        """"1 look", "2 looks" (a report from before the looks were recorded: one)."""
        n = max(1, len(self.looks))
        return f"{n} look{'s' if n > 1 else ''}"

    @property
    def comparator(self) -> str:
        """"≤" when the deciding p is within the level, ">" when not, "" when either is unknown."""
        if self.p is None or self.level is None:
            return ""
        return "≤" if self.p <= self.level else ">"


def screening_of(bench: Mapping[str, Any]) -> dict[str, Any]:
    """The screening's comparison: its ``screening`` block's, or an older report's top-level one."""
    return _mapping(_mapping(bench.get("screening")).get("comparison")) or _mapping(bench.get("comparison"))


def confirmation_of(bench: Mapping[str, Any]) -> Decision | None:
    """The confirmation's one-sided test, its looks and its outcome; None when none ran."""
    confirmation = _mapping(bench.get("confirmation"))
    if not confirmation:
        return None
    comparison = _mapping(confirmation.get("comparison"))
    looks = [Look(x.get("n_pairs") if isinstance(x.get("n_pairs"), int) else None,
                  _number(x.get("p_better")), _number(x.get("alpha")))
             for x in (confirmation.get("looks") or []) if isinstance(x, dict)]
    significant = confirmation.get("significant")
    return Decision(
        stage="confirmation", sides="one-sided", method=method_of(comparison), looks=looks,
        level=level_of(comparison) or level_of(screening_of(bench)), p=_number(confirmation.get("p_value")),
        significant=significant if isinstance(significant, bool) else None,
        outcome="replicated" if significant is True else "not replicated",
        matched_lr=_number(_mapping(confirmation.get("matched_lr")).get("lr")))


def decision_of(bench: Mapping[str, Any]) -> Decision:
    """The deciding test of a ``bench_report``: its confirmation when ``decided_by`` says so and
    one is there, else its screening (an older report's top-level ``comparison``)."""
    confirmation = confirmation_of(bench)
    if bench.get("decided_by") == "confirmation" and confirmation is not None:
        return confirmation
    return screening_test(bench)


def screening_test(bench: Mapping[str, Any]) -> Decision:
    """The screening's two-sided test and its verdict (it decides unless a confirmation ran)."""
    screening = screening_of(bench)
    p = _number(screening.get("p_value"))
    verdict = str(screening.get("verdict") or "–")
    if HARMS_ON_FIRST_RUNS in str(screening.get("p_method") or ""):
        verdict += f" ({HARMS_WHY})"
    return Decision(
        stage="screening", sides="two-sided", method=method_of(screening),
        looks=[Look(screening.get("n_pairs") if isinstance(screening.get("n_pairs"), int) else None,
                    p, level_of(screening))],
        level=level_of(screening), p=p, significant=verdict.endswith("(significant)"), outcome=verdict,
        matched_lr=_number(_mapping(_mapping(bench.get("screening")).get("matched_lr")).get("lr")))


@dataclass(frozen=True)
class StageRow:
    """One row of the report's comparisons: a stage (or the pooled estimate), its comparison,
    what it decided in words, and whether its two-sided p and CI decided nothing."""

    name: str
    comparison: dict[str, Any]
    role: str
    descriptive: bool


def stage_rows(bench: Mapping[str, Any], decision: Decision) -> list[StageRow]:
    """The screening's, the confirmation's and the pooled comparison, each with its role."""
    screening = screening_of(bench)
    level = level_of(screening)
    at = f" at α = {human(level)}" if level is not None else ""
    rows = []
    if screening:
        role = (f"decided: two-sided{at}" if decision.stage == "screening"
                else f"screened: two-sided{at}; its significant win went to confirmation")
        rows.append(StageRow("screening", screening, role, descriptive=False))
    confirmation = confirmation_of(bench)
    if confirmation is not None:
        role = (f"{'decided' if decision.stage == 'confirmation' else 'ran'}: {confirmation.sides}, "
                f"{confirmation.looks_text}, {confirmation.outcome}; its two-sided p and CI are descriptive")
        rows.append(StageRow("confirmation", _mapping(_mapping(bench.get("confirmation")).get("comparison")), role,
                             descriptive=True))
    pooled = _mapping(bench.get("pooled"))
    if pooled:
        rows.append(StageRow("pooled", pooled, "descriptive: both stages' pairs pooled; decides nothing",
                             descriptive=True))
    return rows
