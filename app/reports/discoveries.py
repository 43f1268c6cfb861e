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
- the same over one baseline's stream (``q_value_baseline``): the ideas judged against any
  matched baseline share one (``matched``; before session 36 each matched baseline had its own,
  which a re-roll of its text could open afresh), which never enters the canonical one;
- a stream is one track **version, seed epoch and device class** (issue 28.1): ideas judged on
  other data, other secret seeds or another device class are other experiments; a track's
  accounting (``per_track``) adds up its streams;
- reports on **public data** (cifar10: a file can embed what it evaluates; issue 25.4) enter
  no stream: they get no q-value and are never a discovery.

**Kept between reads** (issue 28.9). A read used to fetch every counted report of the page's
tracks and redo the procedure: at 200,000 reports 2.4 s per listing, at a million 10.6 s
(``benchmarks/qvalue_scale.py``). Now each API process keeps, per track, every stream's
hypotheses' p-values sorted, whether each worked, and their q-values (``_Stream``), as of one
change of the track's stream (``app.reports.models.ReportStream``: ``seq`` counts the changes
in commit order, ``base`` changes with anything but a new report). A read whose track moved on
by new reports only adds them (``_advance``: their hypotheses' old values out, new ones in, the
q-values redone by numpy); anything else rebuilds the track from one grouped query (``_build``).
A page then needs one query for its own hypotheses (their attempts and smallest p) and a binary
search per report. The stream rows are read before and after: states are kept only when nothing
changed in between, and a page newer than its states is answered by the whole procedure
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
from sqlalchemy import Engine, and_, case, func, or_, select
from sqlalchemy.orm import Session

from app.reports import repository
from app.reports.models import WROTE_REPORTS, Report, ReportStream
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


@dataclass(frozen=True)
class StreamFilter:
    """Streams of one track version, seed epoch and/or device class (None: any)."""

    track_version: int | None = None
    seed_epoch: int | None = None
    device_class: str | None = None

    def admits(self, key: tuple[Any, ...]) -> bool:
        """Whether a stream ``(version, epoch, device)`` is one of these."""
        return all(want is None or want == have for want, have in
                   zip((self.track_version, self.seed_epoch, self.device_class), key[:3], strict=True))


def per_track_from_scratch(session: Session, tracks: set[str] | None,
                           stream: StreamFilter | None = None) -> dict[str, TrackDiscoveries]:
    """Each track's accounting (``TrackDiscoveries``) over its canonical streams (those
    ``stream`` admits), added up, from every counted report (the reference ``per_track``
    keeps between reads)."""
    rows = [r for r in _rows(repository.p_helps_of_tracks(session, tracks))
            if _canonical(r) and (stream is None or stream.admits(r.stream[1:]))]
    by_stream: dict[tuple[Any, ...], list[_Row]] = defaultdict(list)
    for row in rows:
        by_stream[row.stream].append(row)
    out: dict[str, TrackDiscoveries] = {}
    for key, members in sorted(by_stream.items(), key=lambda item: repr(item[0])):  # as ``_TrackState`` adds
        hypotheses = list(_hypotheses(members).values())
        found = _accounting([p for p, _, _ in hypotheses], [worked for _, worked, _ in hypotheses])
        out[key[0]] = _add(out.get(key[0]), found)
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

_CACHED_TRACKS = 1024  # per database, least recently used first out
_MAX_ADDED = 2000  # hypotheses changed since a kept state above which the track is rebuilt


def _bh_sorted(p: np.ndarray) -> np.ndarray:
    """``bench.stats.bh_qvalues`` of p-values already ascending, in that order (the same
    arithmetic, so the same floats)."""
    m = p.size
    if m == 0:
        return p.copy()
    return np.minimum(np.minimum.accumulate((p * m / np.arange(1, m + 1))[::-1])[::-1], 1.0)


