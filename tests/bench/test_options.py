"""Engine options (bench.options): built by the host from its settings and handed in."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.catalog import get_card
from bench.judge import JudgeRequest, judge
from bench.options import EngineOptions


def test_the_host_builds_the_options_from_its_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26.7: bench reads no environment; the host's settings (IDEABENCH_*) become the
    engine's options, and the process's default and sandbox policy are what it configures."""
    from app.settings import Settings
    from bench import options as engine_options
    from bench import sandbox
    from bench.sandbox import launcher

    for name in ("IDEABENCH_CACHE_DIR", "IDEABENCH_BASELINE_CACHE", "IDEABENCH_EXECUTION", "IDEABENCH_BWRAP",
                 "IDEABENCH_ALLOW_WEAK_SANDBOX", "IDEABENCH_REQUIRE_FULL_ISOLATION"):
        monkeypatch.delenv(name, raising=False)
    # a host's data directory (`IDEABENCH_DATA_DIR=X ideabench worker`) holds its caches
    plain = Settings(data_dir=tmp_path).host_options()
    assert plain.engine == EngineOptions(tmp_path / "cache", True, "auto")
    assert plain.sandbox == sandbox.SandboxPolicy() and plain.data_dir == tmp_path
    monkeypatch.setenv("IDEABENCH_CACHE_DIR", "/srv/cache")
    monkeypatch.setenv("IDEABENCH_BASELINE_CACHE", "off")
    monkeypatch.setenv("IDEABENCH_EXECUTION", "sequential")
    monkeypatch.setenv("IDEABENCH_BWRAP", "0")
    monkeypatch.setenv("IDEABENCH_ALLOW_WEAK_SANDBOX", "1")
    options = Settings(data_dir=tmp_path).host_options()
    assert options.engine == EngineOptions(Path("/srv/cache"), False, "sequential")
    assert options.sandbox == sandbox.SandboxPolicy(bwrap="0", allow_weak=True)
    assert (options.engine.baseline_dir, options.engine.tracks_dir) == (Path("/srv/cache/baseline"),
                                                                         Path("/srv/cache/tracks"))

    # the environment alone changes nothing in the engine: only what a host configures
    assert not sandbox.weak_allowed() and launcher.required_layers() == sandbox.JUDGE_LAYERS
    engine_options.configure(options)
    assert engine_options.current() is options and sandbox.weak_allowed() and launcher.required_layers() == ()
    monkeypatch.setenv("IDEABENCH_REQUIRE_FULL_ISOLATION", "true")
    engine_options.configure(Settings(data_dir=tmp_path).host_options())
    assert launcher.required_layers() == sandbox.FULL_ISOLATION  # it overrides allow_weak


def test_bench_reads_no_environment() -> None:
    """No module of bench/ reads os.environ or getenv (the child's fixed environment is a literal
    in the launcher; a track's data requirement is checked against a mapping its caller passes).
    A forked child sets its own (``os.environ.update`` in the fork server): a write, no read."""
    import bench

    root = Path(bench.__file__).parent
    readers = [str(path.relative_to(root)) for path in root.rglob("*.py")
               if any(word in path.read_text().replace("os.environ.update(", "")
                      for word in ("os.environ", "getenv", "import environ"))]
    assert readers == []


def test_sequential_execution_trains_one_run_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDEABENCH_EXECUTION", "auto")  # the job's options, not the environment, decide
    idea = get_card("smoke")["example_idea"]
    options = EngineOptions(cache_dir=tmp_path, baseline_cache=False, execution="sequential")
    report = judge(JudgeRequest(track="smoke", idea_code=idea, n_seeds=2, options=options)).model_dump(mode="json")
    assert report["bench_report"]["execution"]["path"] == "sequential"
    assert not any(tmp_path.iterdir())  # no cache written
