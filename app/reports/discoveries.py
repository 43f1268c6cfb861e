"""False-discovery accounting across ideas (issues 12 and 25; docs/statistics.md).

Every judged idea carries ``p_helps``: its one-sided exact p that it helps (the larger of
the screening's and the confirmation's when one ran: one consistent p across the looks).
The q-values are Benjamini-Hochberg's over a stream of hypotheses, recomputed on every read
from the ``(track, p_helps)`` index, so they reflect every idea stored up to that moment:

- a track's **canonical stream** holds the ideas judged against the track's own baseline,
  not those against a matched baseline (an agent's 20 junk wins over baselines of its own
  moved a track's q-values from 0.188 to 0.046, a discovery), not ``lr_confounded`` ones, and
  none judged under a weak sandbox (``Report.counted``);
- one **hypothesis per key and family**: the attempts of one idea family by one key are one
  hypothesis, whose p is Bonferroni's over them (``min(1, k * min p)``), so re-rolling an idea
  buys no discovery; every report of the family shows that hypothesis' q-value;
- the same over one baseline's stream (``q_value_baseline``): matched baselines each have
  their own, which never enters the canonical one;
- a stream is one track **version, seed epoch and device class** (issue 28.1): ideas judged on
  other data, other secret seeds or another device class are other experiments; a track's
  accounting (``per_track``) adds up its streams;
- reports on **public data** (cifar10: a file can embed what it evaluates; issue 25.4) enter
  no stream: they get no q-value and are never a discovery.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.reports import repository
from bench.stats import bh_qvalues

CANONICAL = "canonical"


@dataclass(frozen=True)
class QValues:
    """One report's q-values: in its track's canonical stream (None when it is not in it:
    a matched baseline's or an lr_confounded result), and in its baseline's stream."""

    track: float | None
    baseline: float | None


@dataclass(frozen=True)
class TrackDiscoveries:
    """A track's accounting over its canonical stream: how many hypotheses (key and family)
    entered, how many of those worked, and an upper estimate of the false discoveries among
    them (``q* x R``: q* the largest q-value of a worked hypothesis, R the hypotheses at or
    below it; BH bounds their expected false share by q*)."""

    judged: int
    worked: int
    q_max_worked: float | None
    expected_false_worked: float


@dataclass(frozen=True)
class _Row:
    report_id: str
    track: str
    baseline: str
    p: float
    worked: bool
    hypothesis: tuple[str, str]  # (key, family)
    detail: str | None
    stream: tuple[str, int | None, int | None, str]  # (track, version, seed epoch, device class)
    public_data: bool


def _rows(raw: Iterable[tuple[Any, ...]]) -> list[_Row]:
    return [_Row(r[0], r[1], r[2] or CANONICAL, float(r[3]), bool(r[4]), (str(r[5]), str(r[6] or r[0])), r[7],
                 (r[1], r[8], r[9], r[10] or "cpu"), bool(r[11]))
            for r in raw if not r[11]]


def _hypotheses(rows: list[_Row]) -> dict[tuple[str, str], tuple[float, bool, list[str]]]:
    """Each (key, family)'s p (Bonferroni over its attempts), whether any worked, its reports."""
    grouped: dict[tuple[str, str], list[_Row]] = defaultdict(list)
    for row in rows:
        grouped[row.hypothesis].append(row)
    return {h: (min(1.0, len(members) * min(m.p for m in members)), any(m.worked for m in members),
                [m.report_id for m in members]) for h, members in grouped.items()}


def stream_qvalues(attempts: Sequence[tuple[Hashable, float]]) -> list[float]:
    """The q-value of each attempt of one stream, in order: ``attempts`` are ``(hypothesis, p)``
    (the hypothesis a key and family), each hypothesis' p Bonferroni's over its attempts, BH over
    the hypotheses. The rule ``qvalues`` applies to stored reports, as a pure function
    (``benchmarks/null_stream.py``'s adaptive agent reads its own stream with it)."""
    rows = [_Row(str(i), "", CANONICAL, float(p), False, ("", repr(h)), None, ("", None, None, "cpu"), False)
            for i, (h, p) in enumerate(attempts)]
    q = _stream_q(rows)
    return [q[str(i)] for i in range(len(rows))]


def _stream_q(rows: list[_Row]) -> dict[str, float]:
    """BH q-values of ``rows``' hypotheses, by report id."""
    hypotheses = _hypotheses(rows)
    q = bh_qvalues([p for p, _, _ in hypotheses.values()])
    return {report_id: qi for qi, (_, _, ids) in zip(q, hypotheses.values(), strict=True) for report_id in ids}


def _canonical(row: _Row) -> bool:
    return row.baseline == CANONICAL and row.detail != "lr_confounded"


def qvalues(session: Session, tracks: set[str]) -> dict[str, QValues]:
    """The q-values of every judged report on ``tracks``, by report id."""
    rows = _rows(repository.p_helps_of_tracks(session, tracks))
    by_track: dict[tuple[Any, ...], list[_Row]] = defaultdict(list)
    by_baseline: dict[tuple[Any, ...], list[_Row]] = defaultdict(list)
    for row in rows:
        if row.detail == "lr_confounded":
            continue
        if _canonical(row):
            by_track[row.stream].append(row)
        by_baseline[(*row.stream, row.baseline)].append(row)
    track_q: dict[str, float] = {}
    for members in by_track.values():
        track_q.update(_stream_q(members))
    baseline_q: dict[str, float] = {}
    for members in by_baseline.values():
        baseline_q.update(_stream_q(members))
    return {row.report_id: QValues(track_q.get(row.report_id), baseline_q.get(row.report_id)) for row in rows}


def per_track(session: Session, tracks: set[str] | None) -> dict[str, TrackDiscoveries]:
    """Each track's accounting (``TrackDiscoveries``) over its canonical streams, added up."""
    rows = [r for r in _rows(repository.p_helps_of_tracks(session, tracks)) if _canonical(r)]
    by_stream: dict[tuple[Any, ...], list[_Row]] = defaultdict(list)
    for row in rows:
        by_stream[row.stream].append(row)
    out: dict[str, TrackDiscoveries] = {}
    for stream, members in by_stream.items():
        hypotheses = list(_hypotheses(members).values())
        q = bh_qvalues([p for p, _, _ in hypotheses])
        worked_q = [qi for qi, (_, worked, _) in zip(q, hypotheses, strict=True) if worked]
        q_star = max(worked_q) if worked_q else None
        below = sum(qi <= q_star for qi in q) if q_star is not None else 0
        expected = min(len(worked_q), q_star * below) if q_star is not None else 0.0
        found = TrackDiscoveries(len(hypotheses), len(worked_q), q_star, round(float(expected), 6))
        before = out.get(stream[0])
        if before is not None:  # another stream of the track: the counts add up, q* is the largest
            stars = [q for q in (before.q_max_worked, found.q_max_worked) if q is not None]
            found = TrackDiscoveries(before.judged + found.judged, before.worked + found.worked,
                                     max(stars) if stars else None,
                                     round(before.expected_false_worked + found.expected_false_worked, 6))
        out[stream[0]] = found
    return out
