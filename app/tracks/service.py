"""Tracks: the built-in catalog plus registered custom tracks; the callers commit.

A custom track is registered with status ``validating`` and checked by a worker
in the sandbox (``bench.custom_track.validate``); it takes jobs once ``active``.
Versions are immutable: a new upload of a name is a new version, an identical
upload returns the version it already made, and a track is never deleted, only
deprecated (no new jobs; its reports and source stay).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.db import utcnow
from app.errors import ApiCode, ApiError
from app.health import repository as health_repository
from app.keys.deps import Caller
from app.keys.models import ApiKey
from app.reports.models import Report, VerdictCount
from app.reports.service import recount_track
from app.seeds.models import SeedEpoch
from app.settings import Settings
from app.tracks.models import CustomTrackRow, TrackStatus
from app.tracks.schemas import JobLimits, TrackCard
from bench.card import TrackSettings
from bench.catalog import get_card, is_builtin, track_names, unavailable_reason
from bench.errors import BenchError, ErrorCode
from bench.track_source import NAME_RE, parse_track_source, source_sha256

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Registered:
    """A registration's row and whether this call made it (False: an identical earlier upload)."""

    row: CustomTrackRow
    created: bool


def _versions(session: Session, name: str) -> list[CustomTrackRow]:
    stmt = select(CustomTrackRow).where(CustomTrackRow.name == name).order_by(CustomTrackRow.version)
    return list(session.scalars(stmt))


def register(session: Session, source: str, author: str, file_name: str | None, *,
             may_take_over: bool = False, max_validating: int | None = None) -> Registered:
    """Stage a new version of a track file (status ``validating``); raises ``BenchError``
    (``ApiError`` 429 for too many validations).

    ``author`` owns the name from its first version on; only it (or an operator,
    ``may_take_over``) adds versions. A new version is refused (429) while the author
    already has ``max_validating`` versions in validation (None: no limit); an
    identical re-upload is not: it answers the version it matches, unless that version was
    validated in a seed epoch the deployment has since replaced (``validated_before``): its
    verdicts count nowhere now (``custom_track.build_checked``), so the same file is staged
    as a new version, validated in the current epoch (and vouched for again).
    """
    card = parse_track_source(source)
    name = card["name"]
    if is_builtin(name):
        raise BenchError(ErrorCode.TRACK_NAME_TAKEN, f"{name!r} is a built-in track's name.")
    sha = source_sha256(source)
    newest_epoch = session.scalar(select(func.max(SeedEpoch.epoch)))
    for attempt in range(2):
        versions = _versions(session, name)
        if versions and versions[0].author != author and not may_take_over:
            raise BenchError(
                ErrorCode.TRACK_NAME_TAKEN,
                f"Track {name!r} belongs to {versions[0].author}; only its author adds versions.",
            )
        again = None  # the identical version this upload validates again, after a rotation
        for row in versions:
            if row.sha256 == sha and row.status != TrackStatus.REJECTED.value:
                if not validated_before(row, newest_epoch):
                    return Registered(row, created=False)
                again = row
        if max_validating is not None:
            _check_validations(session, author, max_validating)
        version = (versions[-1].version + 1) if versions else 1
        row = CustomTrackRow(
            id=f"{name}@{version}", name=name, version=version, sha256=sha, source=source,
            # validated again, it stays its author's, whoever uploaded it (an operator's upload
            # made it the operator's, and the author's own verdicts on it counted: red team)
            file_name=file_name, card=card, domain=card["domain"], author=again.author if again else author,
            status=TrackStatus.VALIDATING.value, deprecated=False, created_at=utcnow(),
        )
        try:
            with session.begin_nested():
                session.add(row)
        except IntegrityError:  # a concurrent upload took this version number
            if attempt:
                raise
            continue
        return Registered(row, created=True)
    raise AssertionError("unreachable")


def validated_before(row: CustomTrackRow, epoch: int | None) -> bool:
    """``row`` is active and was validated in a seed epoch older than ``epoch`` (the newest a
    worker of the deployment judged under), or in none it recorded."""
    if row.status != TrackStatus.ACTIVE.value or epoch is None:
        return False
    validated = row.validation.get("seed_epoch") if isinstance(row.validation, dict) else None
    return not isinstance(validated, int) or isinstance(validated, bool) or validated < epoch


