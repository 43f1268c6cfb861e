"""False-discovery accounting across ideas (issue 12; docs/statistics.md).

Every judged idea carries ``p_helps``: its one-sided exact p that it helps (the larger of
the screening's and the confirmation's when one ran). Over all ideas judged on a track so
far, and again over those judged against the same baseline, the Benjamini-Hochberg
q-value of each says at what false discovery rate it would count as a discovery. They
are recomputed on every read, from the ``(track, p_helps)`` index, so a q-value always
reflects every idea stored up to that moment (it can only grow as more ideas arrive).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.reports import repository
from bench.stats import bh_qvalues


@dataclass(frozen=True)
class QValues:
    """One report's q-values: over its track, and over its track and baseline."""

    track: float
    baseline: float


@dataclass(frozen=True)
class TrackDiscoveries:
    """A track's accounting: how many ideas entered, how many worked, and an upper estimate
    of the false discoveries among ``worked`` (``q* x R``: q* the largest q-value of a worked
    idea, R the ideas at or below it; BH bounds their expected false share by q*)."""

    judged: int
    worked: int
    q_max_worked: float | None
    expected_false_worked: float


def _groups(rows: Iterable[tuple[str, str, str | None, float, bool]], by_baseline: bool) -> dict[tuple[str, str | None], list[tuple[str, float, bool]]]:
    out: dict[tuple[str, str | None], list[tuple[str, float, bool]]] = defaultdict(list)
    for report_id, track, baseline, p, worked in rows:
        out[(track, baseline if by_baseline else None)].append((report_id, p, worked))
    return out


def _q_by_id(rows: list[tuple[str, str, str | None, float, bool]], by_baseline: bool) -> dict[str, float]:
    q: dict[str, float] = {}
    for members in _groups(rows, by_baseline).values():
        q.update(zip([m[0] for m in members], bh_qvalues([m[1] for m in members]), strict=True))
    return q


def qvalues(session: Session, tracks: set[str]) -> dict[str, QValues]:
    """The q-values of every judged report on ``tracks``, by report id."""
    rows = repository.p_helps_of_tracks(session, tracks)
    by_track, by_baseline = _q_by_id(rows, False), _q_by_id(rows, True)
    return {report_id: QValues(by_track[report_id], by_baseline[report_id]) for report_id in by_track}


def per_track(session: Session, tracks: set[str] | None) -> dict[str, TrackDiscoveries]:
    """Each track's accounting (``TrackDiscoveries``) over every idea judged on it so far."""
    rows = repository.p_helps_of_tracks(session, tracks)
    out = {}
    for (track, _), members in _groups(rows, False).items():
        q = bh_qvalues([m[1] for m in members])
        worked_q = [qi for qi, m in zip(q, members, strict=True) if m[2]]
        q_star = max(worked_q) if worked_q else None
        below = sum(qi <= q_star for qi in q) if q_star is not None else 0
        expected = min(len(worked_q), q_star * below) if q_star is not None else 0.0
        out[track] = TrackDiscoveries(len(members), len(worked_q), q_star, round(float(expected), 6))
    return out
