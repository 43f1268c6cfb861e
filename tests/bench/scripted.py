"""A scripted executor: the protocol driven with no child process, for tests of its rules.

``bench.judge.judge`` reaches every model through ``bench.execution.Executor``.
``ScriptedExecutor`` builds nothing and trains nothing: it answers each run with the
scripted track's exact answer plus one offset, what a test's ``Script`` says for the run
by arm, config, split and phase (``screening`` until the protocol asks for the confirmation's
inits, ``confirmation`` after). The parent still scores every prediction against the
labels only it holds, so a test sets what each arm is worth, and the protocol's own
code (the sweep, the edges, the matched run, the two looks, the verdicts) decides.
The run scores offset² (MSE), exactly, so a test writes each stage's values.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import wire
from bench.captured import ArmCapture
from bench.execution import MeasureRun, Trained
from bench.npy import read_npy
from bench.options import EngineOptions
from bench.protocol import JudgeRequest
from bench.sandbox.launcher import JUDGE_LAYERS
from bench.track import Splits, Track

CARD: dict[str, Any] = {
    "name": "scripted", "version": 1, "title": "Scripted", "description": "y = x[:, :1] / 2, exactly.",
    "task": "regression",
    "spec": {"task": "regression", "input_shape": [8], "output_shape": [1], "n_features": 8},
    "metric": {"name": "mse", "loss": "mse", "direction": "lower", "description": "mean squared error"},
    "defaults": {"epochs": 1, "batch_size": 64, "lr_grid": [0.01, 0.03, 0.1], "weight_decay": 0.0,
                 "sweep_seeds": 2, "n_seeds": 8},
    "sizes": {"train": 64, "val": 64, "test": 256},
    "smallest_effect_rel_pct": 2.0, "param_cap": 20000, "param_parity_ratio": 1.1, "compute_ratio": 4.0,
    "max_configs": 12, "divergence_ceiling": 100.0,
    "baseline": {"name": "scripted", "description": "no model: the executor answers"},
    "data_seed_base": 1,
}


def _splits(split_seed: int, task_seed: int | None = None) -> Splits:
    gen = torch.Generator().manual_seed(1_000_003 + split_seed)
    sizes = CARD["sizes"]
    x = torch.randn(sizes["train"] + sizes["val"] + sizes["test"], 8, generator=gen)
    y = x[:, :1] / 2
    a, b = sizes["train"], sizes["train"] + sizes["val"]
    return Splits(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:])


def _no_model(spec: dict[str, Any]) -> torch.nn.Module:
    raise AssertionError("a scripted job builds no model")


TRACK = Track(card=CARD, make_splits=_splits, build_baseline=_no_model)


@dataclass(frozen=True)
class Asked:
    """One run as the script sees it."""

    arm: str
    cfg: dict[str, Any]
    split: str  # val (the sweep) or test
    phase: str  # screening (the sweep, the screening) or confirmation
    n: int  # how many runs of this arm, config, split and phase came before it (its seed's place)
    checking: bool  # a matched baseline's check (its idea arm is the matched baseline)


Script = Callable[[Asked], float]  # the run's offset: it scores offset² (MSE)


def by_lr(best: dict[str, float], at_best: dict[str, float] | None = None) -> Script:
    """Each arm's offset is ``at_best[arm]`` (default 0.5) at its lr in ``best`` and grows
    with the lr's distance from it on a log scale: each arm has one clear best lr."""
    offsets = at_best or {"baseline": 0.5, "idea": 0.5}
    return lambda run: offsets[run.arm] + 0.2 * abs(math.log(run.cfg["lr"] / best[run.arm]))


