"""The canonical baseline's runs come from a content-addressed cache, bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import baseline_cache
from bench.execution import Trained
from bench.judge import JudgeRequest, judge
from bench.options import EngineOptions
from tests.conftest import use_cache

# A smoke idea without a mechanism: every baseline run (sweep and final) is cacheable.
IDEA = (
    "from torch import nn\n"
    "def build_model(spec):\n"
    "    return nn.Sequential(nn.Linear(8, 32), nn.SiLU(), nn.Linear(32, 1))\n"
)


def test_keys_are_canonical_and_sensitive() -> None:
    a = {"track": "smoke@1", "run": {"cfg": {"lr": 0.01, "epochs": 12}, "seed": 0}}
    b = {"run": {"seed": 0, "cfg": {"epochs": 12, "lr": 0.01}}, "track": "smoke@1"}
    assert baseline_cache.digest(a) == baseline_cache.digest(b)
    c = {"track": "smoke@1", "run": {"cfg": {"lr": 0.03, "epochs": 12}, "seed": 0}}
    assert baseline_cache.digest(a) != baseline_cache.digest(c)


def _run(run_id: str, group: int, keep: bool = False) -> dict[str, Any]:
    return {"run_id": run_id, "group": group, "keep": keep, "cfg": {"lr": 0.01}}


def _trained(run_id: str, path: str = "vectorized", state: list[np.ndarray] | None = None) -> Trained:
    return Trained(run_id=run_id, predictions=np.full((4, 1), float(len(run_id)), np.float32), diverged=False,
                   seconds=0.5, n_params=321, path=path, read_rows=lambda: np.zeros((2, 1), np.float32),
                   read_state=lambda _shapes: state if state is not None else [])


def test_the_cache_wraps_train_a_group_is_answered_only_when_all_of_it_is_cached(tmp_path: Path) -> None:
    """``CachedTrain``: a batch group whose every run is cached (with its kept tensors) is answered
    from the cache and never trained; any other group is trained and stored once ``on_run``
    accepted it, unless the trainer ran it on another path; a run without a key is never stored."""
    state = [np.arange(6, dtype=np.float32).reshape(2, 3)]
    shapes = (((2, 3), "float32"),)
    asked: list[list[str]] = []
    paths = {"a1": "vectorized", "a2": "vectorized", "b1": "vectorized", "c1": "sequential", "d1": "vectorized"}

    def train(arm: str, runs: list[dict[str, Any]], path: str, on_run: Callable[[Trained], None]) -> None:
        asked.append([r["run_id"] for r in runs])
        for r in runs:
            on_run(_trained(r["run_id"], paths[r["run_id"]], state if r["keep"] else None))

    warnings: list[str] = []
    cached = baseline_cache.CachedTrain(baseline_cache.BaselineCache(tmp_path), train, shapes=lambda _run: shapes,
                                        warn=warnings.append)
    runs = [_run("a1", 1, keep=True), _run("a2", 1, keep=True), _run("b1", 2), _run("c1", 3), _run("d1", 4)]
    keys = {r: baseline_cache.digest({"run": r}) for r in ("a1", "a2", "b1", "c1")}  # d1: no key (not cacheable)
    seen: list[Trained] = []
    cached.train("baseline", runs, "vectorized", seen.append, keys)
    assert asked == [["a1", "a2", "b1", "c1", "d1"]] and not any(t.cached for t in seen)
    assert (cached.hits, cached.misses) == (0, 4)  # c1 ran sequentially: counted, not stored
    assert [r for r in keys if cached.cache.get(keys[r]) is not None] == ["a1", "a2", "b1"]

    asked.clear()
    seen.clear()
    (tmp_path / keys["b1"][:2] / f"{keys['b1']}.json").unlink()  # b1's group is no longer all cached
    cached.train("baseline", runs, "vectorized", seen.append, keys)
    assert asked == [["b1", "c1", "d1"]]
    answered = {t.run_id: t for t in seen if t.cached}
    assert sorted(answered) == ["a1", "a2"] and answered["a1"].path == "vectorized"
    assert [a.tobytes() for a in answered["a1"].read_state(shapes)] == [state[0].tobytes()]
    assert answered["a2"].predictions.tobytes() == _trained("a2").predictions.tobytes()
    assert cached.hits == 2 and not warnings


def test_entries_round_trip_and_bad_entries_miss(tmp_path: Path) -> None:
    cache = baseline_cache.BaselineCache(tmp_path)
    key = baseline_cache.digest({"x": 1})
    assert cache.get(key) is None
    pred = np.random.default_rng(0).standard_normal((5, 1)).astype(np.float32)
    cache.put(key, pred, diverged=False, seconds=1.5, n_params=321)
    hit = cache.get(key)
    assert hit is not None and hit.n_params == 321 and not hit.diverged
    assert hit.predictions.tobytes() == pred.tobytes()
    (tmp_path / key[:2] / f"{key}.json").write_text("{not json")
    assert cache.get(key) is None


def _judge(monkeypatch: pytest.MonkeyPatch, cache_dir: Path, *, enabled: bool = True) -> dict:
    use_cache(cache_dir / "process")  # the job's options win over the process's
    options = EngineOptions(cache_dir=cache_dir, baseline_cache=enabled)
    # one job key: the same screening draw from the pool (another job's overlaps it only in part)
    report = judge(JudgeRequest(track="smoke", idea_code=IDEA, n_seeds=2, options=options,
                                job_key="cache_job")).model_dump(mode="json")["bench_report"]
    assert not (cache_dir / "process").exists()
    return report


def test_cache_hit_is_bit_identical_to_a_fresh_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fresh = _judge(monkeypatch, tmp_path / "cache")
    assert fresh["execution"]["baseline_cache"] is False
    assert fresh["execution"]["baseline_cache_misses"] > 0
    hit = _judge(monkeypatch, tmp_path / "cache")
    assert hit["execution"]["baseline_cache"] is True
    assert hit["execution"]["baseline_cache_misses"] == 0
    assert hit["execution"]["baseline_cache_hits"] == fresh["execution"]["baseline_cache_misses"]
    assert hit["execution"]["path"] == fresh["execution"]["path"]
    # cached runs keep the seconds they took when they were trained (issue 25.11: they said 0.0)
    assert hit["baseline"]["wall_time_s"] == fresh["baseline"]["wall_time_s"] > 0
    uncached = _judge(monkeypatch, tmp_path / "unused", enabled=False)
    assert uncached["execution"]["baseline_cache_hits"] == 0
    assert not (tmp_path / "unused").exists()
    for report in (hit, uncached):
        for arm in ("baseline", "idea"):
            assert report[arm]["full"]["per_seed"] == fresh[arm]["full"]["per_seed"]  # exact floats
            assert [r["per_seed"] for r in report[arm]["sweep"]] == [r["per_seed"] for r in fresh[arm]["sweep"]]
        assert report["comparison"] == fresh["comparison"]


def test_mechanism_on_a_hit_measures_the_cached_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from bench.catalog import get_card

    use_cache(tmp_path)
    request = JudgeRequest(track="smoke", idea_code=get_card("smoke")["example_idea"], n_seeds=2,
                           job_key="cache_job")
    fresh = judge(request).model_dump(mode="json")["bench_report"]
    hit = judge(request).model_dump(mode="json")["bench_report"]
    assert hit["execution"]["baseline_cache_misses"] == 0 and hit["execution"]["baseline_cache"] is True
    assert hit["mechanism_signature"]["baseline_values"] == fresh["mechanism_signature"]["baseline_values"]
    assert hit["baseline"]["full"]["per_seed"] == fresh["baseline"]["full"]["per_seed"]
