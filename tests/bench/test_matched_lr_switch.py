"""Red team: the matched baseline's shortfall is measured in its check at the lr it chose THERE
(the track's coarse grid), but in the job it is compared at the lr it chooses in the job, from a
grid densified by the idea's extra configs (budget_factor) -- an lr its check never ran.
``reaches`` subtracts the check's shortfall from the main comparison only; the comparison at the
idea's lr (where the matched baseline may be honest) only has to be significant.

Scripted executor (tests/bench/scripted.py): each run scores offset**2. The script below is a
function of the FILE and the CONFIG only (never of ``run.checking``, the phase or the seed), i.e.
the matched baseline is the same model in its check and in its job; it ASSUMES a file can make the
trusted trainer produce a model that is nearly the canonical one at lr 0.03 and clearly worse at
the dense grid's 0.0251/0.0398 (a sharp lr optimum; or, as the red team's r4_forge5_a showed on
the real smoke track, a val-chosen lr on a densified grid that does badly on test), which
tests/security/test_parent_boundary.py's lr-keyed matched baseline does through real children.
Before the fix (a matched baseline's final config is its check's: ``Job.pinned``) both cases
got helps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from bench.judge import judge
from bench.report import Report
from bench.seeding import SeedSecret
from tests.bench.scripted import TRACK, Asked, Scripted, ScriptedExecutor, scripted_request

SECRET = SeedSecret(key=b"scripted-protocol-rules-secret-0", epoch=1)
N = 7
BODY = "def build_model(spec, **hp):\n    raise AssertionError\n"
IDEA = "# idea: a copy of the track's baseline, with a pointless second config\nHPARAMS = {\"eps\": [0, 1]}\n" + BODY
MATCHED = "# the agent's matched baseline\n" + BODY
CANONICAL = 0.25  # the track's baseline at its best lr (0.03), MSE; m = 2 % = 0.005


@dataclass
class ByFile(ScriptedExecutor):
    """HPARAMS by the file loaded (the stock executor gives them by arm, and the check's idea arm
    is the matched baseline)."""

    by_file: dict[str, dict[str, list[Any]]] | None = None

    def load(self, arm, command):  # noqa: ANN001, ANN201
        reply = super().load(arm, command)
        return reply.model_copy(update={"hparams": (self.by_file or {}).get(command.code or "", {})})


class Factory(Scripted):
    def __call__(self, request, workdir, deadline, cancel):  # noqa: ANN001, ANN204
        ex = ByFile(self.script, checking=request.checking_matched, by_file={IDEA: {"eps": [0, 1]}})
        self.jobs.append(ex)
        return ex


def canonical_mse(lr: float) -> float:
    return CANONICAL * (1 + 0.4 * abs(math.log(lr / 0.03)))


def matched_mse(lr: float) -> float:
    """Almost the canonical one at lr 0.03 (worse by 0.1 m, on every seed: non-inferior), and
    3 m worse anywhere else (graded, so the dense grid's best is 0.0251, not an edge)."""
    if math.isclose(lr, 0.03):
        return CANONICAL * (1 + 0.1 * 0.02)
    return CANONICAL * (1 + 3 * 0.02) * (1 + 0.1 * abs(math.log(lr / 0.03)))


def make_script(idea_lr: float):  # noqa: ANN201
    def idea_mse(lr: float) -> float:  # a copy of the canonical baseline, its optimum at idea_lr
        return canonical_mse(lr * 0.03 / idea_lr)  # (a rescaled copy: w_eff = c w under Adam)

    def script(run: Asked) -> float:
        lr = run.cfg["lr"]
        if run.checking:  # the check: the matched baseline is the idea arm, the track's the baseline
            mse = matched_mse(lr) if run.arm == "idea" else canonical_mse(lr)
        else:  # the job: the matched baseline is the baseline arm, the idea is the idea
            mse = matched_mse(lr) if run.arm == "baseline" else idea_mse(lr)
        return math.sqrt(mse)

    return script


@pytest.mark.parametrize("idea_lr", [0.03, 0.01])
def test_a_matched_baseline_compared_at_an_lr_its_check_never_ran_is_not_helps(idea_lr: float) -> None:
    """idea_lr 0.03: the copy at the canonical lr (matched-lr comparison: 0.1 m, significant).
    idea_lr 0.01: a rescaled copy whose best lr is 0.01, where the matched baseline also sandbags:
    it defeats a fix that only asks the matched-lr comparison to reach m too."""
    executor = Factory(make_script(idea_lr))
    request = scripted_request(seed_secret=SECRET, n_seeds=N, job_key="job", baseline_code=MATCHED)
    request.idea_code = IDEA
    report = judge(request, executor=executor, track=TRACK).model_dump(mode="json")
    Report.model_validate(report)
    br = report["bench_report"]
    check = br["matched_baseline_check"]
    summary = {
        "check_worse_by": check["worse_by"], "check_m": check["smallest_effect"],
        "job_baseline_lr": br["baseline"]["best_cfg"]["lr"], "idea_lr": br["idea"]["best_cfg"]["lr"],
        "baseline_grid": br["baseline"]["union_lr_grid"],
        "screen_gain": -br["comparison"]["delta_mean"],
        "screen_gain_at_idea_lr": None if br["screening"]["matched_lr"] is None
        else -br["screening"]["matched_lr"]["comparison"]["delta_mean"],
        "confirm_gain": None if br["confirmation"] is None else -br["confirmation"]["comparison"]["delta_mean"],
        "m_job": br["smallest_effect"],
        "verdict": (report["practical_verdict"], report["practical_detail"], report["system_verdict"]),
    }
    print(summary)
    # the idea's true gain over the track's baseline at its best lr: exactly 0
    assert (report["practical_verdict"], report["practical_detail"]) != ("helps", None), summary
