"""False-discovery accounting across ideas (issues 12 and 25; docs/statistics.md).

Every judged idea carries ``p_helps``: its one-sided exact p that it helps (the larger of
the screening's and the confirmation's when one ran: one consistent p across the looks).
The q-values are Benjamini-Hochberg's over a stream of hypotheses, and reflect every idea
stored up to the moment of the read:

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

**Kept between reads** (issue 28.9). A read used to fetch every counted report of the page's
tracks and redo the procedure: at 100,000 reports on one track that was about 0.3 s of Python
alone per listing, at a million 3.5 s. Now each API process keeps, per track, every stream's
hypotheses' p-values sorted with their q-values (``_Curve``) and the track's accounting, built
from one grouped query (``_build``), for as long as the track's token
(``app.reports.models.ReportStream``) is the one it was built at: the token changes in every
transaction that stores, changes or removes a report on the track. A page then needs one
query for its own hypotheses (their attempts and smallest p) and a binary search per report.
The token is read before and after; a page whose hypotheses are not in the curves (a report
committed in between) or whose token moved is answered by the whole procedure
(``qvalues_from_scratch``), the reference the kept path is tested against.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Engine, case, func, or_, select
from sqlalchemy.orm import Session

from app.reports import repository
from app.reports.models import Report, ReportStream
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


def qvalues_from_scratch(session: Session, tracks: set[str]) -> dict[str, QValues]:
    """The q-values of every judged report on ``tracks``, by report id, from every counted
    report (the reference ``qvalues`` keeps between reads)."""
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


def per_track_from_scratch(session: Session, tracks: set[str] | None) -> dict[str, TrackDiscoveries]:
    """Each track's accounting (``TrackDiscoveries``) over its canonical streams, added up,
    from every counted report (the reference ``per_track`` keeps between reads)."""
    rows = [r for r in _rows(repository.p_helps_of_tracks(session, tracks)) if _canonical(r)]
    by_stream: dict[tuple[Any, ...], list[_Row]] = defaultdict(list)
    for row in rows:
        by_stream[row.stream].append(row)
    out: dict[str, TrackDiscoveries] = {}
    for stream, members in by_stream.items():
        hypotheses = list(_hypotheses(members).values())
        found = _accounting([p for p, _, _ in hypotheses], [worked for _, worked, _ in hypotheses])
        out[stream[0]] = _add(out.get(stream[0]), found)
    return out


def _accounting(ps: Sequence[float], worked: Sequence[bool]) -> TrackDiscoveries:
    """One stream's accounting from its hypotheses' p and whether each worked."""
    q = bh_qvalues(ps)
    worked_q = [qi for qi, w in zip(q, worked, strict=True) if w]
    q_star = max(worked_q) if worked_q else None
    below = sum(qi <= q_star for qi in q) if q_star is not None else 0
    expected = min(len(worked_q), q_star * below) if q_star is not None else 0.0
    return TrackDiscoveries(len(ps), len(worked_q), q_star, round(float(expected), 6))


def _add(before: TrackDiscoveries | None, found: TrackDiscoveries) -> TrackDiscoveries:
    """Another stream of the track: the counts add up, q* is the largest."""
    if before is None:
        return found
    stars = [q for q in (before.q_max_worked, found.q_max_worked) if q is not None]
    return TrackDiscoveries(before.judged + found.judged, before.worked + found.worked,
                            max(stars) if stars else None,
                            round(before.expected_false_worked + found.expected_false_worked, 6))


# ---- kept between reads (issue 28.9) ----

# (version, seed epoch, device class, baseline, key, family or report id): one hypothesis
Hypothesis = tuple[Any, ...]
_CACHED_TRACKS = 1024  # per database, least recently used first out


@dataclass(frozen=True)
class _Curve:
    """One stream's hypotheses' p-values, ascending, and their q-values (ties share one)."""

    p: np.ndarray
    q: np.ndarray

    @classmethod
    def of(cls, ps: Sequence[float]) -> _Curve:
        p = np.sort(np.asarray(ps, dtype=np.float64), kind="stable")
        return cls(p, np.asarray(bh_qvalues(p.tolist()), dtype=np.float64))

    def q_of(self, p: float) -> float | None:
        """The q-value of a hypothesis of this stream whose p is ``p`` (None: no such p here)."""
        i = int(np.searchsorted(self.p, p, side="right")) - 1
        return float(self.q[i]) if i >= 0 and self.p[i] == p else None


@dataclass(frozen=True)
class _TrackState:
    """A track's streams as of one token: the canonical curves by (version, epoch, device), the
    baseline curves by (version, epoch, device, baseline), and the track's accounting."""

    token: str | None
    canonical: dict[tuple[Any, ...], _Curve]
    baselines: dict[tuple[Any, ...], _Curve]
    accounting: TrackDiscoveries | None


_LOCK = threading.Lock()
_CACHE: weakref.WeakKeyDictionary[Engine, OrderedDict[str, _TrackState]] = weakref.WeakKeyDictionary()


def _judged() -> list[Any]:
    """The reports that enter streams: counted, with a p_helps, not on public data, not
    ``lr_confounded``."""
    return [Report.counted.is_(True), Report.p_helps.is_not(None), Report.public_data.is_(False),
            or_(Report.practical_detail.is_(None), Report.practical_detail != "lr_confounded")]


