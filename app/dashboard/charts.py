"""The dashboard's charts as Plotly figures (plain JSON: ``data`` traces and a ``layout``).

Built here from the same objects the API returns (a report's body, a verdict summary, the
service state) and drawn in the browser by plotly.js, which ships inside the ``plotly``
package and is served by the dashboard itself (no CDN). Each function is pure, so a test
can check a chart's points without a browser.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from app.reports.schemas import VerdictSummary

PAIR_COLORS = {
    "worked/helps": "#1a9850", "partial/helps": "#91cf60", "partial/inconclusive": "#fee08b",
    "failed/inconclusive": "#bababa", "partial/harms": "#fc8d59", "failed/harms": "#d73027",
}
STAGE_COLORS = {"screening": "#2c7fb8", "confirmation": "#e6550d"}
BASELINE_COLOR = "#636363"
DAY_MS = 86_400_000
MAX_LABELLED = 4  # hyperparameters named in a sweep line's label at most
FONT = {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12}


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    return {"title": {"text": title, "x": 0, "font": {"size": 14}}, "font": FONT, "autosize": True,
            "margin": {"l": 56, "r": 16, "t": 40, "b": 48}, "legend": {"orientation": "h", "y": -0.18},
            "paper_bgcolor": "white", "plot_bgcolor": "white", **extra}


def plain(text: object, limit: int = 80) -> str:
    """Text a submission chose (a hyperparameter, a mechanism's name), made inert for Plotly,
    whose labels read a few HTML tags (links among them) and ``%{...}`` templates: tags and
    ``%`` become entities, shown as typed."""
    value = str(text)
    value = value if len(value) <= limit else value[: limit - 1] + "…"
    return html.escape(value, quote=False).replace("%", "&#37;")


def mapping(value: Any) -> dict[str, Any]:
    """``value`` if it is a dict, else an empty one (a report block of an unexpected shape)."""
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def _finite(values: Any) -> list[float | None]:
    return [_number(v) for v in values] if isinstance(values, list) else []


# --- verdict history -------------------------------------------------------------------------

def pair_order(pairs: set[str]) -> list[str]:
    """The verdict pairs in a stable order: the known ones best first, then any other."""
    return [p for p in PAIR_COLORS if p in pairs] + sorted(pairs - set(PAIR_COLORS))


def history_figure(summary: VerdictSummary) -> dict[str, Any]:
    """Stacked bars: reports per period and verdict pair, summed over the summary's tracks.
    A bar is drawn only where the count is not zero (so the points are the non-empty cells)."""
    cells: dict[str, dict[dt.date, int]] = defaultdict(lambda: defaultdict(int))
    for row in summary.rows:
        if row.period is None:
            continue
        for pair, n in row.counts.items():
            cells[pair][row.period] += n
    days = 7 if summary.bucket == "week" else 1
    data = []
    for pair in pair_order(set(cells)):
        points = sorted((p, n) for p, n in cells[pair].items() if n)
        data.append({"type": "bar", "name": plain(pair), "x": [_middle(p, days) for p, _ in points],
                     "y": [n for _, n in points], "width": 0.8 * days * DAY_MS,
                     "marker": {"color": PAIR_COLORS.get(pair, "#8073ac")},
                     "hovertemplate": f"{plain(pair)}: %{{y}}<extra>%{{x|%Y-%m-%d}}</extra>"})
    unit = "week (from Monday)" if summary.bucket == "week" else "day"
    return {"data": data, "layout": _layout(
        f"Reports by {unit} and verdict (system/practical)", barmode="stack",
        xaxis={"type": "date", "range": [summary.since.isoformat(),
                                          (summary.until + dt.timedelta(days=days)).isoformat()]},
        yaxis={"title": {"text": "reports"}, "rangemode": "tozero"})}


def _middle(period: dt.date, days: int) -> str:
    """The middle of a period that starts on ``period`` (a bar is centred on its x)."""
    start = dt.datetime(period.year, period.month, period.day)
    return (start + dt.timedelta(days=days) / 2).isoformat()


# --- one report ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StageValues:
    """One test stage of a report: paired per-seed values, seeds and comparison block."""

    name: str  # screening | confirmation
    baseline: list[float | None]
    idea: list[float | None]
    seeds: list[int]
    comparison: dict[str, Any]
    runs: tuple[int, ...] = ()  # runs per arm and seed of each look (a card's repeats; empty: one)

    @property
    def runs_text(self) -> str:
        """What one value is, where a seed ran more than once: "the mean of 4 runs per arm"."""
        if not any(n > 1 for n in self.runs):
            return ""
        if len(set(self.runs)) == 1:
            return f"each value the mean of {self.runs[0]} runs per arm"
        looks = ", ".join(f"look {i + 1}: {n} run{'s' if n > 1 else ''}" for i, n in enumerate(self.runs))
        return f"each value the mean of a seed's runs per arm ({looks})"

    @property
    def labels(self) -> list[str]:
        prefix = "S" if self.name == "screening" else "C"
        return [f"{prefix}{i + 1}" for i in range(len(self.baseline))]

    @property
    def diffs(self) -> list[float | None]:
        return [None if b is None or i is None else i - b for b, i in zip(self.baseline, self.idea, strict=False)]


def _arm_values(arm: Any) -> list[float | None]:
    arm = mapping(arm)
    return _finite(mapping(arm.get("full")).get("per_seed") or arm.get("per_seed"))


def stages_of(bench: dict[str, Any]) -> list[StageValues]:
    """Screening (from its ``screening`` block, or the top-level arms of an older report) and,
    when one ran, the confirmation."""
    out = []
    made = mapping(mapping(bench.get("budget")).get("repeats_made"))
    screening = bench.get("screening")
    if isinstance(screening, dict):
        out.append(_stage("screening", screening, made.get("screening")))
    else:
        out.append(StageValues("screening", _arm_values(bench.get("baseline")), _arm_values(bench.get("idea")),
                               _int_list(mapping(bench.get("seeds")).get("final")), mapping(bench.get("comparison"))))
    confirmation = bench.get("confirmation")
    if isinstance(confirmation, dict):
        out.append(_stage("confirmation", confirmation, made.get("confirmation")))
    return [s for s in out if s.baseline or s.idea]


def _int_list(value: Any) -> list[int]:
    return [int(v) for v in value if isinstance(v, int)] if isinstance(value, list) else []


def _stage(name: str, block: dict[str, Any], runs: Any = None) -> StageValues:
    per = mapping(block.get("per_seed"))
    return StageValues(name, _finite(per.get("baseline") or per.get("matched")), _finite(per.get("idea")),
                       _int_list(block.get("seeds")), mapping(block.get("comparison")), tuple(_int_list(runs)))


def _seed_text(stage: StageValues) -> list[str]:
    return [f"{stage.name} seed {stage.seeds[i]}" if i < len(stage.seeds) else stage.name
            for i in range(len(stage.baseline))]


def paired_figure(stages: list[StageValues], metric: str) -> dict[str, Any]:
    """Both arms' test values per seed, a line joining each pair; screening seeds (S1..) and
    confirmation seeds (C1..) in their own colours. Markers: 2 per paired seed."""
    data: list[dict[str, Any]] = []
    for stage in stages:
        color = STAGE_COLORS.get(stage.name, "#756bb1")
        xs: list[str | None] = []
        ys: list[float | None] = []
        for label, b, i in zip(stage.labels, stage.baseline, stage.idea, strict=False):
            xs += [label, label, None]
            ys += [b, i, None]
        data.append({"type": "scatter", "mode": "lines", "x": xs, "y": ys, "hoverinfo": "skip",
                     "line": {"color": color, "width": 2}, "showlegend": False, "name": f"{stage.name} pairs"})
        text = _seed_text(stage)
        data.append({"type": "scatter", "mode": "markers", "name": f"baseline ({stage.name})",
                     "x": stage.labels, "y": stage.baseline, "text": text,
                     "marker": {"color": BASELINE_COLOR, "size": 9, "symbol": "circle"},
                     "hovertemplate": "baseline %{y:.5g}<extra>%{text}</extra>"})
        data.append({"type": "scatter", "mode": "markers", "name": f"idea ({stage.name})",
                     "x": stage.labels, "y": stage.idea, "text": text,
                     "marker": {"color": color, "size": 10, "symbol": "diamond"},
                     "hovertemplate": "idea %{y:.5g}<extra>%{text}</extra>"})
    return {"data": data, "layout": _layout(
        f"Test {plain(metric)} per paired seed (S: screening, C: confirmation)", xaxis={"type": "category"},
        yaxis={"title": {"text": plain(metric)}})}


def diffs_figure(stages: list[StageValues], comparison: dict[str, Any], direction: str) -> dict[str, Any]:
    """Per-seed differences idea - baseline, the CI of the deciding comparison as a band, its
    mean as a line, and the MDE as dashed lines at +-MDE around zero."""
    data = []
    labels: list[str] = []
    for stage in stages:
        labels += stage.labels
        data.append({"type": "scatter", "mode": "markers", "name": f"idea - baseline ({stage.name})",
                     "x": stage.labels, "y": stage.diffs, "text": _seed_text(stage),
                     "marker": {"color": STAGE_COLORS.get(stage.name, "#756bb1"), "size": 10},
                     "hovertemplate": "%{y:.4g}<extra>%{text}</extra>"})
    shapes: list[dict[str, Any]] = [_hline(0.0, "#000000", "solid", 1)]
    low, high = _number(comparison.get("ci_low")), _number(comparison.get("ci_high"))
    if low is not None and high is not None:
        shapes.append({"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": low, "y1": high,
                       "fillcolor": "rgba(44,127,184,0.15)", "line": {"width": 0}, "layer": "below"})
    mean = _number(comparison.get("delta_mean"))
    if mean is not None:
        shapes.append(_hline(mean, "#2c7fb8", "solid", 2))
    mde = _number(comparison.get("mde"))
    if mde is not None and mde > 0:
        shapes += [_hline(mde, "#7b3294", "dash", 1), _hline(-mde, "#7b3294", "dash", 1)]
    better = "below 0" if "lower" in direction or direction.startswith("min") else "above 0"
    return {"data": data, "layout": _layout(
        f"idea - baseline per seed ({better} favours the idea)", shapes=shapes, xaxis={"type": "category", "categoryarray": labels},
        yaxis={"title": {"text": "difference"}, "zeroline": False})}


def _hline(y: float, color: str, dash: str, width: int) -> dict[str, Any]:
    return {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": y, "y1": y,
            "line": {"color": color, "dash": dash, "width": width}}


def _sweep_rows(rows: Any) -> list[tuple[dict[str, Any], float, float]]:
    """(cfg, lr, mean) of the sweep rows that have a positive lr and a finite mean."""
    out = []
    for row in rows if isinstance(rows, list) else []:
        cfg = mapping(mapping(row).get("cfg"))
        lr, mean = _number(cfg.get("lr")), _number(mapping(row).get("mean"))
        if lr is not None and lr > 0 and mean is not None:
            out.append((cfg, lr, mean))
    return out


def sweep_figure(bench: dict[str, Any], metric: str) -> dict[str, Any]:
    """Both arms' sweeps: mean validation metric against lr (log axis), one line per arm (and
    per value of the other hyperparameters that vary), the chosen config as a star."""
    baseline, idea = mapping(bench.get("baseline")), mapping(bench.get("idea"))
    arms = [("baseline", _sweep_rows(baseline.get("sweep")), baseline.get("best_cfg"), BASELINE_COLOR),
            ("idea", _sweep_rows(idea.get("sweep") or bench.get("idea_sweep")),
             idea.get("best_cfg") or bench.get("best_idea_cfg"), STAGE_COLORS["screening"])]
    cfgs = [cfg for _, rows, _, _ in arms for cfg, _, _ in rows]
    keys = set().union(*cfgs) - {"lr"} if cfgs else set()
    varying = sorted(k for k in keys if len({repr(cfg.get(k)) for cfg in cfgs}) > 1)[:MAX_LABELLED]
    data: list[dict[str, Any]] = []
    for arm, rows, best, color in arms:
        groups: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
        chosen = None
        for cfg, lr, mean in rows:
            group = tuple(repr(cfg.get(k)) for k in varying)
            groups[group].append((lr, mean))
            if best is not None and cfg == best:
                chosen = (lr, mean, _label(cfg, varying))
        for group, points in sorted(groups.items()):
            points.sort()
            rest = _label(dict(zip(varying, group, strict=True)), varying, raw=True)
            data.append({"type": "scatter", "mode": "lines+markers", "name": f"{arm} {rest}".strip(),
                         "x": [p[0] for p in points], "y": [p[1] for p in points],
                         "line": {"color": color}, "marker": {"color": color, "size": 7},
                         "hovertemplate": f"{arm} lr=%{{x:.3g}}: %{{y:.5g}}<extra>{rest}</extra>"})
        if chosen is not None:
            data.append({"type": "scatter", "mode": "markers", "name": f"{arm} chosen",
                         "x": [chosen[0]], "y": [chosen[1]],
                         "marker": {"color": color, "size": 16, "symbol": "star", "line": {"color": "black",
                                                                                            "width": 1}},
                         "hovertemplate": f"{arm} chosen: lr=%{{x:.3g}} {chosen[2]}: %{{y:.5g}}<extra></extra>"})
    return {"data": data, "layout": _layout(
        f"Sweep: mean validation {plain(metric)} against learning rate", xaxis={"type": "log", "title": {"text": "lr"}},
        yaxis={"title": {"text": plain(metric)}})}


def _label(cfg: dict[str, Any], keys: list[str], raw: bool = False) -> str:
    """``k=v`` of ``keys`` (values already ``repr``-ed when ``raw``), made inert (``plain``)."""
    return plain(", ".join(f"{k}={cfg.get(k) if raw else repr(cfg.get(k))}" for k in keys), 120)


def mechanism_figure(signature: Any) -> dict[str, Any] | None:
    """Both arms' measured mechanism values (one point per trained model), or None when none."""
    signature = mapping(signature)
    base, idea = _finite(signature.get("baseline_values")), _finite(signature.get("idea_values"))
    if not base and not idea:
        return None
    quantity = plain(signature.get("quantity") or "mechanism")
    data = [{"type": "box", "name": arm, "y": values, "boxpoints": "all", "pointpos": 0, "jitter": 0.3,
             "marker": {"color": color}, "line": {"color": color}}
            for arm, values, color in (("baseline", base, BASELINE_COLOR), ("idea", idea, STAGE_COLORS["screening"]))
            if values]
    return {"data": data, "layout": _layout(f"Mechanism: {quantity}", showlegend=False)}


# --- operator --------------------------------------------------------------------------------

def failures_figure(by_day: dict[dt.date, dict[str, int]], since: dt.date, until: dt.date) -> dict[str, Any]:
    """Stacked bars: failed jobs per day by error code, from ``since`` to ``until``."""
    codes = sorted({c for counts in by_day.values() for c in counts})
    data = []
    for code in codes:
        points = [(d, counts[code]) for d, counts in sorted(by_day.items()) if counts.get(code)]
        data.append({"type": "bar", "name": plain(code), "x": [_middle(d, 1) for d, _ in points],
                     "y": [n for _, n in points], "width": 0.8 * DAY_MS})
    return {"data": data, "layout": _layout(
        "Failed jobs per day by error code", barmode="stack",
        xaxis={"type": "date", "range": [since.isoformat(), (until + dt.timedelta(days=1)).isoformat()]},
        yaxis={"title": {"text": "jobs"}, "rangemode": "tozero"})}