@dataclass(frozen=True)
class _Stream:
    """One stream's hypotheses: their p ascending, whether each worked, their q-values."""

    p: np.ndarray
    worked: np.ndarray
    q: np.ndarray

    @classmethod
    def of(cls, ps: Sequence[float], works: Sequence[bool]) -> _Stream:
        order = np.argsort(np.asarray(ps, dtype=np.float64), kind="stable")
        p = np.asarray(ps, dtype=np.float64)[order]
        return cls(p, np.asarray(works, dtype=bool)[order], _bh_sorted(p))

    def q_of(self, p: float) -> float | None:
        """The q-value of a hypothesis of this stream whose p is ``p`` (None: no such p here)."""
        i = int(np.searchsorted(self.p, p, side="right")) - 1
        return float(self.q[i]) if i >= 0 and self.p[i] == p else None

    def changed(self, gone: list[tuple[float, bool]], added: list[tuple[float, bool]]) -> _Stream | None:
        """This stream without the hypotheses ``gone`` and with ``added`` ((p, worked) each);
        None when one of ``gone`` is not here (the kept state is not what the database held)."""
        drop: set[int] = set()
        for p, worked in gone:
            lo, hi = np.searchsorted(self.p, p, side="left"), np.searchsorted(self.p, p, side="right")
            found = next((i for i in range(int(lo), int(hi)) if i not in drop and bool(self.worked[i]) == worked),
                         None)
            if found is None:
                return None
            drop.add(found)
        keep_p, keep_w = np.delete(self.p, sorted(drop)), np.delete(self.worked, sorted(drop))
        added = sorted(added)
        new_p = np.asarray([a[0] for a in added], dtype=np.float64)
        at = np.searchsorted(keep_p, new_p, side="right")
        merged = np.insert(keep_p, at, new_p)
        return _Stream(merged, np.insert(keep_w, at, np.asarray([a[1] for a in added], dtype=bool)),
                       _bh_sorted(merged))

    def accounting(self) -> TrackDiscoveries:
        """The stream's accounting (``_accounting``'s, from the kept arrays)."""
        worked_q = self.q[self.worked]
        if worked_q.size == 0:
            return TrackDiscoveries(int(self.p.size), 0, None, 0.0)
        q_star = float(worked_q.max())
        below = int(np.count_nonzero(self.q <= q_star))
        return TrackDiscoveries(int(self.p.size), int(worked_q.size), q_star,
                                round(float(min(int(worked_q.size), q_star * below)), 6))


@dataclass(frozen=True)
class _TrackState:
    """A track's streams as of change ``seq`` under ``base`` (``ReportStream``): the canonical
    streams by (version, epoch, device), matched baselines' by (version, epoch, device,
    baseline), and the track's accounting."""

    seq: int
    base: str
    canonical: dict[tuple[Any, ...], _Stream]
    matched: dict[tuple[Any, ...], _Stream]

    @property
    def accounting(self) -> TrackDiscoveries | None:
        return self.accounting_of(None)

    def accounting_of(self, stream: StreamFilter | None) -> TrackDiscoveries | None:
        """The accounting of the canonical streams ``stream`` admits (None: all), added up."""
        out = None
        for key, found in sorted(self.canonical.items(), key=lambda item: repr(item[0])):
            if found.p.size and (stream is None or stream.admits(key)):
                out = _add(out, found.accounting())
        return out

    def stream(self, key: tuple[Any, ...], baseline: str) -> _Stream | None:
        return self.canonical.get(key) if baseline == CANONICAL else self.matched.get((*key, baseline))


_LOCK = threading.Lock()
_CACHE: weakref.WeakKeyDictionary[Engine, OrderedDict[str, _TrackState]] = weakref.WeakKeyDictionary()


def _judged() -> list[Any]:
    """The reports that enter streams: counted, with a p_helps, not on public data, not
    ``lr_confounded``."""
    return [Report.counted.is_(True), Report.p_helps.is_not(None), Report.public_data.is_(False),
            or_(Report.practical_detail.is_(None), Report.practical_detail != "lr_confounded")]


def _seq() -> Any:
    return func.coalesce(Report.stream_seq, 0)  # reports older than 0017: before any change


def _keys() -> tuple[Any, ...]:
    """(track, version, epoch, device, baseline, key, family or report id): a hypothesis, as
    ``_rows`` reads it."""
    return (Report.track, Report.track_version, Report.seed_epoch,
            func.coalesce(func.nullif(Report.device_class, ""), "cpu"),
            func.coalesce(func.nullif(Report.baseline, ""), CANONICAL), Report.submitter_id,
            func.coalesce(func.nullif(Report.family, ""), Report.id))


