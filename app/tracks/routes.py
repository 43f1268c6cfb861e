"""Routes: the track catalog (read from plain data; never imports torch)."""

from __future__ import annotations

from fastapi import APIRouter

from app.errors import ApiError, error_responses
from app.keys.deps import ReaderDep
from app.tracks.schemas import TrackCard, TrackList
from bench.catalog import get_card, list_cards
from bench.errors import BenchError

# Async: the catalog is small plain data cached in memory after the first read.
router = APIRouter(prefix="/v1/tracks", tags=["tracks"], responses=error_responses(401, 403))


@router.get("", response_model=TrackList)
async def list_tracks(_caller: ReaderDep) -> TrackList:
    """Every track's spec, defaults and example idea."""
    return TrackList(items=[TrackCard.model_validate(card) for card in list_cards()])


@router.get("/{name}", response_model=TrackCard, responses=error_responses(404))
async def get_track(name: str, _caller: ReaderDep) -> TrackCard:
    """One track's spec, metric, defaults, limits and a complete example idea."""
    try:
        card = get_card(name)
    except BenchError as exc:
        raise ApiError.from_bench(exc, status=404) from None
    return TrackCard.model_validate(card)
