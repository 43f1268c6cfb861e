"""bench.report: the seeds validate, the schema file is current, NaN is rejected."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bench.report import BenchReport, Report, export_json_schema, schema_text
from bench.stats import compare
from bench.verdicts import decide

ROOT = Path(__file__).resolve().parents[2]
SEED_FILES = sorted((ROOT / "tests" / "data" / "seeds").glob("*.txt"))


def read_seed(path: Path) -> dict[str, Any]:
    """The JSON object after the first '{' of a seed report."""
    text = path.read_text(encoding="utf-8")
    report: dict[str, Any] = json.loads(text[text.index("{") :])
    return report


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name[:3])
def test_seed_bench_report_validates(path: Path) -> None:
    seed = read_seed(path)
    bench = BenchReport.model_validate(seed["bench_report"])
    assert bench.bench_version == 1 and bench.n_seeds == 8
    arm = bench.idea.full or bench.idea  # nested or flat shape
    assert arm.per_seed is not None and len(arm.per_seed) == 8


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name[:3])
def test_seed_validates_as_report(path: Path) -> None:
    seed = read_seed(path)
    report = Report.model_validate(seed)
    assert report.summary == seed["verdict"]  # legacy paragraph name
    assert report.system_verdict == seed["system_verdict"]
    dumped = json.loads(report.model_dump_json(exclude_none=True))
    assert dumped["confidence"] == seed["confidence"]  # extras survive
    Report.model_validate_json(report.model_dump_json())


def test_schema_file_is_current(tmp_path: Path) -> None:
    committed = (ROOT / "docs" / "report.schema.json").read_text(encoding="utf-8")
    assert committed == schema_text(), "run: python -m bench.report > docs/report.schema.json"
    export_json_schema(tmp_path / "schema.json")
    assert (tmp_path / "schema.json").read_text(encoding="utf-8") == committed


def _seed(index: int = 2) -> dict[str, Any]:
    return copy.deepcopy(read_seed(SEED_FILES[index]))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_rejected(bad: float) -> None:
    seed = _seed()
    seed["bench_report"]["comparison"]["p_value"] = bad
    with pytest.raises(ValidationError):
        Report.model_validate(seed)
    seed = _seed()
    seed["bench_report"]["comparison"]["per_seed_diffs"][3] = bad
    with pytest.raises(ValidationError):
        Report.model_validate(seed)
    seed = _seed()
    seed["metrics"]["extra"] = {"x": [1.0, bad]}  # extras too
    with pytest.raises(ValidationError):
        Report.model_validate(seed)


def test_nan_in_json_text_is_rejected() -> None:
    text = json.dumps(_seed()).replace('"p_value": 0.0081', '"p_value": NaN')
    assert "NaN" in text
    with pytest.raises(ValidationError):
        Report.model_validate_json(text)


def test_worked_must_mirror_system_verdict() -> None:
    seed = _seed()
    seed["worked"] = False
    with pytest.raises(ValidationError):
        Report.model_validate(seed)


def test_engine_shaped_report_round_trips() -> None:
    base = [0.056, 0.060, 0.063, 0.059, 0.052, 0.057, 0.057, 0.050]
    idea = [0.037, 0.044, 0.042, 0.049, 0.042, 0.051, 0.044, 0.037]
    comparison = compare(base, idea).as_dict()
    verdicts = decide(comparison, 1, smallest_effect=0.002)
    report = {
        **verdicts,
        "summary": "The idea lowered test MSE on all 8 paired seeds.",
        "metrics": {
            "baseline_mean": comparison["baseline_mean"],
            "idea_mean": comparison["idea_mean"],
        },
        "mechanism_ok": 1,
        "system_judged": True,
        "bench_report": {
            "bench_version": 1,
            "track": "smoke",
            "track_id": "smoke@1",
            "track_version": 1,
            "model": "idea",
            "metric_direction": "lower is better",
            "n_seeds": 8,
            "baseline": {
                "best_cfg": {"lr": 0.001},
                "full": {"mean": comparison["baseline_mean"], "per_seed": base, "n": 8},
            },
            "idea": {
                "best_cfg": {"lr": 0.003},
                "full": {"mean": comparison["idea_mean"], "per_seed": idea, "n": 8},
            },
            "comparison": comparison,
            "mechanism_signature": {
                "quantity": "swap sensitivity",
                "expect": {"kind": "close_to", "target": 0.0, "atol": 1e-5},
                "confirmed": True,
            },
            "seeds": {"sweep": [0, 1], "final": list(range(100, 108))},
            "warnings": [],
            "versions": {"python": "3.11", "numpy": "2"},
            "wall_time_s": {"baseline": 1.5, "idea": 2.0, "total": 3.5},
            "diverged": {"baseline": 0, "idea": 0},
        },
    }
    parsed = Report.model_validate(report)
    assert parsed.worked and parsed.bench_report.comparison.p_method is not None
    again = Report.model_validate_json(parsed.model_dump_json())
    assert again == parsed
