"""Fast checks of every registered track and of the example ideas (no training).

For each track found through the ``ideabench.tracks`` entry points: the card has every
key the engine and the API read, ``make_splits`` is deterministic and matches the card's
spec and sizes, the baseline has the parameter count the card states, and the track's
example idea (plus the seed examples under ``examples/ideas``) builds, maps a batch to
the output shape, stays under the cap and has a ``measure`` that returns a finite float.
The cifar10 track runs on a tiny fake data set written in the CIFAR-10 pickle format.
"""

from __future__ import annotations

import math
import pickle
import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from bench import probes
from bench.contract import check_hparams, check_mechanism, check_source
from bench.track import Splits, Track
from tests.capture_helpers import through_capture

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "ideas"
ENTRY_POINTS = {ep.name: ep for ep in entry_points(group="ideabench.tracks")}
TRACK_NAMES = sorted(ENTRY_POINTS)
BUILT_IN = ["cifar10", "correlated_tokens", "dynamics", "sequence", "smoke", "tabular", "vision"]
SEED_EXAMPLES = {
    "kinetic_mixing_dynamics.py": "dynamics",
    "set_model_correlated_tokens.py": "correlated_tokens",
    "butterfly_sequence.py": "sequence",
}
CIFAR_ENV = "IDEABENCH_CIFAR10_DIR"

REQUIRED_KEYS: dict[str, Any] = {
    "name": str,
    "version": int,
    "title": str,
    "description": str,
    "task": str,
    "spec": {"task": str, "input_shape": list, "output_shape": list},
    "metric": {"name": str, "loss": str, "direction": str, "description": str},
    "defaults": {
        "epochs": int,
        "batch_size": int,
        "lr_grid": list,
        "weight_decay": float,
        "sweep_seeds": int,
        "n_seeds": int,
    },
    "sizes": {"train": int, "val": int, "test": int},
    "smallest_effect_rel_pct": float,
    "param_cap": int,
    "param_parity_ratio": float,
    "max_configs": int,
    "divergence_ceiling": float,
    "baseline": {"name": str, "description": str},
    "data_seed_base": int,
}


# -- fake CIFAR-10 ------------------------------------------------------------------


def write_fake_cifar(directory: Path, per_batch: int, n_test: int, seed: int = 0) -> None:
    """Write data_batch_1..5 and test_batch as the real python batches are laid out."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = n_test if name == "test_batch" else per_batch
        batch = {
            b"batch_label": name.encode(),
            b"labels": [int(v) for v in rng.integers(0, 10, size=n)],
            b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
            b"filenames": [f"{name}_{i}.png".encode() for i in range(n)],
        }
        with (directory / name).open("wb") as handle:
            pickle.dump(batch, handle, protocol=2)


@pytest.fixture(scope="session")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake CIFAR-10 directory just big enough for the track's subset sizes."""
    from tracks.cifar10.track import CARD

    sizes = CARD["sizes"]
    directory = tmp_path_factory.mktemp("cifar10")
    write_fake_cifar(directory, math.ceil((sizes["train"] + sizes["val"]) / 5), sizes["test"])
    return directory


# -- helpers --------------------------------------------------------------------------


def load_track(name: str) -> Track:
    track = ENTRY_POINTS[name].load()
    assert isinstance(track, Track)
    return track


_splits_cache: dict[tuple[str, int], Splits] = {}


def splits_of(name: str, seed: int, monkeypatch: pytest.MonkeyPatch, cifar_dir: Path) -> Splits:
    """make_splits(seed), once per test session (the dynamics solver takes about a second)."""
    if name == "cifar10":
        monkeypatch.setenv(CIFAR_ENV, str(cifar_dir))
    key = (name, seed)
    if key not in _splits_cache:
        _splits_cache[key] = load_track(name).make_splits(seed)
    return _splits_cache[key]


def stated_param_count(card: dict[str, Any]) -> int:
    match = re.search(r"(\d[\d,]*) parameters", card["baseline"]["description"])
    assert match, "the baseline description must state '<N> parameters'"
    return int(match.group(1).replace(",", ""))


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def exec_idea(path: Path) -> dict[str, Any]:
    source = path.read_text()
    check_source(source)
    namespace: dict[str, Any] = {"__name__": f"idea_{path.stem}"}
    exec(compile(source, str(path), "exec"), namespace)
    return namespace


def idea_files() -> list[tuple[str, Path]]:
    files = [(name, ROOT / "tracks" / name / "example_idea.py") for name in TRACK_NAMES]
    files += [(track, EXAMPLES / file) for file, track in sorted(SEED_EXAMPLES.items())]
    return files


def probe_input(track: Track, batch: int = 4) -> torch.Tensor:
    return torch.randn(batch, *track.spec["input_shape"])


