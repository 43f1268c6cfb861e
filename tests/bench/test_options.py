"""Engine options (bench.options): read from the environment once per job, or passed in."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.catalog import get_card
from bench.options import EngineOptions
from bench.protocol import JudgeRequest, judge


def test_options_from_the_environment() -> None:
    assert EngineOptions.from_env({}) == EngineOptions(Path("var/cache"), True, "auto")
    # a host's data directory (`ideabench worker --data-dir X`) holds its caches (issue 26.7)
    assert EngineOptions.from_env({}, data_dir=Path("/srv/x")).cache_dir == Path("/srv/x/cache")
    assert EngineOptions.from_env({"IDEABENCH_DATA_DIR": "/d"}).cache_dir == Path("/d/cache")
    assert EngineOptions.from_env({"IDEABENCH_CACHE_DIR": "/c"}, data_dir=Path("/srv/x")).cache_dir == Path("/c")
    assert EngineOptions.from_env({
        "IDEABENCH_CACHE_DIR": "/srv/cache", "IDEABENCH_BASELINE_CACHE": " Off ", "IDEABENCH_EXECUTION": "Sequential",
    }) == EngineOptions(Path("/srv/cache"), False, "sequential")
    assert EngineOptions.from_env({"IDEABENCH_BASELINE_CACHE": "1", "IDEABENCH_EXECUTION": "fast"}).execution == "auto"
    options = EngineOptions(cache_dir=Path("/c"))
    assert (options.baseline_dir, options.tracks_dir) == (Path("/c/baseline"), Path("/c/tracks"))


def test_sequential_execution_trains_one_run_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDEABENCH_EXECUTION", "auto")  # the job's options, not the environment, decide
    idea = get_card("smoke")["example_idea"]
    options = EngineOptions(cache_dir=tmp_path, baseline_cache=False, execution="sequential")
    report = judge(JudgeRequest(track="smoke", idea_code=idea, n_seeds=2, options=options)).model_dump(mode="json")
    assert report["bench_report"]["execution"]["path"] == "sequential"
    assert not any(tmp_path.iterdir())  # no cache written
