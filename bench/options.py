"""How the engine runs on this host: read from the environment once per job, or passed in.

The sandbox's own switches (``IDEABENCH_BWRAP``, ``IDEABENCH_REQUIRE_FULL_ISOLATION``) stay
with the sandbox (``bench.sandbox``): they must hold for every child, whoever starts it. The
seed secret is the deployment's (``bench.seeding.deployment_secret``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

OFF = ("0", "false", "off", "no")


@dataclass(frozen=True)
class EngineOptions:
    """``cache_dir``: per-worker caches (``baseline/``: canonical-baseline runs; ``tracks/``:
    custom tracks' generated data). ``baseline_cache``: reuse canonical-baseline runs.
    ``execution``: ``auto`` batches runs where both arms' models allow it, ``sequential`` trains
    one run at a time."""

    cache_dir: Path = Path("var/cache")
    baseline_cache: bool = True
    execution: Literal["auto", "sequential"] = "auto"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, *, data_dir: Path | None = None) -> EngineOptions:
        """``IDEABENCH_CACHE_DIR`` (else ``cache`` under ``data_dir``, the host's data directory
        when it passes one, else under ``IDEABENCH_DATA_DIR`` or ``./var``),
        ``IDEABENCH_BASELINE_CACHE`` (``0``/``false``/``off``/``no``: off) and
        ``IDEABENCH_EXECUTION`` (``sequential``: one run at a time)."""
        sequential = environ.get("IDEABENCH_EXECUTION", "auto").strip().lower() == "sequential"
        root = data_dir if data_dir is not None else Path(environ.get("IDEABENCH_DATA_DIR") or "var")
        return cls(
            cache_dir=Path(environ.get("IDEABENCH_CACHE_DIR") or root / "cache"),
            baseline_cache=environ.get("IDEABENCH_BASELINE_CACHE", "1").strip().lower() not in OFF,
            execution="sequential" if sequential else "auto",
        )

    @property
    def baseline_dir(self) -> Path:
        return self.cache_dir / "baseline"

    @property
    def tracks_dir(self) -> Path:
        return self.cache_dir / "tracks"
