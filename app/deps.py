"""Dependencies on what ``create_app`` keeps in ``app.state``, as ``Annotated`` aliases.

Async on purpose: FastAPI runs a plain ``def`` dependency in the thread pool, a
hop that costs more than reading an attribute.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.queue import JobQueue
from app.settings import Settings


async def get_settings(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings
    return settings


async def get_queue(request: Request) -> JobQueue:
    """The app's job queue client (override in tests)."""
    queue: JobQueue = request.app.state.queue
    return queue


SettingsDep = Annotated[Settings, Depends(get_settings)]
QueueDep = Annotated[JobQueue, Depends(get_queue)]