def _check_validations(session: Session, author: str, limit: int) -> None:
    """Refuse a new version while ``author`` has ``limit`` tracks in validation.

    The author's key row is locked first (Postgres; SQLite serialises writers anyway),
    so two uploads from one key at the same moment cannot both pass the count.
    """
    session.execute(select(ApiKey.id).where(ApiKey.id == author).with_for_update())
    running = session.scalar(
        select(func.count()).select_from(CustomTrackRow).where(
            CustomTrackRow.author == author, CustomTrackRow.status == TrackStatus.VALIDATING.value
        )
    ) or 0
    if running >= limit:
        raise ApiError(
            429, ApiCode.TOO_MANY_VALIDATIONS,
            f"This key already has {running} custom track(s) in validation (at most {limit} at once).",
        )


# A track's name (``bench.track_source.NAME_RE``), optionally ``@version``: anything else names
# no track and never reaches a query (a NUL byte there is a driver error on Postgres).
IDENT = re.compile(rf"{NAME_RE.pattern}(@[1-9][0-9]{{0,8}})?")


def get(session: Session, ident: str) -> CustomTrackRow | None:
    """A custom track by ``name@version``, or by ``name``: its newest usable version.

    Usable: active and not deprecated; failing that, the newest version at all
    (so the caller can tell the agent why it cannot be used).
    """
    if not IDENT.fullmatch(ident):
        return None
    if "@" in ident:
        return session.get(CustomTrackRow, ident)
    versions = _versions(session, ident)
    usable = [r for r in versions if r.status == TrackStatus.ACTIVE.value and not r.deprecated]
    chosen = usable or versions
    return chosen[-1] if chosen else None


def engine_card(row: CustomTrackRow) -> dict[str, Any]:
    """The card the engine and the estimates use (version, id and measured sizes filled in)."""
    card = dict(row.card, version=row.version, id=row.id)
    validation = row.validation or {}
    if validation.get("sizes"):
        card["sizes"] = validation["sizes"]
    smoke_s = (validation.get("baseline_smoke") or {}).get("seconds")
    data_s = validation.get("data_seconds_per_seed")
    if isinstance(smoke_s, int | float) and isinstance(data_s, int | float):
        # as validation estimated the protocol: runs two at a time, each seed's data generated once
        defaults = TrackSettings.of(card).defaults
        seeds = defaults.sweep_seeds + defaults.n_seeds
        card["timing"] = {"fixed_s": round(seeds * data_s, 1), "run_s": round(smoke_s / 2, 3),
                          "measured": "at validation (the baseline's smoke run)"}
    return card


def deployment_unavailable(card: dict[str, Any], workers: list[dict[str, str]] | None) -> str | None:
    """Why this deployment cannot run a built-in track now (None: it can). ``workers``: what the
    live workers that may judge said they cannot run (``health.repository.tracks_unavailable``):
    the track runs where one of them can, whatever the API's own host holds (cifar10's data lies on
    the workers). With none (no worker seen, or only workers from before they said): this
    process's environment, as an embedded service's worker shares it."""
    if not workers:
        return unavailable_reason(card, os.environ)
    reasons = [said.get(card["name"]) for said in workers]
    if any(why is None for why in reasons):
        return None
    return f"none of the {len(reasons)} live workers can run it ({reasons[0]})"


def live_workers(session: Session, settings: Settings, queue: str | None = None) -> list[dict[str, str]] | None:
    """What the workers that may judge, seen within ``settings.worker_seen_s`` (on ``queue``, or
    on any), said they cannot run (``deployment_unavailable``'s ``workers``)."""
    return health_repository.tracks_unavailable(session, settings.worker_seen_s, queue)


WORKERS_TTL_S = 5.0  # how long a submission's intake trusts its last read of the workers' beats
_workers_read: dict[tuple[str, str], tuple[float, list[dict[str, str]] | None]] = {}
_workers_lock = threading.Lock()


