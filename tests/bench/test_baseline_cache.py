"""The canonical baseline's runs come from a content-addressed cache, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import baseline_cache
from bench.options import EngineOptions
from bench.protocol import JudgeRequest, judge

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
    monkeypatch.setenv("IDEABENCH_CACHE_DIR", str(cache_dir / "from_env"))  # options passed in win
    options = EngineOptions(cache_dir=cache_dir, baseline_cache=enabled)
    # one job key: the same screening draw from the pool (another job's overlaps it only in part)
    report = judge(JudgeRequest(track="smoke", idea_code=IDEA, n_seeds=2, options=options,
                                job_key="cache_job")).model_dump(mode="json")["bench_report"]
    assert not (cache_dir / "from_env").exists()
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

    monkeypatch.setenv("IDEABENCH_CACHE_DIR", str(tmp_path))
    request = JudgeRequest(track="smoke", idea_code=get_card("smoke")["example_idea"], n_seeds=2,
                           job_key="cache_job")
    fresh = judge(request).model_dump(mode="json")["bench_report"]
    hit = judge(request).model_dump(mode="json")["bench_report"]
    assert hit["execution"]["baseline_cache_misses"] == 0 and hit["execution"]["baseline_cache"] is True
    assert hit["mechanism_signature"]["baseline_values"] == fresh["mechanism_signature"]["baseline_values"]
    assert hit["baseline"]["full"]["per_seed"] == fresh["baseline"]["full"]["per_seed"]
