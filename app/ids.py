"""Public identifiers: a short type prefix and random hex (``job_3f2a...``)."""

from __future__ import annotations

import secrets


def new_id(prefix: str, nbytes: int = 10) -> str:
    """A fresh id such as ``job_9c1e0b7d2a4f6e8c0a1b``."""
    return f"{prefix}_{secrets.token_hex(nbytes)}"