def workers_fresh(settings: Settings, queue: str) -> bool:
    """Whether ``cached_workers`` answers without the database (a submission's intake then checks
    a built-in track's on the event loop: no query there)."""
    with _workers_lock:
        hit = _workers_read.get((settings.database_url, queue))
    return hit is not None and time.monotonic() - hit[0] < WORKERS_TTL_S


def cached_workers(sessions: sessionmaker[Session], settings: Settings, queue: str) -> list[dict[str, str]] | None:
    """``live_workers`` for a submission's intake, read at most every ``WORKERS_TTL_S`` per
    database and queue (a beat is written every few seconds, a worker counts for two minutes: a
    query per submission would buy nothing). Where the database cannot answer, the last read
    stands (the submission's own write then tells the database's state). A dict and a lock, as
    ``app.jobs.estimate.Estimator``'s caches: one entry per database and queue needs no library."""
    key = (settings.database_url, queue)
    with _workers_lock:
        hit = _workers_read.get(key)
    if hit is not None and time.monotonic() - hit[0] < WORKERS_TTL_S:
        return hit[1]
    try:
        with sessions() as session:
            value = live_workers(session, settings, queue)
    except SQLAlchemyError:
        log.warning("the workers' beats could not be read; the last read stands", exc_info=True)
        return hit[1] if hit is not None else None
    with _workers_lock:
        _workers_read[key] = (time.monotonic(), value)
    return value


