"""Validate a registered custom track in the sandbox and store the outcome once."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import func, select

from app.db import utcnow
from app.tracks import service as tracks_service
from app.tracks.models import CustomTrackRow, TrackStatus
from bench.errors import BenchError, ErrorCode
from workers.context import WorkerContext

if TYPE_CHECKING:  # torch loads only when a track is validated or judged
    from bench.custom_track import CustomTrack

log = logging.getLogger("ideabench.worker")
# A default protocol may use at most this share of a job's time limit (ideas can be slower).
PROTOCOL_SHARE = 0.5
VALIDATION_TIMEOUT_S = 900.0
# What one author's tracks keep of baseline builds together (bench.captured.pack_build, up to
# 64 MiB each): past it a new version keeps none, and its jobs build the baseline with the
# track's code at validation's seed (session 21's path). A key that registers a version per
# one-byte edit fills no database (red team, session 22).
MAX_BUILD_BYTES_PER_AUTHOR = 512 << 20


def custom_track_of(row: CustomTrackRow) -> CustomTrack:
    """The engine's view of a stored track version (its card as registered, never re-read)."""
    from bench.custom_track import CustomTrack

    validation = row.validation or {}
    return CustomTrack(name=row.name, version=row.version, source=row.source, sha256=row.sha256,
                       card=row.card, author=row.author, file=row.file_name,
                       sizes=validation.get("sizes") or {}, checksums=validation.get("checksums") or {},
                       validation_warnings=[str(w) for w in validation.get("warnings") or []],
                       baseline_graph_sha256=validation.get("baseline_graph_sha256"),
                       baseline_seed_sha256=validation.get("baseline_seed_sha256"),
                       validated_epoch=validation.get("seed_epoch"), baseline_build=row.baseline_build,
                       baseline_build_version=validation.get("baseline_build_version"),
                       baseline_beats_references=(validation.get("reference_fits") or {}).get("beats"))


def execute_validation(ctx: WorkerContext, track_id: str) -> str:
    """Validate ``track_id`` if it still waits for it; returns active / rejected / skipped /
    refused. A worker whose seed secret is not the deployment's current epoch validates nothing
    (as it judges nothing): a validation under a replaced epoch is stale from birth (red team,
    session 22). The track stays ``validating`` and the reconciler sends it again."""
    from workers.runner import prove_secret

    problem = prove_secret(ctx)
    if problem is not None:
        log.warning("not validating track %s: %s", track_id, problem)
        return "refused"
    with ctx.sessions() as session:
        row = session.get(CustomTrackRow, track_id)
        if row is None or row.status != TrackStatus.VALIDATING.value:
            return "skipped"
        track = custom_track_of(row)
    from bench.custom_track import validate

    settings = ctx.settings
    options = ctx.host_options()
    log.info("validating track %s", track_id)
    result = None
    error = None
    try:
        result = validate(track, memory_mb=settings.job_memory_mb,
                          timeout_s=min(VALIDATION_TIMEOUT_S, settings.job_timeout_s),
                          max_protocol_s=PROTOCOL_SHARE * settings.job_timeout_s,
                          secret=options.deployment_secret(), options=options.engine)
    except BenchError as exc:
        error = exc.to_dict()
    except Exception as exc:
        log.exception("validating track %s crashed", track_id)
        error = BenchError(ErrorCode.INTERNAL, f"Validation failed unexpectedly ({type(exc).__name__}).").to_dict()
    build = result.pop("baseline_build", None) if result is not None else None  # bytes: a column of its own
    with ctx.sessions() as session:
        if build is not None and result is not None:
            kept = session.scalar(select(func.coalesce(func.sum(func.length(CustomTrackRow.baseline_build)), 0))
                                  .where(CustomTrackRow.author == track.author)) or 0
            result["baseline_build_kept"] = kept + len(build) <= MAX_BUILD_BYTES_PER_AUTHOR
            if not result["baseline_build_kept"]:
                build = None
        stored = tracks_service.record_validation(session, track_id, result=result, error=error, now=utcnow(),
                                                  build=build)
        session.commit()
    outcome = "rejected" if error else "active"
    log.info("track %s %s%s", track_id, outcome if stored else "already validated",
             f": {error['code']}" if error else "")
    return outcome if stored else "skipped"
