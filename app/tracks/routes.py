"""Routes: the track catalog (built-in cards as plain data, never torch) and custom tracks."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from app.db import SessionDep
from app.deps import QueueDep, SettingsDep
from app.errors import ApiError, error_responses
from app.keys.deps import OperatorDep, ReaderDep, SubmitterDep
from app.tracks import service
from app.tracks.models import TrackStatus
from app.tracks.schemas import TrackCard, TrackList, TrackRegistration
from bench.catalog import list_cards
from bench.errors import BenchError, ErrorCode

router = APIRouter(prefix="/v1/tracks", tags=["tracks"], responses=error_responses(401, 403, 429))


@router.get("", response_model=TrackList)
def list_tracks(
    session: SessionDep,
    _caller: ReaderDep,
    settings: SettingsDep,
    kind: Literal["builtin", "custom"] | None = None,
    status: Annotated[TrackStatus | None, Query(description="only tracks of this status (built-in ones are active)")] = None,
) -> TrackList:
    """Built-in tracks (spec, defaults, example idea) and custom track versions, with report counts."""
    counts = service.report_counts(session)
    items: list[TrackCard] = []
    if kind in (None, "builtin") and status in (None, TrackStatus.ACTIVE):
        workers = service.live_workers(session, settings)
        items += [service.builtin_view(card, counts, workers) for card in list_cards()]
    if kind in (None, "custom"):
        items += [service.custom_view(row, counts.get(row.id, 0)) for row in service.list_custom(session, status)]
    return TrackList(items=[service.with_limits(item, settings) for item in items])


@router.post("", status_code=202, response_model=TrackCard, responses={
    **error_responses(409, 413, 422, 429),
    200: {"model": TrackCard, "description": "The same file was registered before: its existing version."},
})
def register_track(
    body: TrackRegistration, session: SessionDep, caller: SubmitterDep, queue: QueueDep,
    settings: SettingsDep, response: Response,
) -> TrackCard:
    """Register a custom track file; 202 with status ``validating`` (200 for an identical re-upload).

    A worker validates it in the sandbox (determinism, shapes, sizes, a baseline
    smoke run, protocol time); poll GET /v1/tracks/{name@version} until
    ``status`` is ``active`` (or ``rejected``, with an error code and hint), then
    submit ideas with ``track: "name@version"``.
    """
    registered = service.register(
        session, body.source, caller.key_id, body.file_name, may_take_over=caller.is_operator,
        max_validating=None if caller.is_operator else settings.track_validations_per_key,
    )
    row = registered.row
    session.commit()
    if registered.created and queue.enqueue_track(row.id, settings.default_job_device):
        service.mark_sent(session, row.id)
        session.commit()
    if not registered.created:
        response.status_code = 200
    response.headers["Location"] = f"/v1/tracks/{row.id}"
    return service.custom_view(row, with_source=False)


@router.get("/{ident}", response_model=TrackCard, responses=error_responses(404))
def get_track(ident: str, session: SessionDep, _caller: ReaderDep, settings: SettingsDep) -> TrackCard:
    """One track: a built-in card with its example idea, or a custom version with its source,
    and the limits of every job here."""
    return service.with_limits(service.card(session, ident, settings), settings)


@router.post("/{ident}/deprecate", response_model=TrackCard, responses=error_responses(404))
def deprecate_track(ident: str, session: SessionDep, caller: SubmitterDep) -> TrackCard:
    """Deprecate one custom version (its author or an operator): it takes no new jobs; nothing is deleted."""
    try:
        row = service.deprecate(session, ident, caller)
    except BenchError as exc:
        raise ApiError.from_bench(exc, status=404) from None
    session.commit()
    return service.custom_view(row)


def _vouch(ident: str, session: SessionDep, caller: OperatorDep, vouched: bool) -> TrackCard:
    try:
        row = service.vouch(session, ident, caller, vouched)
    except BenchError as exc:
        raise ApiError.from_bench(exc, status=404 if exc.code is ErrorCode.UNKNOWN_TRACK else None) from None
    session.commit()
    return service.custom_view(row, service.report_counts(session, row.name).get(row.id, 0))


@router.put("/{ident}/vouch", response_model=TrackCard, responses=error_responses(404, 409))
def vouch_track(ident: str, session: SessionDep, caller: OperatorDep) -> TrackCard:
    """An operator vouches for one active custom version (operators only; idempotent).

    A custom track is its author's data, split and baseline, which can be built to make an idea
    win (docs/security.md), so no verdict on it counts in totals, q-values or discoveries until an
    operator has read its file (GET /v1/tracks/{name@version}) and vouches for it here. Reports
    already stored on it count from now on (but never one on a track its own key registered, or
    judged under a weak sandbox or over a weak baseline). The card's ``vouched`` says where it stands.
    """
    return _vouch(ident, session, caller, True)


@router.delete("/{ident}/vouch", response_model=TrackCard, responses=error_responses(404, 409))
def withdraw_vouch(ident: str, session: SessionDep, caller: OperatorDep) -> TrackCard:
    """An operator withdraws a vouch (operators only; idempotent): the version's reports leave
    the totals, q-values and discoveries again."""
    return _vouch(ident, session, caller, False)