def _hypothesis_query(upto: int | None, *where: Any) -> Any:
    """``(*_keys(), attempts, min p, any worked)`` per hypothesis of the judged reports ``where``
    selects, as of change ``upto`` (None: all)."""
    bound = [_seq() <= upto] if upto is not None else []
    return (select(*_keys(), func.count(), func.min(Report.p_helps), func.max(case((Report.worked, 1), else_=0)))
            .where(*_judged(), *bound, *where).group_by(*_keys()))


def _hypothesis_p(attempts: int, smallest: float) -> float:
    return min(1.0, attempts * float(smallest))


def _stream_key(row: Sequence[Any]) -> tuple[tuple[Any, ...], str]:
    return (row[1], row[2], row[3] or "cpu"), str(row[4])


def _build(session: Session, track: str, seq: int, base: str) -> _TrackState:
    """``track``'s state as of change ``seq``, from one grouped query."""
    lists: dict[tuple[Any, ...], tuple[list[float], list[bool]]] = defaultdict(lambda: ([], []))
    for row in session.execute(_hypothesis_query(seq, Report.track == track)):
        key, baseline = _stream_key(row)
        ps, works = lists[key if baseline == CANONICAL else (*key, baseline)]
        ps.append(_hypothesis_p(row[7], row[8]))
        works.append(bool(row[9]))
    streams = {key: _Stream.of(ps, works) for key, (ps, works) in lists.items()}
    return _TrackState(seq, base, {k: v for k, v in streams.items() if len(k) == 3},
                       {k: v for k, v in streams.items() if len(k) == 4})


def _advance(session: Session, state: _TrackState, track: str, seq: int) -> _TrackState | None:
    """``state`` with the reports stored after its change up to ``seq`` (the same ``base``):
    their hypotheses' old values out, new ones in; None when a rebuild is cheaper or needed."""
    fresh = select(*_keys()).where(Report.track == track, _seq() > state.seq, _seq() <= seq, *_judged()).distinct()
    touched = {tuple(row) for row in session.execute(fresh.limit(_MAX_ADDED + 1))}
    if len(touched) > _MAX_ADDED:
        return None
    if not touched:
        return _TrackState(seq, state.base, state.canonical, state.matched)
    old = _seq() <= state.seq
    stmt = (select(*_keys(), func.sum(case((old, 1), else_=0)), func.min(case((old, Report.p_helps))),
                   func.max(case((and_(old, Report.worked), 1), else_=0)),
                   func.count(), func.min(Report.p_helps), func.max(case((Report.worked, 1), else_=0)))
            .where(*_judged(), _seq() <= seq, Report.track == track,
                   Report.submitter_id.in_(sorted({h[5] for h in touched})),
                   or_(Report.family.in_(sorted({h[6] for h in touched})), Report.id.in_(sorted({h[6] for h in touched}))))
            .group_by(*_keys()))
    changes: dict[tuple[Any, ...], tuple[list[tuple[float, bool]], list[tuple[float, bool]]]] = defaultdict(
        lambda: ([], []))
    for row in session.execute(stmt):
        if tuple(row[:7]) not in touched:
            continue
        key, baseline = _stream_key(row)
        gone, added = changes[key if baseline == CANONICAL else (*key, baseline)]
        if row[7]:
            gone.append((_hypothesis_p(row[7], row[8]), bool(row[9])))
        added.append((_hypothesis_p(row[10], row[11]), bool(row[12])))
    canonical, matched = dict(state.canonical), dict(state.matched)
    for key, (gone, added) in changes.items():
        streams = canonical if len(key) == 3 else matched
        empty = _Stream(np.empty(0), np.empty(0, dtype=bool), np.empty(0))
        updated = streams.get(key, empty).changed(gone, added)
        if updated is None:
            return None
        streams[key] = updated
    return _TrackState(seq, state.base, canonical, matched)


@dataclass(frozen=True)
class _Streams:
    """``tracks``' stream rows (seq, base) now, and the tracks holding reports without a
    ``stream_seq`` (``app.reports.models.sequence_strays``): those are built on every read,
    never kept, until the reconciler sequences them."""

    rows: dict[str, tuple[int, str]]
    strays: frozenset[str]

    def keepable(self, track: str) -> bool:
        return track in self.rows and track not in self.strays


