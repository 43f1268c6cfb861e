"""Column types shared by the tables."""

from __future__ import annotations

from sqlalchemy import JSON
from sqlalchemy.dialects.postgresql import JSONB

# JSONB on Postgres (compact, indexable later), plain JSON text elsewhere.
JsonType = JSON().with_variant(JSONB(), "postgresql")