@dataclass
class ScriptedExecutor:
    """One job's executor (``bench.execution.Executor``): a capture is hashes of the arm's file,
    config and seed; the trainer counts ``counts`` parameters; each run is the script's."""

    script: Script
    checking: bool = False
    hparams: dict[str, Any] = field(default_factory=dict)  # each arm's HPARAMS (default: none)
    hparams_by_file: dict[str, Any] = field(default_factory=dict)  # or each file's, whatever its arm
    counts: dict[str, int] = field(default_factory=dict)  # each arm's parameters (default: 321)
    tensors_by_file: dict[str, int] = field(default_factory=dict)  # each file's parameter tensors (default: 4)
    mechanism: dict[str, Any] | None = None
    measured: Callable[[str, MeasureRun], float] | None = None
    phase: str = "screening"
    trained: list[Asked] = field(default_factory=list)  # every run asked for
    commands: list[dict[str, Any]] = field(default_factory=list)  # each run's command, as the trainer got it
    calls: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # each arm's file, as loaded
    builds: dict[str, list[int]] = field(default_factory=dict)  # each arm's capture's build seeds
    adopted: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _note(self, call: str) -> None:
        with self.lock:
            self.calls.append(call)

    def start(self) -> None:
        self._note("start")

    def start_trainers(self, measured: bool = False) -> None:
        self._note("start_trainers")

    def load(self, arm: str, command: wire.CaptureLoad) -> wire.LoadedReply:
        self._note(f"load:{arm}")
        self.files[arm] = command.code or f"the track {command.track}'s baseline"
        hparams = self.hparams_by_file.get(command.code or "", self.hparams.get(arm, {}))
        return wire.LoadedReply(hparams=hparams, mechanism=self.mechanism if arm == "idea" else None,
                                has_measure=self.measured is not None and arm == "idea")

    def make_data(self, custom: Any, split_seeds: list[int]) -> None:
        raise AssertionError("a scripted job runs on the scripted track")

    def capture(self, arm: str, command: wire.Capture, within: tuple[float, str]) -> wire.CaptureReply:
        self._note(f"capture:{arm}")
        self.builds[arm] = list(command.init_seeds)
        return wire.CaptureReply()

    def read_capture(self, arm: str, configs_asked: list[dict[str, Any]], n_seeds: int, dest: Path,
                     max_elements: int) -> ArmCapture:
        dest.mkdir(parents=True, exist_ok=True)
        configs = [json.dumps(hp, sort_keys=True) for hp in configs_asked]
        seeds = self.builds[arm]
        assert len(seeds) == n_seeds

        def sha(*parts: Any) -> str:  # what the arm's file builds: its code's, not its role's
            return hashlib.sha256(repr((self.files[arm], *parts)).encode()).hexdigest()

        return ArmCapture(
            arm=arm, configs=tuple(configs), shapes=tuple((((2,), "float32"),) for _ in configs),
            graph_sha256=tuple(sha(c) for c in configs), directory=dest,
            tensors_sha256=tuple(sha(c, seeds) for c in configs),
            seed_sha256=tuple(tuple(sha(c, s) for s in seeds) for c in configs),
            families=tuple(sha(c)[:16] for c in configs),
        )

    def load_trainer(self, arm: str, command: wire.Load) -> wire.DeviceReply:
        return wire.DeviceReply(device="cpu")

    def check(self, arm: str, command: wire.Check) -> wire.CheckReply:
        n = len(command.configs)
        return wire.CheckReply(n_params=[self.counts.get(arm, 321)] * n, n_buffers=[0] * n, flops=[642.0] * n,
                               forward_rows=[[16]] * n, forward_cost=[[642.0 * 16]] * n,
                               n_tensors=[self.tensors_by_file.get(self.files[arm], 4)] * n,
                               vectorizable=True)

    def train(self, arm: str, runs: list[dict[str, Any]], path: str, on_run: Callable[[Trained], None]) -> None:
        for run in runs:
            x = read_npy((Path(run["data_dir"]) / f"x_{run['eval']}.npy").read_bytes())  # threads: no np.load (bench.npy)
            with self.lock:
                n = sum(a.arm == arm and a.cfg == run["cfg"] and a.split == run["eval"] and a.phase == self.phase
                        for a in self.trained)
                asked = Asked(arm, run["cfg"], run["eval"], self.phase, n, self.checking)
                self.trained.append(asked)
                self.commands.append(run)
            pred = (x[:, :1] / 2 + self.script(asked)).astype(np.float32)
            alone = pred[run["rows"]]  # each checked row, predicted alone: the same numbers
            on_run(Trained(
                run_id=run["run_id"], predictions=pred, diverged=False, seconds=0.01, n_params=321, path=path,
                read_rows=functools.partial(np.asarray, alone),
                read_state=lambda shapes: [np.zeros(shape, dtype=dtype) for shape, dtype in shapes],
            ))

    def forget_builds(self) -> None:
        self._note("forget_builds")

    def rebuild(self, arm: str, *, hparams: dict[str, Any], build_seeds: list[int], within: tuple[float, str],
                captured: ArmCapture, config: int, decoys: list[int | None], numbers: list[int | None],
                max_elements: int) -> None:
        self._note(f"rebuild:{arm}")
        # the decoys are this job's screening seeds, the new ones are numbered after the capture's
        assert all((d is None) != (n is None) for d, n in zip(decoys, numbers, strict=True))

    def more_inits(self, arm: str, init_seeds: list[int]) -> None:
        self.phase = "confirmation"

    def measure(self, arm: str, runs: list[MeasureRun], measure_code: str | None) -> list[float]:
        assert self.measured is not None
        return [self.measured(arm, run) for run in runs]

    def probe(self, arm: str, command: wire.Probe) -> list[float]:
        return [1.0 for _ in command.runs]

    def isolation(self) -> list[str]:
        return list(JUDGE_LAYERS)  # what the sandbox reports: the report counts

    def cancel(self) -> None:
        self._note("cancel")

    def close(self) -> None:
        self._note("close")


def scripted_request(**overrides: Any) -> JudgeRequest:
    """A request on the scripted track (its code is never run: the executor answers); no
    baseline cache unless ``options`` names one (its runs would outlive the test's script)."""
    overrides.setdefault("options", EngineOptions(baseline_cache=False))
    overrides.setdefault("idea_code", "def build_model(spec, **hp):\n    raise AssertionError\n")
    return JudgeRequest(track="scripted", **overrides)


@dataclass
class Scripted:
    """``judge``'s ``executor``: a ``ScriptedExecutor`` per job (a matched baseline's check is one);
    ``jobs`` holds them in order."""

    script: Script
    options: dict[str, Any] = field(default_factory=dict)
    jobs: list[Any] = field(default_factory=list)
    kind: type[ScriptedExecutor] = ScriptedExecutor  # a subclass that answers some commands otherwise

    def __call__(self, request: JudgeRequest, workdir: Path, deadline: float, cancel: Any) -> ScriptedExecutor:
        executor = self.kind(self.script, checking=request.checking_matched, **self.options)
        self.jobs.append(executor)
        return executor

    def asked(self, **where: Any) -> list[Asked]:
        """Every run the jobs asked for whose fields equal ``where``'s."""
        return [a for job in self.jobs for a in job.trained if all(getattr(a, k) == v for k, v in where.items())]


def judge_scripted(executor: Scripted, *, seed_secret: Any, n_seeds: int, **request: Any) -> dict[str, Any]:
    """``judge`` on the scripted track with ``executor`` (job key ``job``), the report as JSON,
    validated against the report model."""
    from bench.judge import judge
    from bench.report import Report

    report = judge(scripted_request(seed_secret=seed_secret, n_seeds=n_seeds, job_key="job", **request), None,
                   executor=executor, track=TRACK).model_dump(mode="json")
    Report.model_validate(report)
    return report
