"""The track catalog as plain data: cards and example ideas, read without importing torch.

Each track package ships ``card.json`` (spec, metric, defaults, limits) and
``example_idea.py``. The track module (which imports torch) is registered in the
``ideabench.tracks`` entry-point group; this module only uses the entry point's
*name* to find the package directory, so the API can list tracks torch-free.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from collections.abc import Mapping
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from bench.errors import BenchError, ErrorCode

ENTRY_POINT_GROUP = "ideabench.tracks"


@lru_cache(maxsize=1)
def _track_dirs() -> dict[str, Path]:
    """Map track name -> package directory, from the entry-point registry."""
    dirs: dict[str, Path] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        package = ep.value.split(":")[0].rsplit(".", 1)[0]
        spec = importlib.util.find_spec(package)  # imports only the (empty) parent packages
        if spec is None or not spec.submodule_search_locations:
            continue
        directory = Path(list(spec.submodule_search_locations)[0])
        if all((directory / f).is_file() for f in ("card.json", "example_idea.py")):
            dirs[ep.name] = directory
    return dict(sorted(dirs.items()))


def track_names() -> list[str]:
    """Names of the registered tracks, sorted."""
    return list(_track_dirs())


def is_builtin(name: str) -> bool:
    """Whether ``name`` (or ``name@version``) names a built-in (packaged) track."""
    return name.split("@", 1)[0] in _track_dirs()


def _track_dir(name: str) -> Path:
    base = name.split("@", 1)[0]
    try:
        return _track_dirs()[base]
    except KeyError:
        raise BenchError(
            ErrorCode.UNKNOWN_TRACK,
            f"No track named {name!r}; known tracks: {', '.join(track_names())}.",
        ) from None


def unavailable_reason(card: dict[str, Any], environ: Mapping[str, str]) -> str | None:
    """Why a track cannot run on a host whose environment is ``environ`` (None: it can). A card's
    ``requires.directory_env`` names a variable that must point at a directory holding every file
    of ``requires.files`` (cifar10's local python batches: nothing is downloaded)."""
    needs = card.get("requires") or {}
    variable = needs.get("directory_env")
    if not variable:
        return None
    value = environ.get(variable)
    if not value:
        return f"{variable} is not set on this deployment (the track's data is local and never downloaded)"
    missing = [f for f in needs.get("files", []) if not (Path(value) / f).is_file()]
    if missing:
        return f"{variable} names {value}, which lacks {', '.join(missing)}"
    return None


def get_card(name: str) -> dict[str, Any]:
    """The card of one track (a JSON object), with ``example_idea`` holding the source.

    ``name`` may carry a version (``smoke@1``); a version other than the current
    one is an ``unknown_track`` error.
    """
    return copy.deepcopy(_read_card(name))


@lru_cache(maxsize=64)
def _read_card(name: str) -> dict[str, Any]:
    directory = _track_dir(name)
    card: dict[str, Any] = json.loads((directory / "card.json").read_text())
    if "@" in name and name.split("@", 1)[1] != str(card["version"]):
        raise BenchError(
            ErrorCode.UNKNOWN_TRACK,
            f"Track {name!r} is not available; the current version is "
            f"{card['name']}@{card['version']}.",
        )
    card["id"] = f"{card['name']}@{card['version']}"
    card["example_idea"] = (directory / "example_idea.py").read_text()
    return card


def list_cards() -> list[dict[str, Any]]:
    """Every registered track's card, sorted by name."""
    return [get_card(name) for name in track_names()]


def planned_runs(card: dict[str, Any], idea_configs: int = 1, n_seeds: int | None = None, *,
                 matched_configs: int | None = None) -> int:
    """Training runs of both arms that a job on ``card`` plans before any confirmation: the
    sweep (lr grid x the idea's configs x sweep seeds, the baseline swept as densely: equal
    budgets) plus the final seeds (``n_seeds``, else the track's). ``matched_configs``: a matched
    baseline's job (its HPARAMS grid size), whose check (the matched baseline as the idea, against
    the track's: a sweep and a screening) comes first and whose baseline then sweeps nothing
    (``protocol.Job.swept``). The API's estimate and a custom track's validation both count with
    it (``bench.plan``)."""
    from bench.plan import plan_for_card

    return plan_for_card(card, idea_configs, n_seeds, matched_configs=matched_configs).planned