def runnable_builtin(ident: str, workers: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A built-in track's card for a submission; ``track_unavailable`` when this deployment
    cannot run it (``deployment_unavailable``: no live worker holds cifar10's data)."""
    card = get_card(ident)
    why = deployment_unavailable(card, workers)
    if why is not None:
        raise BenchError(ErrorCode.TRACK_UNAVAILABLE, f"Track {card['id']} cannot run here: {why}.")
    return card


def resolve_for_job(session: Session, ident: str,
                    workers: list[dict[str, str]] | None = None) -> tuple[str, dict[str, Any]]:
    """``(track id to store on the job, card)`` for a submission; raises ``BenchError``.

    Built-in tracks keep the name as submitted; a custom track resolves to its
    exact ``name@version`` so the job runs the version the agent was shown.
    """
    if is_builtin(ident):
        return ident, runnable_builtin(ident, workers)
    row = get(session, ident)
    if row is None:
        known = ", ".join(track_names())
        raise BenchError(ErrorCode.UNKNOWN_TRACK, f"No track named {ident!r}; built-in tracks: {known}; "
                         "custom tracks: GET /v1/tracks?kind=custom.")
    if row.status == TrackStatus.VALIDATING.value:
        raise BenchError(ErrorCode.TRACK_NOT_READY, f"Track {row.id} is still being validated.")
    if row.status == TrackStatus.REJECTED.value:
        raise BenchError(ErrorCode.TRACK_NOT_READY,
                         f"Track {row.id} was rejected at validation: [{row.error_code}] {row.error_message}",
                         "Fix the track file and register it again (a new version).")
    if row.deprecated:
        newer = get(session, row.name)
        hint = (f"Submit to {newer.id}." if newer is not None and newer.id != row.id
                and newer.status == TrackStatus.ACTIVE.value and not newer.deprecated else None)
        raise BenchError(ErrorCode.TRACK_DEPRECATED, f"Track {row.id} is deprecated; it takes no new jobs.", hint)
    return row.id, engine_card(row)


def custom_view(row: CustomTrackRow, n_reports: int = 0, *, with_source: bool = False) -> TrackCard:
    """The API's view of one custom track version."""
    error = None
    if row.error_code is not None:
        error = {"code": row.error_code, "message": row.error_message or "", "hint": row.error_hint or ""}
    base = f"/v1/tracks/{row.id}"
    return TrackCard.model_validate({
        **engine_card(row), "kind": "custom", "status": row.status, "deprecated": row.deprecated,
        "author": row.author, "sha256": row.sha256, "created_at": row.created_at,
        "validated_at": row.validated_at, "validation": row.validation, "error": error,
        "n_reports": n_reports, "source": row.source if with_source else None,
        "vouched": row.vouched_at is not None, "vouched_at": row.vouched_at, "vouched_by": row.vouched_by,
        "links": {"self": base, "deprecate": f"{base}/deprecate", "vouch": f"{base}/vouch", "submit": "/v1/ideas"},
    })


def card_of_job_track(session: Session, track: str) -> dict[str, Any]:
    """The card of a job's (already resolved) track, built-in or custom."""
    if is_builtin(track):
        return get_card(track)
    row = session.get(CustomTrackRow, track)
    if row is None:
        raise BenchError(ErrorCode.UNKNOWN_TRACK, f"No track {track!r}.")
    return engine_card(row)


def list_custom(session: Session, status: TrackStatus | None = None) -> list[CustomTrackRow]:
    """Every registered version (optionally of one status), by name and version."""
    stmt = select(CustomTrackRow).order_by(CustomTrackRow.name, CustomTrackRow.version)
    if status is not None:
        stmt = stmt.where(CustomTrackRow.status == status.value)
    return list(session.scalars(stmt))


def report_counts(session: Session, name: str | None = None) -> dict[str, int]:
    """Reports per track id: built-in names (from the verdict rollup: the reports that count)
    and custom ``name@version`` (every stored report: most count nowhere, an unvouched
    version's none, and an agent still wants to know the track is in use).

    ``name``: count only that track's rows (one track's page, not the whole rollup).
    """
    stmt = select(VerdictCount.track, func.sum(VerdictCount.n)).group_by(VerdictCount.track)
    custom = select(Report.track, func.count()).where(Report.custom_track.is_(True)).group_by(Report.track)
    if name is not None:
        stmt = stmt.where(or_(VerdictCount.track == name, VerdictCount.track.startswith(f"{name}@", autoescape=True)))
        custom = custom.where(Report.track.startswith(f"{name}@", autoescape=True))
    counts: dict[str, int] = {}
    for track, n in session.execute(stmt):
        if is_builtin(track):
            key = track.split("@", 1)[0]
            counts[key] = counts.get(key, 0) + int(n)
    for track, n in session.execute(custom):
        if not is_builtin(track):
            counts[track] = int(n)
    return counts


def deprecate(session: Session, ident: str, caller: Caller) -> CustomTrackRow:
    """Mark a custom track version deprecated (its author or an operator); idempotent."""
    row = session.get(CustomTrackRow, ident) if "@" in ident and IDENT.fullmatch(ident) else None
    if row is None:
        raise BenchError(ErrorCode.UNKNOWN_TRACK, f"No custom track {ident[:100]!r}; name it as name@version.")
    if not caller.is_operator and row.author != caller.key_id:
        raise ApiError(403, ApiCode.NOT_OWNER, f"Track {row.id} belongs to {row.author}.",
                       "Only a track's author or an operator deprecates it.")
    if not row.deprecated:
        row.deprecated = True
        row.deprecated_at = utcnow()
    return row


def vouch(session: Session, ident: str, caller: Caller, vouched: bool) -> CustomTrackRow:
    """An operator vouches for one active custom version (``vouched``) or withdraws the vouch:
    verdicts on it count (or stop counting) in totals, q-values and discoveries, those already
    stored included (``app.reports.service.recount_track``); idempotent. Raises ``BenchError``
    (unknown or not active) or ``ApiError`` 403 (not an operator)."""
    if not caller.is_operator:
        raise ApiError(403, ApiCode.FORBIDDEN_ROLE, "Only an operator vouches for a custom track.",
                       "Ask an operator to read the track's file (GET /v1/tracks/{id}) and vouch for it.")
    row = _row_for_update(session, ident)
    if row.status != TrackStatus.ACTIVE.value:
        raise BenchError(ErrorCode.TRACK_NOT_READY, f"Track {row.id} is {row.status}; only an active track is "
                         "vouched for.", "Wait until its validation made it active.")
    if vouched and row.vouched_at is None:
        row.vouched_at, row.vouched_by = utcnow(), caller.key_id
    elif not vouched:
        row.vouched_at = row.vouched_by = None
    recount_track(session, row.id, vouched)
    return row


def _row_for_update(session: Session, ident: str) -> CustomTrackRow:
    """The custom version ``ident`` (``name@version``) locked for update; ``unknown_track``."""
    row = None
    # a custom row under a built-in's name (registered before a release built that name in) is
    # never vouched for: its ident is the built-in's reports' too
    if "@" in ident and IDENT.fullmatch(ident) and not is_builtin(ident):
        row = session.scalars(select(CustomTrackRow).where(CustomTrackRow.id == ident).with_for_update()).first()
    if row is None:
        raise BenchError(ErrorCode.UNKNOWN_TRACK, f"No custom track {ident[:100]!r}; name it as name@version.",
                         "GET /v1/tracks?kind=custom lists the versions.")
    return row


def mark_sent(session: Session, track_id: str, now: datetime | None = None) -> None:
    """Record that the validation message left for a worker."""
    session.execute(update(CustomTrackRow).where(CustomTrackRow.id == track_id).values(sent_at=now or utcnow()))


def stale_validations(session: Session, unsent_before: datetime, sent_before: datetime) -> list[str]:
    """Validating tracks whose message was never sent, or sent so long ago it must be lost."""
    stmt = select(CustomTrackRow.id).where(
        CustomTrackRow.status == TrackStatus.VALIDATING.value,
        ((CustomTrackRow.sent_at.is_(None)) & (CustomTrackRow.created_at < unsent_before))
        | (CustomTrackRow.sent_at < sent_before),
    )
    return list(session.scalars(stmt))


def record_validation(
    session: Session, track_id: str, *, result: dict[str, Any] | None = None,
    error: dict[str, str] | None = None, now: datetime | None = None, build: bytes | None = None,
) -> bool:
    """Store a validation's outcome once (compare-and-set on ``validating``); ``build``: the
    baseline's checked build (``bench.custom_track.validate``'s ``baseline_build``)."""
    values: dict[str, Any] = {"validated_at": now or utcnow()}
    if error is None:
        values.update(status=TrackStatus.ACTIVE.value, validation=result, baseline_build=build)
    else:
        values.update(status=TrackStatus.REJECTED.value, validation=result, error_code=error["code"],
                      error_message=error["message"], error_hint=error["hint"])
    stmt = (update(CustomTrackRow)
            .where(CustomTrackRow.id == track_id, CustomTrackRow.status == TrackStatus.VALIDATING.value)
            .values(**values))
    return bool(session.execute(stmt).rowcount)  # type: ignore[attr-defined]


def builtin_view(card: dict[str, Any], counts: dict[str, int], workers: list[dict[str, str]] | None = None) -> TrackCard:
    """The API's card of a built-in track (``counts``: reports per track; ``workers``: what the live
    workers cannot run, ``deployment_unavailable``)."""
    why = deployment_unavailable(card, workers)
    return TrackCard.model_validate({
        **card, "kind": "builtin", "status": TrackStatus.ACTIVE, "deprecated": False, "author": "ideabench",
        "n_reports": counts.get(card["name"], 0), "available": why is None, "unavailable_reason": why,
    })


def with_limits(view: TrackCard, settings: Settings) -> TrackCard:
    """``view`` with the job limits of this deployment (``limits``)."""
    ratio = (view.model_extra or {}).get("compute_ratio")
    view.limits = JobLimits(capture_timeout_s=settings.capture_timeout_s, job_timeout_s=settings.job_timeout_s,
                            memory_mb=settings.job_memory_mb,
                            compute_ratio=float(ratio) if isinstance(ratio, int | float) else None)
    return view


def card(session: Session, ident: str, settings: Settings) -> TrackCard:
    """One track's card: a built-in one with its example idea, or a custom version with its
    source; 404 ``unknown_track``."""
    if not IDENT.fullmatch(ident):
        raise ApiError.from_bench(BenchError("unknown_track", f"No track named {ident[:100]!r}."), status=404)
    counts = report_counts(session, ident.split("@", 1)[0])
    if is_builtin(ident):
        try:
            found = get_card(ident)
        except BenchError as exc:
            raise ApiError.from_bench(exc, status=404) from None
        return builtin_view(found, counts, live_workers(session, settings))
    row = get(session, ident)
    if row is None:
        raise ApiError.from_bench(BenchError("unknown_track", f"No track named {ident!r}."), status=404)
    return custom_view(row, counts.get(row.id, 0), with_source=True)