# -- cards ----------------------------------------------------------------------------


def test_built_in_tracks_are_registered() -> None:
    assert set(BUILT_IN) <= set(TRACK_NAMES)


def _check_keys(card: dict[str, Any], required: dict[str, Any], where: str) -> None:
    for key, kind in required.items():
        assert key in card, f"{where}: missing {key!r}"
        if isinstance(kind, dict):
            assert isinstance(card[key], dict), f"{where}.{key} must be an object"
            _check_keys(card[key], kind, f"{where}.{key}")
        elif kind is float:
            assert isinstance(card[key], int | float), f"{where}.{key} must be a number"
        else:
            assert isinstance(card[key], kind), f"{where}.{key} must be {kind.__name__}"


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_card_has_every_required_key(name: str) -> None:
    card = load_track(name).card
    _check_keys(card, REQUIRED_KEYS, name)
    assert card["name"] == name
    assert card["task"] == card["spec"]["task"] in {"regression", "classification"}
    assert card["metric"]["direction"] == "lower"
    assert card["metric"]["name"] == card["metric"]["loss"] in {"mse", "cross_entropy"}
    assert (card["metric"]["loss"] == "cross_entropy") == (card["task"] == "classification")
    assert len(card["defaults"]["lr_grid"]) == 3
    assert card["defaults"]["lr_grid"] == sorted(card["defaults"]["lr_grid"])
    assert card["param_cap"] >= stated_param_count(card)


# -- data -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_make_splits_is_deterministic_and_matches_the_card(
    name: str, monkeypatch: pytest.MonkeyPatch, cifar_dir: Path
) -> None:
    track = load_track(name)
    card, spec = track.card, track.spec
    a = splits_of(name, 0, monkeypatch, cifar_dir)
    again = track.make_splits(0)
    other = splits_of(name, 1, monkeypatch, cifar_dir)
    assert a.checksum() == again.checksum()
    assert a.checksum() != other.checksum()
    assert not torch.equal(a.x_train, other.x_train)

    classification = card["metric"]["loss"] == "cross_entropy"
    for split in ("train", "val", "test"):
        x, y = getattr(a, f"x_{split}"), getattr(a, f"y_{split}")
        n = card["sizes"][split]
        assert tuple(x.shape) == (n, *spec["input_shape"]), split
        assert x.dtype == torch.float32
        assert bool(torch.isfinite(x).all())
        if classification:
            assert tuple(y.shape) == (n,) and y.dtype == torch.int64
            assert int(y.min()) >= 0 and int(y.max()) < spec["n_classes"]
            assert spec["output_shape"] == [spec["n_classes"]]
        else:
            assert tuple(y.shape) == (n, *spec["output_shape"]) and y.dtype == torch.float32
            assert bool(torch.isfinite(y).all())


# -- baselines ------------------------------------------------------------------------


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_baseline_builds_with_the_stated_parameter_count(name: str) -> None:
    track = load_track(name)
    spec = {**track.spec, "hparams": {}}
    torch.manual_seed(0)
    model = track.build_baseline(spec)
    assert n_params(model) == stated_param_count(track.card)
    assert n_params(model) <= track.card["param_cap"]
    with torch.no_grad():
        out = model(probe_input(track))
    assert tuple(out.shape) == (4, *spec["output_shape"])
    assert bool(torch.isfinite(out).all())


# -- example ideas --------------------------------------------------------------------


@pytest.mark.parametrize(("name", "path"), idea_files(), ids=lambda v: str(v))
def test_example_idea_builds_and_measures(name: str, path: Path) -> None:
    track = load_track(name)
    idea = exec_idea(path)
    hparams = check_hparams(idea.get("HPARAMS", {}), max_configs=track.card["max_configs"])
    spec = {**track.spec, "hparams": {key: values[0] for key, values in hparams.items()}}
    torch.manual_seed(0)
    model = idea["build_model"](spec)
    assert isinstance(model, torch.nn.Module)
    assert n_params(model) <= track.card["param_cap"]
    x = probe_input(track, batch=8)
    with torch.no_grad():
        out = model(x)
    assert tuple(out.shape) == (8, *spec["output_shape"])
    assert bool(torch.isfinite(out).all())
    if "MECHANISM" in idea:
        mechanism = check_mechanism(idea["MECHANISM"])
        probe = mechanism.get("probe")

        def quantity(m: torch.nn.Module) -> float:
            if not probe:
                return float(idea["measure"](m, x))
            return probes.measure(probe, through_capture(m, track.spec["input_shape"]), x)

        value = quantity(model)
        assert isinstance(value, float) and math.isfinite(value)
        baseline_value = quantity(track.build_baseline({**track.spec, "hparams": {}}))
        assert isinstance(baseline_value, float) and math.isfinite(baseline_value)


