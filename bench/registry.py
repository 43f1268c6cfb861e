"""Loads track implementations (torch) by name through the entry-point registry."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points

from bench.catalog import ENTRY_POINT_GROUP, get_card
from bench.errors import BenchError, ErrorCode
from bench.track import Track


@cache
def load_track(name: str) -> Track:
    """The ``Track`` object of ``name`` (``name`` or ``name@version``)."""
    card = get_card(name)  # raises unknown_track, checks the version
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=card["name"]):
        track = ep.load()
        if not isinstance(track, Track):
            raise BenchError(ErrorCode.INTERNAL, f"Entry point {ep.value} is not a Track.")
        return track
    raise BenchError(ErrorCode.UNKNOWN_TRACK, f"No track named {name!r}.")
