"""The track card as an API body (the engine's ``card.json`` plus the example idea)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TrackCard(BaseModel):
    """A track's spec, metric, defaults, limits and example idea (all card fields are kept).

    An agent can write a valid idea from this answer alone: ``spec`` is what
    ``build_model(spec)`` receives, ``example_idea`` is a complete idea file.
    """

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="name@version")
    name: str
    version: int
    title: str | None = None
    description: str | None = None
    spec: dict[str, Any]
    metric: dict[str, Any]
    defaults: dict[str, Any]
    param_cap: int | None = None
    max_configs: int | None = None
    example_idea: str = Field(description="A complete idea file for this track.")


class TrackList(BaseModel):
    """Every registered track."""

    items: list[TrackCard]