def _hypothesis_query(*where: Any) -> Any:
    """``(track, version, epoch, device, baseline, key, family or id, attempts, min p, any
    worked)`` per hypothesis of the reports ``where`` selects."""
    baseline = func.coalesce(func.nullif(Report.baseline, ""), CANONICAL)  # as ``_rows`` reads them
    family = func.coalesce(func.nullif(Report.family, ""), Report.id)
    keys = (Report.track, Report.track_version, Report.seed_epoch, Report.device_class, baseline,
            Report.submitter_id, family)
    return (select(*keys, func.count(), func.min(Report.p_helps), func.max(case((Report.worked, 1), else_=0)))
            .where(*_judged(), *where).group_by(*keys))


def _hypothesis_p(attempts: int, smallest: float) -> float:
    return min(1.0, attempts * float(smallest))


def _build(session: Session, tracks: Iterable[str], tokens: dict[str, str]) -> dict[str, _TrackState]:
    """Each of ``tracks``' state from one grouped query (its token: ``tokens``' entry)."""
    canonical: dict[str, dict[tuple[Any, ...], tuple[list[float], list[bool]]]] = defaultdict(dict)
    baselines: dict[str, dict[tuple[Any, ...], list[float]]] = defaultdict(dict)
    wanted = sorted(set(tracks))
    for track, version, epoch, device, baseline, _key, _family, n, smallest, worked in session.execute(
            _hypothesis_query(Report.track.in_(wanted))):
        stream, p = (version, epoch, device or "cpu"), _hypothesis_p(n, smallest)
        if baseline == CANONICAL:
            ps, works = canonical[track].setdefault(stream, ([], []))
            ps.append(p)
            works.append(bool(worked))
        baselines[track].setdefault((*stream, baseline), []).append(p)
    out: dict[str, _TrackState] = {}
    for track in wanted:
        curves = {stream: _Curve.of(ps) for stream, (ps, _) in canonical[track].items()}
        accounting = None
        for ps, works in canonical[track].values():
            accounting = _add(accounting, _accounting(ps, works))
        others = {key: curves[key[:3]] if key[3] == CANONICAL else _Curve.of(ps)
                  for key, ps in baselines[track].items()}
        out[track] = _TrackState(tokens.get(track), curves, others, accounting)
    return out


def _tokens(session: Session, tracks: set[str] | None) -> dict[str, str]:
    stmt = select(ReportStream.track, ReportStream.token)
    if tracks is not None:
        stmt = stmt.where(ReportStream.track.in_(sorted(tracks)))
    return {track: token for track, token in session.execute(stmt)}


def _states(session: Session, tracks: set[str], tokens: dict[str, str]) -> dict[str, _TrackState]:
    """``tracks``' states: kept ones whose token is current, the others built (and kept when
    the track has a token)."""
    bind = session.get_bind()
    engine = bind if isinstance(bind, Engine) else bind.engine
    with _LOCK:
        kept = _CACHE.setdefault(engine, OrderedDict())
        found = {t: kept[t] for t in tracks if t in kept and kept[t].token is not None and kept[t].token == tokens.get(t)}
        for t in found:
            kept.move_to_end(t)
    missing = tracks - found.keys()
    if missing:
        built = _build(session, missing, tokens)
        found.update(built)
        with _LOCK:
            for t, state in built.items():
                if state.token is not None:
                    kept[t] = state
                    kept.move_to_end(t)
            while len(kept) > _CACHED_TRACKS:
                kept.popitem(last=False)
    return found


def qvalues(session: Session, reports: Sequence[Report]) -> dict[str, QValues]:
    """The q-values of ``reports`` (a page), by report id, over everything stored now."""
    judged = [r for r in reports if r.counted is not False and r.p_helps is not None and not r.public_data
              and r.practical_detail != "lr_confounded"]
    if not judged:
        return {}
    tracks = {r.track for r in judged}
    tokens = _tokens(session, tracks)
    states = _states(session, tracks, tokens)
    families = sorted({r.family for r in judged if r.family})
    lone = sorted({r.id for r in judged if not r.family})
    attempts = {tuple(row[:7]): (row[7], row[8]) for row in session.execute(_hypothesis_query(
        Report.track.in_(sorted(tracks)), Report.submitter_id.in_(sorted({r.submitter_id for r in judged})),
        or_(Report.family.in_(families), Report.id.in_(lone))))}
    out: dict[str, QValues] = {}
    for r in judged:
        stream = (r.track_version, r.seed_epoch, r.device_class or "cpu")
        baseline = r.baseline or CANONICAL
        found = attempts.get((r.track, *stream, baseline, r.submitter_id, r.family or r.id))
        state = states[r.track]
        base_curve = state.baselines.get((*stream, baseline))
        if found is None or base_curve is None:
            return qvalues_from_scratch(session, tracks)
        p = _hypothesis_p(*found)
        q_base = base_curve.q_of(p)
        q_track = base_curve.q_of(p) if baseline == CANONICAL else None
        if q_base is None:
            return qvalues_from_scratch(session, tracks)
        out[r.id] = QValues(q_track, q_base)
    if _tokens(session, tracks) != tokens:  # a report stored meanwhile: answer from one snapshot
        return qvalues_from_scratch(session, tracks)
    return out


def per_track(session: Session, tracks: set[str] | None) -> dict[str, TrackDiscoveries]:
    """Each track's accounting (``TrackDiscoveries``) over its canonical streams, added up
    (``tracks`` None: every track with a stream token)."""
    tokens = _tokens(session, tracks)
    wanted = set(tokens) if tracks is None else tracks
    return {t: state.accounting for t, state in _states(session, wanted, tokens).items()
            if state.accounting is not None}
