"""A check before the queue (issue 27.5): everything a job checks before it trains, no run."""

from __future__ import annotations

from typing import Any

import pytest

import bench.protocol
from bench.catalog import get_card
from bench.errors import BenchError, ErrorCode
from bench.protocol import JudgeRequest, check

SMOKE = get_card("smoke")
WIDE = """
from torch import nn

HPARAMS = {"width": [32, 400]}


def build_model(spec):
    w = spec["hparams"]["width"]
    return nn.Sequential(nn.Linear(spec["n_features"], w), nn.ReLU(), nn.Linear(w, 1))
"""


def test_a_check_answers_what_a_job_would_enforce_and_touches_no_epoch_seed(monkeypatch: Any) -> None:
    def no_secret() -> None:
        raise AssertionError("a check read the deployment's seed secret")

    monkeypatch.setattr(bench.protocol, "deployment_secret", no_secret)
    events: list[Any] = []
    found = check(JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"]))
    assert found["passed"] is True and found["track"] == "smoke@1" and not events
    assert found["parameters"] == {"idea": [321], "baseline": 321, "limit": 353}
    assert found["buffer_words"] == {"idea": [0], "limit": 32}
    assert found["parameter_tensors"] == {"idea": [4], "limit": 64}
    assert found["flops_per_example"]["limit"] == pytest.approx(4 * found["flops_per_example"]["baseline"])
    assert found["runs"]["planned"] > 0 and found["runs"]["at_most"] >= found["runs"]["planned"]
    assert found["execution"]["path"] in ("vectorized", "sequential") and len(found["graph_sha256"]) == 1


def test_a_check_fails_with_the_code_the_job_would_end_with() -> None:
    with pytest.raises(BenchError) as caught:
        check(JudgeRequest(track="smoke", idea_code=WIDE))
    assert caught.value.code is ErrorCode.PARAMETER_PARITY and "width" in caught.value.message
    with pytest.raises(BenchError) as syntax:
        check(JudgeRequest(track="smoke", idea_code="def build_model(spec):\n    return (\n"))
    assert syntax.value.code is ErrorCode.INVALID_CODE
