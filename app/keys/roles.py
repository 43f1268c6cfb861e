"""The three roles and what each may do."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """``agent`` submits and reads its own jobs; ``operator`` does everything;
    ``viewer`` reads reports and summaries only."""

    AGENT = "agent"
    OPERATOR = "operator"
    VIEWER = "viewer"