def _stream_rows(session: Session, tracks: set[str] | None) -> _Streams:
    stmt = select(ReportStream.track, ReportStream.seq, ReportStream.base)
    strays = select(Report.track).where(Report.stream_seq.is_(None)).distinct()
    if tracks is not None:
        stmt = stmt.where(ReportStream.track.in_(sorted(tracks)))
        strays = strays.where(Report.track.in_(sorted(tracks)))
    return _Streams({track: (int(seq), base) for track, seq, base in session.execute(stmt)},
                    frozenset(session.execute(strays).scalars()))


def _engine(session: Session) -> Engine:
    bind = session.get_bind()
    return bind if isinstance(bind, Engine) else bind.engine


def _states(session: Session, tracks: set[str], streams: _Streams) -> dict[str, _TrackState]:
    """``tracks``' states as of ``streams`` (their ``ReportStream`` rows): kept ones that are
    current, kept ones advanced by the reports stored since, the others built. A track that
    cannot be kept (no row, or reports without a ``stream_seq``) is built from every report."""
    with _LOCK:
        kept = dict(_CACHE.get(_engine(session), {}))
    out: dict[str, _TrackState] = {}
    for track in tracks:
        if not streams.keepable(track):
            out[track] = _build(session, track, 2**62, "")  # (every sequenced report, and the strays)
            continue
        seq, base = streams.rows[track]
        state = kept.get(track)
        if state is not None and state.base == base and state.seq <= seq:
            state = state if state.seq == seq else _advance(session, state, track, seq)
        else:
            state = None
        out[track] = state if state is not None else _build(session, track, seq, base)
    return out


def _keep(session: Session, states: dict[str, _TrackState], streams: _Streams) -> None:
    """Keep ``states`` (read as of ``streams``, which the caller found unchanged after), unless
    this session wrote reports it has not committed (what it read is its own transaction's)."""
    if session.info.get(WROTE_REPORTS):
        return
    with _LOCK:
        kept = _CACHE.setdefault(_engine(session), OrderedDict())
        for track, state in states.items():
            if streams.keepable(track):
                kept[track] = state
                kept.move_to_end(track)
        while len(kept) > _CACHED_TRACKS:
            kept.popitem(last=False)


def qvalues(session: Session, reports: Sequence[Report]) -> dict[str, QValues]:
    """The q-values of ``reports`` (a page), by report id, over everything stored now."""
    judged = [r for r in reports if r.counted is not False and r.p_helps is not None and not r.public_data
              and r.practical_detail != "lr_confounded"]
    if not judged:
        return {}
    tracks = {r.track for r in judged}
    streams = _stream_rows(session, tracks)
    states = _states(session, tracks, streams)
    families = sorted({r.family for r in judged if r.family})
    lone = sorted({r.id for r in judged if not r.family})
    attempts = {tuple(row[:7]): (row[7], row[8]) for row in session.execute(_hypothesis_query(
        None, Report.track.in_(sorted(tracks)), Report.submitter_id.in_(sorted({r.submitter_id for r in judged})),
        or_(Report.family.in_(families), Report.id.in_(lone))))}
    out: dict[str, QValues] = {}
    for r in judged:
        key, baseline = (r.track_version, r.seed_epoch, r.device_class or "cpu"), r.baseline or CANONICAL
        found = attempts.get((r.track, *key, baseline, r.submitter_id, r.family or r.id))
        stream = states[r.track].stream(key, baseline)
        q = stream.q_of(_hypothesis_p(*found)) if found is not None and stream is not None else None
        if q is None:  # the page holds a report newer than the states: the whole procedure
            return qvalues_from_scratch(session, tracks)
        out[r.id] = QValues(q if baseline == CANONICAL else None, q)
    if _stream_rows(session, tracks) != streams:  # a report stored meanwhile: answer from one snapshot
        return qvalues_from_scratch(session, tracks)
    _keep(session, states, streams)
    return out


def per_track(session: Session, tracks: set[str] | None,
              stream: StreamFilter | None = None) -> dict[str, TrackDiscoveries]:
    """Each track's accounting (``TrackDiscoveries``) over its canonical streams (those
    ``stream`` admits), added up (``tracks`` None: every track with reports)."""
    streams = _stream_rows(session, tracks)
    states = _states(session, set(streams.rows) | streams.strays if tracks is None else tracks, streams)
    if _stream_rows(session, tracks) != streams:
        return per_track_from_scratch(session, tracks, stream)
    _keep(session, states, streams)
    return {t: found for t, state in states.items() if (found := state.accounting_of(stream)) is not None}
