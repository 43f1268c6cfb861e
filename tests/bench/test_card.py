"""A track's settings read through one validated model (bench.card, issue 26.5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.card import COMPUTE_RATIO, PARAM_PARITY_RATIO, Loss, TrackSettings
from bench.catalog import get_card, track_names
from bench.errors import BenchError, ErrorCode
from bench.track_source import parse_track_source

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", track_names())
def test_every_built_in_card_is_valid_and_says_what_it_sets(name: str) -> None:
    card = get_card(name)
    settings = TrackSettings.of(card)
    assert settings.defaults.lr_grid == [float(v) for v in card["defaults"]["lr_grid"]]
    assert settings.defaults.n_seeds == card["defaults"]["n_seeds"] >= 2
    assert settings.metric.loss in set(Loss) and settings.lower_is_better == (card["metric"]["direction"] == "lower")
    assert settings.param_parity_ratio == card.get("param_parity_ratio", PARAM_PARITY_RATIO)
    assert settings.compute_ratio == card.get("compute_ratio", COMPUTE_RATIO)


def test_a_custom_tracks_card_reads_the_same_defaults() -> None:
    source = (ROOT / "examples" / "tracks" / "so3_spectral.py").read_text()
    settings = TrackSettings.of(parse_track_source(source))
    assert (settings.defaults.sweep_seeds, settings.defaults.n_seeds) == (2, 8)
    assert (settings.param_parity_ratio, settings.compute_ratio) == (PARAM_PARITY_RATIO, COMPUTE_RATIO)


def test_a_card_without_a_setting_fails_at_once_naming_it() -> None:
    card = get_card("smoke")
    broken = {**card, "defaults": {k: v for k, v in card["defaults"].items() if k != "epochs"}}
    with pytest.raises(BenchError) as raised:
        TrackSettings.of(broken)
    assert raised.value.code == ErrorCode.INTERNAL and "defaults.epochs" in raised.value.message
    with pytest.raises(BenchError):
        TrackSettings.of({**card, "metric": {**card["metric"], "loss": "hinge"}})
    defaulted = TrackSettings.of({k: v for k, v in card.items() if k not in ("compute_ratio", "max_configs")})
    assert (defaulted.compute_ratio, defaulted.max_configs, defaulted.buffer_cap) == (COMPUTE_RATIO, 12, None)