@pytest.mark.parametrize(("file", "name"), sorted(SEED_EXAMPLES.items()))
def test_seed_examples_keep_parameter_parity(file: str, name: str) -> None:
    track = load_track(name)
    idea = exec_idea(EXAMPLES / file)
    for values in _grid(idea.get("HPARAMS", {})):
        model = idea["build_model"]({**track.spec, "hparams": values})
        baseline = track.build_baseline({**track.spec, "hparams": {}})
        big, small = sorted([n_params(model), n_params(baseline)], reverse=True)
        assert big / small <= track.card["param_parity_ratio"]


def _grid(hparams: dict[str, list[Any]]) -> list[dict[str, Any]]:
    configs: list[dict[str, Any]] = [{}]
    for key, values in hparams.items():
        configs = [{**c, key: v} for c in configs for v in values]
    return configs


def test_mechanisms_hold_by_construction_on_untrained_models() -> None:
    """The exact-symmetry signatures are exact already at initialisation."""
    dyn = load_track("dynamics")
    x = torch.randn(16, *dyn.spec["input_shape"])
    kinetic = exec_idea(EXAMPLES / "kinetic_mixing_dynamics.py")
    model = kinetic["build_model"]({**dyn.spec, "hparams": {"h": 0.03}})
    assert kinetic["measure"](model, x) == pytest.approx(1.0, rel=1e-3)
    assert kinetic["measure"](dyn.build_baseline(dyn.spec), x) == 0.0

    # The butterfly's norm_ratio probe: tests/bench/test_probes.py (it needs the captured graph).
    tok = load_track("correlated_tokens")
    sets = exec_idea(EXAMPLES / "set_model_correlated_tokens.py")
    model = sets["build_model"]({**tok.spec, "hparams": {"width": 50}})
    assert probes.measure(sets["MECHANISM"]["probe"], model, torch.randn(16, 6, 4)) < 1e-5


# -- cifar10 loader -------------------------------------------------------------------


def test_cifar_without_the_variable_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CIFAR_ENV, raising=False)
    with pytest.raises(RuntimeError, match=CIFAR_ENV):
        load_track("cifar10").make_splits(0)


def test_cifar_with_a_directory_lacking_batches_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CIFAR_ENV, str(tmp_path))
    with pytest.raises(RuntimeError, match=f"{CIFAR_ENV}.*data_batch_1"):
        load_track("cifar10").make_splits(0)


def test_cifar_reads_the_pickle_batches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tracks.cifar10 import track as cifar

    write_fake_cifar(tmp_path, per_batch=4, n_test=3, seed=1)
    monkeypatch.setenv(CIFAR_ENV, str(tmp_path))
    train_x, train_y, test_x, test_y = cifar._load(str(cifar.data_dir()))
    assert train_x.shape == (20, 3, 32, 32) and train_x.dtype == np.uint8
    assert test_x.shape == (3, 3, 32, 32) and test_y.dtype == np.int64
    with (tmp_path / "data_batch_2").open("rb") as handle:
        raw = pickle.load(handle, encoding="bytes")
    # Row layout: 1024 red, then green, then blue values, each a row-major 32x32 image.
    assert np.array_equal(train_x[4, 1].reshape(-1), raw[b"data"][0, 1024:2048])
    assert train_y[4] == raw[b"labels"][0]
    with pytest.raises(RuntimeError, match="needs at least"):
        cifar.make_splits(0)  # 20 training images cannot fill the track's subset


def test_cifar_inputs_are_standardised(monkeypatch: pytest.MonkeyPatch, cifar_dir: Path) -> None:
    from tracks.cifar10 import track as cifar

    splits = splits_of("cifar10", 0, monkeypatch, cifar_dir)
    # Uniform random bytes: each channel's value is ((v / 255) - mean) / std.
    lowest = (0.0 - np.array(cifar.MEAN)) / np.array(cifar.STD)
    assert np.allclose(splits.x_train.amin(dim=(0, 2, 3)).numpy(), lowest, atol=1e-5)


def test_repeated_test_rows_are_fresh_measurements_of_distinct_first_rows() -> None:
    """tabular@3 measures each test patient 16 times (docs/tracks.md, "Power"): the copies share
    inputs, never a measurement, and the rows cycle: the first 100 are every patient once."""
    tabular = load_track("tabular")
    t = tabular.make_splits(3, 5)
    patients, draws = tabular.card["sizes"]["test_patients"], tabular.card["teacher"]["test_draws"]
    x, y = t.x_test.view(draws, patients, -1), t.y_test.view(draws, patients)
    assert torch.equal(x, x[:1].expand_as(x)) and len(torch.unique(x[0], dim=0)) == patients
    assert bool((y.std(dim=0) > 0.3).all())  # each copy its own noise (sd 1 before standardising)
