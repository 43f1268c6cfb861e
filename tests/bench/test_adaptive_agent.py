"""The null stream's adaptive agent (issue 25.7): its policy, with a scripted judge in place of
the engine, and the service's discovery rule as a pure function. The agent's figures against
the real engine are ``benchmarks/null_stream.py --agents N`` (docs/statistics.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from app.reports.discoveries import stream_qvalues
from bench.stats import bh_qvalues

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def null_stream() -> ModuleType:
    spec = importlib.util.spec_from_file_location("null_stream_under_test", ROOT / "benchmarks" / "null_stream.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_agent_chases_its_best_screening_p_then_resubmits_and_floods_it(
    null_stream: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each next file follows from the reports before it: the best p of the probes and tuning
    rounds is the file it resubmits (unchanged and with no-op edits) and floods."""
    seen: list[str] = []
    p_of_stream = {3: 0.02, 11: 0.004, 14: 0.5}  # k -> the screening p its report shows

    def scripted(kind: str, index: int, epoch: int, code: str | None = None) -> dict[str, Any]:
        assert kind == "agent" and epoch == 2 and code is not None
        seen.append(code)
        k = int(code.split("torch.randn(")[1].split(")")[0])
        return {"kind": kind, "epoch": epoch, "p_screening": p_of_stream.get(k, 0.3), "p_helps": 0.3,
                "p_confirmation": None, "family": "f", "screened": False, "screened_guarded": False,
                "helps": False, "worked": False, "runs": 1, "confirmation_runs": 0, "seconds": 0.0,
                "confirmation_seconds": 0.0}

    monkeypatch.setattr(null_stream, "run_one", scripted)
    rows = null_stream.run_agent(epoch=2, first_index=0)
    phases = [row["phase"] for row in rows]
    probes, tunes = null_stream.AGENT_PROBES, 2 * null_stream.AGENT_TUNES
    assert phases == (["probe"] * probes + ["tune"] * tunes + ["resubmit"] * (null_stream.AGENT_RESUBMITS + 2)
                      + ["flood"] * null_stream.AGENT_FLOOD)
    assert [row["k"] for row in rows[: probes + tunes]] == list(range(1, probes + tunes + 1))
    later = rows[probes + tunes :]
    assert {row["k"] for row in later} == {11}  # the tuning round's p 0.004 beat the probes' 0.02
    resubmitted = [row for row in later if row["phase"] == "resubmit"]
    assert [row["variant"] for row in resubmitted][-2:] == ["noop_layer", "unused_hparam"]
    assert len({seen[probes + tunes + i] for i in range(null_stream.AGENT_RESUBMITS)}) == 1  # unchanged
    floods = [code for row, code in zip(rows, seen, strict=True) if row["phase"] == "flood"]
    assert len(set(floods)) == null_stream.AGENT_FLOOD  # each a new graph: 1 .. N extra ReLUs
    assert [code.count("nn.ReLU()") for code in floods] == list(range(2, null_stream.AGENT_FLOOD + 2))


def test_a_refused_job_tells_the_agent_nothing_good(null_stream: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(kind: str, index: int, epoch: int, code: str | None = None) -> dict[str, Any]:
        return {"kind": kind, "epoch": epoch, "refused": "not_capturable", "screened": False,
                "screened_guarded": False, "helps": False, "worked": False, "runs": 0}

    monkeypatch.setattr(null_stream, "run_one", refused)
    rows = null_stream.run_agent(epoch=1, first_index=0)
    # no report was better than another: it keeps its first probe, and tunes on
    assert {row["k"] for row in rows if row["phase"] in ("resubmit", "flood")} == {1}
    summary = null_stream.agent_summary(rows, rows)
    assert summary["agent_judged"] == 0 and summary["agent_helps"] == 0


def test_the_service_rule_makes_re_rolls_one_hypothesis() -> None:
    """One key's attempts of one family are one hypothesis, Bonferroni over them: five re-rolls
    at p 0.01 are one p of 0.05, where plain BH over reports would give each q 0.01."""
    attempts = [(("agent", "family-a"), 0.01)] * 5 + [(("other", "family-b"), 0.5)]
    assert stream_qvalues(attempts) == pytest.approx([0.1] * 5 + [0.5])  # BH over 2: 0.05 * 2 / 1
    assert bh_qvalues([p for _, p in attempts]) == pytest.approx([0.012] * 5 + [0.5])
    # other families of the same key are other hypotheses
    assert stream_qvalues([(("k", "a"), 0.01), (("k", "b"), 0.04)]) == pytest.approx([0.02, 0.04])
    assert stream_qvalues([]) == []
