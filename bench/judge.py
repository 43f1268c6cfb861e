"""``judge``: one job, top to bottom (issue 26); and ``check``, the same up to training.

``judge(request)`` reads the request against the track, judges a matched baseline against
the track's canonical one first (``check_matched_baseline``), then drives one ``Job``
(``bench.protocol``) through its executor: the seeds and their data, both arms' files loaded
and captured, the graphs and counts checked, the sweep with its edges, the screening, the
mechanism, the confirmation when the screening found a win, and the report
(``bench.assemble.build_report``). What to run and what it means are the protocol's pure rules
(``bench.plan``, ``bench.decide``, ``bench.stats``); the job holds one run's state; the
executor (``bench.execution``) is the only way to a model.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import custom_track as custom_mod
from bench import options as engine_options
from bench import plan as plan_mod
from bench import warm, wire
from bench.assemble import build_report
from bench.captured import build_version, pin_first_build
from bench.card import TrackSettings
from bench.contract import (
    check_baseline_allowed,
    check_hparams,
    check_measurable,
    check_source,
    declared_hparams,
)
from bench.decide import dearest_per_example
from bench.errors import BenchError, ErrorCode
from bench.execution import ARMS, Executor, SandboxExecutor
from bench.options import EngineOptions
from bench.protocol import (
    Job,
    JudgeRequest,
    Progress,
    ProgressCallback,
    capture_limit,
    config_grid,
    pins_baseline,
)
from bench.registry import load_track
from bench.report import Report
from bench.sandbox import Limits
from bench.seeding import SCREEN_POOL, SeedSecret, capture_order, screening_seeds, sweep_seeds
from bench.track import Track

__all__ = ["JudgeRequest", "Progress", "check", "judge"]

MIN_SEEDS, MAX_SEEDS = 2, 32
assert MAX_SEEDS <= SCREEN_POOL

ExecutorFactory = Callable[[JudgeRequest, Path, float, threading.Event], Executor]
"""Makes one job's executor from its request, its directory, its deadline and its cancel event."""


def judge(
    request: JudgeRequest,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    *,
    keep_warm: bool = False,
    executor: ExecutorFactory | None = None,
    track: Track | None = None,
) -> Report:
    """Run the whole protocol for ``request`` and return its report (``Report.model_dump(mode="json")``
    is what the service stores).

    ``keep_warm`` (a worker judging job after job): use the children ``bench.warm``
    started ahead of this job, if any, and start the next job's when this one ends.
    ``executor``: what builds and trains the models (``bench.execution``; default: the
    sandbox). ``track``: a ``Track`` object in place of the registry's ``request.track``
    (a test's scripted track).

    Raises ``bench.errors.BenchError`` when the idea fails (no verdict), with the
    error code, message and hint for the agent.
    """
    report = _run(request, on_progress, cancel, keep_warm=keep_warm, executor=executor, track=track)
    assert isinstance(report, Report)
    return report


def _run(
    request: JudgeRequest, on_progress: ProgressCallback | None, cancel: threading.Event | None, *,
    keep_warm: bool = False, executor: ExecutorFactory | None = None, track: Track | None = None,
) -> Report | dict[str, Any]:
    """``judge``'s body: the report, or what a check found (``request.check_only``)."""
    started = time.monotonic()
    custom = request.custom_track
    options = request.options or engine_options.current().engine
    if track is None:
        track = custom_mod.as_track(custom, options.tracks_dir) if custom is not None else load_track(request.track)
    n_seeds = _check_request(request, track)
    _check_space()
    checked_runs = 0
    if request.baseline_code is not None and request.canonical is None:
        if request.check_only:
            request = check_matched_counts(request, cancel, executor, track)
        else:
            request, checked_runs = check_matched_baseline(request, on_progress, cancel, started, executor, track)
    limits = Limits(memory_mb=request.memory_mb)
    slot = warm.take(limits) if keep_warm and executor is None else None
    if slot is None and executor is None:
        slot = warm.lend(limits)  # no warm children: the job still forks its own from the worker's server
    try:
        return _judge(request, options, track, custom, n_seeds, slot, executor or sandbox_executor(options, slot),
                      on_progress, cancel, started, checked_runs)
    except BenchError as exc:
        # A child that could not write its files reports it as its own failure
        # (training_error, crashed): when the disk is what ran out, say so instead.
        if exc.code is not ErrorCode.CANCELLED and _free_bytes() < MIN_FREE_BYTES:
            raise _no_space() from exc
        raise
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _no_space() from exc
        raise
    finally:
        if slot is not None:
            warm.give_back(slot)
        if keep_warm and executor is None:
            warm.prepare(limits)


def _judge(
    request: JudgeRequest, options: EngineOptions, track: Track, custom: custom_mod.CustomTrack | None, n_seeds: int,
    slot: warm.Slot | None, make_executor: ExecutorFactory, on_progress: ProgressCallback | None,
    cancel: threading.Event | None, started: float, progress_offset: int = 0,
) -> Report | dict[str, Any]:
    tmpdir = slot.tmp if slot is not None else warm.JobDir()
    with tmpdir as tmp:
        # a check draws under a throwaway secret: it touches nothing of the epoch's seeds
        secret = (SeedSecret(key=secrets.token_bytes(32), epoch=0) if request.check_only
                  else request.seed_secret or engine_options.current().deployment_secret())
        cancel = cancel or threading.Event()
        deadline = time.monotonic() + request.timeout_s
        job = Job(request, options, track, Path(tmp), on_progress, cancel, secret, deadline,
                   make_executor(request, Path(tmp), deadline, cancel), progress_offset)
        try:
            job.sweep_seed_list = sweep_seeds(job.settings.defaults.sweep_seeds)
            job.screening_seed_list = [] if request.check_only else screening_seeds(n_seeds, secret, job.job_key)
            all_seeds = job.sweep_seed_list + job.screening_seed_list
            if custom is not None:
                job.tracker.emit("generating the custom track's data in the sandbox")
                job.executor.make_data(custom, [job.seeds(s).split for s in all_seeds])
            job.tracker.emit("starting the sandboxed children")
            job.prefetch(all_seeds)
            job.executor.start()
            loaded: dict[str, wire.LoadedReply] = job.both(lambda arm: job.executor.load(arm, job.load_command(arm)))
            declared = request.mechanism if request.mechanism is not None else loaded["idea"].mechanism
            if declared is not None:
                job.mechanism = check_measurable(declared, loaded["idea"].has_measure)
            job.executor.start_trainers(measured=job.mechanism is not None and "probe" not in job.mechanism
                                        and not request.check_only)
            max_configs = job.settings.max_configs
            idea_hp = request.hparams if request.hparams is not None else loaded["idea"].hparams
            job.grids = {
                "idea": config_grid(check_hparams(idea_hp, max_configs=max_configs)),
                # a track's own baseline has one config: what its child says is not read (a
                # custom track's file could write a grid there, red team)
                "baseline": ([{}] if request.baseline_code is None else
                             config_grid(check_hparams(loaded["baseline"].hparams, max_configs=max_configs))),
            }
            job.check_tuned_for()
            # the runs every job makes, known from here on (bench.plan); edges, matched and
            # confirmation runs are added when the protocol decides to make them
            planned = plan_mod.plan(len(job.settings.defaults.lr_grid), len(job.sweep_seed_list), n_seeds,
                                    len(job.grids["idea"]), len(job.grids["baseline"]),
                                    baseline_swept=job.swept("baseline"), idea_factor=job.budget_factor("idea"),
                                    repeats=job.settings.defaults.repeats)
            job.tracker.add_total(planned.planned)
            job.tracker.expect("edges", planned.edges_max)
            job.tracker.expect("matched", planned.matched_max)
            job.tracker.expect("repeats", planned.repeats_max)
            if request.confirm:
                job.tracker.expect("confirmation", planned.confirmation_max)
            # The sweep's and the screening's seeds, built in a secret order (a file that counts
            # its builds learns nothing of which seed it builds); the confirmation's inits are
            # captured when a win needs them, for the chosen configs, under the models' key.
            job.capture_seeds = capture_order(all_seeds, secret, job.job_key)
            init_seeds = [job.seeds(s).init for s in job.capture_seeds]
            job.tracker.emit("capturing both arms' models as graphs")
            builds = {arm: job.builds(arm, job.capture_seeds) for arm in ARMS}
            job.note_capture(job.both(lambda arm: job.executor.capture(
                arm, wire.Capture(configs=job.grids[arm], init_seeds=builds[arm]),
                capture_limit(request, len(job.grids[arm]) * len(builds[arm])))))
            job.capture_info = job.both(lambda arm: job.executor.read_capture(
                arm, job.grids[arm], len(builds[arm]), job.workdir / "data" / f"capture_{arm}", job.max_elements(arm)))
            if job.pins_baseline:
                job.capture_info["baseline"] = pin_first_build(job.capture_info["baseline"], len(init_seeds))
            job.check_same_build()
            job.check_configs_differ()
            job.check_track_baseline()
            job.identify_models()
            trainers: dict[str, wire.DeviceReply] = job.both(lambda arm: job.executor.load_trainer(arm, wire.Load(
                role=arm, spec=track.spec, param_cap=track.card["param_cap"], device=request.device,
                captured=wire.CapturedRef(dir=str(job.capture_info[arm].directory), configs=job.grids[arm],
                                          init_seeds=init_seeds),
            )))
            first = job.data(job.sweep_seed_list[0])
            want_vectorized = job.options.execution != "sequential" and not job.matched_path_fixed
            checked = job.both(lambda arm: job.executor.check(arm, wire.Check(
                data_dir=str(first.data_dir), configs=job.grids[arm], batch_size=job.settings.defaults.batch_size,
                probe=want_vectorized,
                loss=track.card["metric"]["loss"], mechanism_probe=(job.mechanism or {}).get("probe"),
            )))
            job.check_counts(checked)
            job.choose_path(checked, want_vectorized)
            if request.check_only:
                job.check_untrained_rows()
                return check_answer(job, n_seeds, time.monotonic() - started)
            device = trainers["idea"].device
            job.enable_cache(device)
            job.run_sweep_with_edges()
            finals = job.final(job.screening_seed_list, "screening")
            # measured first: the confirmation closes the capture children the measure runs in
            measured = job.measure(finals) if job.mechanism is not None else None
            confirmation = job.confirm(n_seeds) if request.confirm and job.screened_better(finals) else None
            job.tracker.expect("confirmation", 0)
        finally:
            job.close()
            if slot is not None:  # a failure before both sessions adopted their child
                slot.release(job.executor.adopted)
        return build_report(job.outcome(finals, confirmation, measured, device, time.monotonic() - started,
                                        references=job.reference_check([finals, confirmation])))


def check(request: JudgeRequest, cancel: threading.Event | None = None) -> dict[str, Any]:
    """Everything ``judge`` checks before it trains, and no training (POST /v1/ideas/check): the
    contract, both arms' capture in the sandbox, the graphs against the allowlist, the configs,
    parameter, buffer and compute parity, output shapes, the mechanism's probe. Returns what it
    found (``check_answer``); raises ``BenchError`` with the code the job would end with.

    It builds the models of the sweep's seeds under a throwaway secret: nothing of the epoch's
    seeds or data is touched, so a check tells a file nothing a job would use. A matched
    baseline is not judged against the canonical one here (a job does that first, with training),
    but checked against it (``check_matched_counts``), and the idea is held to the limits its job
    holds it to."""
    if request.custom_track is not None:
        raise BenchError(ErrorCode.UNKNOWN_TRACK, "A check runs on built-in tracks only.",
                         "Submit the idea to the custom track as a job; its errors come back the same way.")
    found = _run(dataclasses.replace(request, check_only=True), None, cancel)
    assert isinstance(found, dict)
    return found


def check_answer(job: Job, n_seeds: int, seconds: float) -> dict[str, Any]:
    """What a check found: the configs, each arm's counts against the limits the job would
    enforce (``Job.check_counts``), the execution path, the declared mechanism and the runs a
    job would make."""
    assert job.limits is not None
    limits, idea = job.limits, job.counted["idea"]
    batch = limits.batch_size
    sizes = (len(job.settings.defaults.lr_grid), len(job.sweep_seed_list), n_seeds,
             len(job.grids["idea"]), len(job.grids["baseline"]))
    # a matched baseline's job: its check against the track's baseline comes first
    repeats = job.settings.defaults.repeats
    planned = (plan_mod.plan(*sizes, repeats=repeats) if job.request.baseline_code is None
               else plan_mod.matched_plan(*sizes, repeats=repeats))
    return {
        "passed": True,
        "track": f"{job.track.name}@{job.track.version}",
        "configs": job.grids["idea"],
        "baseline_configs": job.grids["baseline"],
        "parameters": {"idea": list(idea.n_params), "baseline": limits.parity.base_params,
                       "limit": math.floor(limits.parity.ratio * limits.parity.base_params)},
        "buffer_words": {"idea": list(idea.n_buffers), "limit": limits.parity.buffer_cap},
        "parameter_tensors": {"idea": list(idea.n_tensors), "limit": limits.parity.tensor_cap},
        "flops_per_example": {"idea": list(idea.flops), "baseline": limits.base_flops,
                              "limit": limits.compute_ratio * limits.base_flops,
                              "idea_dearest": [dearest_per_example(*forward, batch_size=batch)
                                               for forward in idea.dearest(batch)],
                              "dearest_limit": limits.compute_ratio * max(limits.base_flops, limits.base_dearest)},
        # what the limits are made of: the baseline's counts, the track's canonical baseline's in a
        # matched baseline's check (its job's reference, bench.decide.Reference)
        "reference": job.request.canonical if job.request.canonical is not None else {
            "n_params": limits.parity.base_params, "n_buffers": max(job.counted["baseline"].n_buffers),
            "n_tensors": max(job.counted["baseline"].n_tensors), "flops": max(job.counted["baseline"].flops),
            "dearest": limits.base_dearest},
        "graph_sha256": list(job.capture_info["idea"].graph_sha256),
        "execution": {"path": job.path, "why": job.path_reason or None},
        "mechanism": job.mechanism,
        "runs": {"planned": planned.planned, "at_most": planned.at_most},
        "seconds": round(seconds, 2),
        "warnings": list(job.warnings),
    }


def _matched_failed(exc: BenchError, how: str) -> BenchError:
    """What a job (or a check) ends with when its matched baseline's own check against the track's
    canonical baseline (``how``: judged or checked) failed: the service's own failures as they are,
    the file's errors named as the matched baseline's."""
    if exc.code in (ErrorCode.CANCELLED, ErrorCode.TIMEOUT, ErrorCode.NO_SPACE, ErrorCode.SANDBOX_UNAVAILABLE,
                    ErrorCode.INTERNAL):
        return exc
    return BenchError(exc.code, f"The matched baseline, {how} against the track's canonical baseline, "
                      f"failed: {exc.message}", exc.hint)


def check_matched_counts(request: JudgeRequest, cancel: threading.Event | None, executor: ExecutorFactory | None,
                         track: Track | None) -> JudgeRequest:
    """A check with a matched baseline: the matched baseline checked first, as the idea against the
    track's canonical baseline (as its job's check is, without training), and ``request`` with the
    canonical baseline's counts (``reference``), which the idea's check then holds it to as its job
    would (a red team's check passed an idea the job refused, its limits a padded matched
    baseline's)."""
    assert request.baseline_code is not None
    matched = dataclasses.replace(request, idea_code=request.baseline_code, baseline_code=None, hparams=None,
                                  mechanism=None, check_only=True)
    try:
        first = _run(matched, None, cancel, executor=executor, track=track)
    except BenchError as exc:
        raise _matched_failed(exc, "checked") from None
    assert isinstance(first, dict)
    return dataclasses.replace(request, canonical=first["reference"])


def check_matched_baseline(request: JudgeRequest, on_progress: ProgressCallback | None,
                           cancel: threading.Event | None, started: float, executor: ExecutorFactory | None = None,
                           track: Track | None = None) -> tuple[JudgeRequest, int]:
    """A matched baseline is judged first, as an idea against the track's canonical baseline, on
    the same seeds, screening only (PROTOCOL.md 1): a job whose matched baseline is worse than the
    canonical one by more than the track's smallest effect ends ``baseline_inferior`` (a baseline
    that ignores an input, or stores its weights halved, made a copy of the canonical baseline
    "help"; issue 25.5). Returns ``request`` with what the check found (``canonical``), which
    the job's parity and compute parity measure against and its report shows, and the runs the
    check made (the job's progress counts on from them)."""
    runs, before = [0], [0]  # runs done; those of a check run again without the probe (below)

    def forward(progress: Progress) -> None:
        runs[0] = before[0] + progress.done
        if on_progress is not None:
            on_progress(dataclasses.replace(progress, done=runs[0], total=before[0] + progress.total,
                                            at_most=None if progress.at_most is None else before[0] + progress.at_most,
                                            stage=f"baseline_check:{progress.stage}"[:32],
                                            message=f"checking the matched baseline: {progress.message}"[:500]))

    matched = request.baseline_code
    assert matched is not None
    if request.job_key is None:  # the check and the job draw the same confirmation seeds (check_same_build)
        request = dataclasses.replace(request, job_key=secrets.token_hex(8))
    card = (track if track is not None else load_track(request.track)).card  # (a built-in track's)
    tuned_for = declared_configs(request, TrackSettings.of(card).max_configs)
    probe = declared_probe(request)
    check = dataclasses.replace(request, idea_code=matched, baseline_code=None, hparams=None,
                                mechanism=probe, confirm=False, checking_matched=True, tuning_configs=tuned_for)
    try:
        try:
            report = judge(check, forward, cancel, executor=executor, track=track).bench_report
        except BenchError as exc:
            if probe is None or exc.code != ErrorCode.MECHANISM_ERROR:
                raise
            # the idea's probe does not apply to the track's baseline (or to the matched one):
            # checked without it, and the job's signature is not confirmable (bench.assemble)
            probe, before[0] = None, runs[0]
            left = max(1.0, request.timeout_s - (time.monotonic() - started))
            report = judge(dataclasses.replace(check, mechanism=None, timeout_s=left), forward, cancel,
                           executor=executor, track=track).bench_report
    except BenchError as exc:
        raise _matched_failed(exc, "judged") from None
    comparison, parity = report.comparison, report.parameter_parity
    assert (report.screening is not None and report.seeds is not None and parity is not None
            and report.idea.best_cfg is not None and report.capture is not None and report.smallest_effect is not None
            and comparison.baseline_mean is not None and comparison.idea_mean is not None)  # all the engine's
    sign = 1.0 if report.metric_direction == "lower is better" else -1.0
    worse_by = comparison.delta_mean * sign
    at_its_lr = report.screening.matched_lr
    if at_its_lr is not None:
        # The track's baseline also trained at the matched one's learning rate: the worse of the
        # two, as a win must beat both (red team: a second config gave the track's baseline a
        # denser grid in the check, whose lr chosen on validation did badly on test, and a
        # sandbagged matched baseline passed as non-inferior).
        worse_by = max(worse_by, float(at_its_lr["comparison"]["delta_mean"]) * sign)
    m = report.smallest_effect
    chosen = report.idea.best_cfg
    found = {
        "canonical_mean": comparison.baseline_mean, "matched_mean": comparison.idea_mean,
        "worse_by": worse_by, "smallest_effect": m, "non_inferior": bool(worse_by <= m),
        "p_value": comparison.p_value, "seeds": report.seeds.final,
        "n_params": int(parity["baseline"]), "n_buffers": int(parity["buffers"]["baseline"]),
        "n_tensors": int(parity["tensors"]["baseline"]),
        "flops": float(parity["flops_per_example"]["baseline"]),
        # its dearest forward per example: an honest idea's batch-sized forwards are held to it, as in a
        # job against the track's baseline (0 where the check's report has none: the stricter limit)
        "dearest": float((parity.get("dearest_per_example") or {}).get("baseline", 0.0)),
        "matched_n_params": int(parity["idea"]),
        # the config (lr, hparams) the check chose and measured: the job's final one (Job.pinned)
        "chosen": {"lr": float(chosen["lr"]),
                   "hparams": {k: v for k, v in chosen.items() if k not in ("lr", "epochs", "batch_size", "weight_decay")}},
        # what the matched baseline built in its check: its job must build exactly the same
        "built": {k: report.capture["idea"][k] for k in ("graph_sha256", "tensors_sha256", "configs")},
        # the idea configs its sweep's budget equals (the job refuses an idea with more: check_tuned_for)
        "tuned_for": tuned_for,
        # the sweep that chose it, shown as the job's baseline sweep (the job sweeps it no more)
        "sweep": [row.model_dump(mode="json", exclude_none=True) for row in report.idea.sweep or []],
        # the track's baseline's sweep beside it: where the job trains the matched baseline at the
        # idea's lr, it is trusted there only as good as this on validation (decide.unchecked_at)
        "canonical_sweep": [row.model_dump(mode="json", exclude_none=True) for row in report.baseline.sweep or []],
    }
    signature = report.mechanism_signature
    if probe is not None and signature is not None and signature.baseline_values is not None:
        # the idea's probe on the track's baseline's models of these seeds, which the job's
        # signature must also tell the idea from (bench.assemble: a matched baseline's own
        # values are the submitter's file's)
        found["probe"] = {"probe": probe["probe"], "seeds": report.seeds.final,
                          "values": [float(v) for v in signature.baseline_values]}
    if not found["non_inferior"]:
        raise BenchError(
            ErrorCode.BASELINE_INFERIOR,
            f"The matched baseline is worse than the track's canonical baseline by {worse_by:.4g} on the same "
            f"seeds (canonical {found['canonical_mean']:.4g}, matched {found['matched_mean']:.4g}); the track "
            f"allows {m:.4g} (its smallest effect): a win over it would not be a win.",
        )
    remaining = request.timeout_s - (time.monotonic() - started)
    return dataclasses.replace(request, canonical=found, timeout_s=max(1.0, remaining)), runs[0]


def declared_probe(request: JudgeRequest) -> dict[str, Any] | None:
    """The idea's mechanism as its request declares it before anything runs, when it is one of the
    bench's probes: its ``mechanism``, else its file's literal ``MECHANISM``; None otherwise (a
    computed one, one measured by the idea's own ``measure``, or one that does not validate: the
    job reports those itself). A matched baseline's check measures it on the track's baseline."""
    declared = request.mechanism
    if declared is None:
        declared = check_source(request.idea_code, role="idea").literals.get("MECHANISM")
    if not isinstance(declared, dict) or "probe" not in declared:
        return None
    try:
        return check_measurable(declared, False)
    except BenchError:
        return None


def declared_configs(request: JudgeRequest, max_configs: int) -> int:
    """The idea's configs as its request declares them before anything runs: its ``hparams``, else
    its file's literal ``HPARAMS`` (``bench.contract.declared_hparams``: with a matched baseline, a
    computed one is refused at once), else one. A matched baseline's check sweeps on a grid dense
    enough for that many (equal tuning budgets, PROTOCOL.md 1); the job refuses an idea whose
    capture child reports more (``Job.check_tuned_for``: a grid no statement of the file names)."""
    hparams = declared_hparams(check_source(request.idea_code, role="idea"), request.hparams,
                               matched=request.baseline_code is not None)
    return 1 if hparams is None else len(config_grid(check_hparams(hparams, max_configs=max_configs)))


def _check_request(request: JudgeRequest, track: Track) -> int:
    check_source(request.idea_code, role="idea")
    if request.baseline_code is not None:
        check_baseline_allowed(request.custom_track is not None)
        check_source(request.baseline_code, role="baseline")
    n_seeds = request.n_seeds or TrackSettings.of(track.card).defaults.n_seeds
    if not MIN_SEEDS <= n_seeds <= MAX_SEEDS:
        raise BenchError(
            ErrorCode.INVALID_HPARAMS,
            f"n_seeds must be between {MIN_SEEDS} and {MAX_SEEDS}; got {n_seeds}.",
            "Leave n_seeds unset to use the track's default (8).",
        )
    return n_seeds


def sandbox_executor(options: EngineOptions, slot: warm.Slot | None = None) -> ExecutorFactory:
    """The production executor: sandboxed children (``slot``'s warm ones, when given)."""
    def make(request: JudgeRequest, workdir: Path, deadline: float, cancel: threading.Event) -> Executor:
        # a built-in track's own baseline is the bench's code: its capture child is trusted
        canonical = request.baseline_code is None and request.custom_track is None
        return SandboxExecutor(workdir, request.memory_mb, deadline, cancel, request.timeout_s, slot=slot,
                               canonical_baseline=canonical, tracks_dir=options.tracks_dir,
                               baseline_build=stored_build(request))
    return make


def stored_build(request: JudgeRequest) -> bytes | None:
    """The pinned baseline's build as its validation captured and checked it, kept with the
    track (session 22): the job builds nothing of the baseline, so the author's build_baseline
    never runs in a job (its module code still runs where the idea's ``measure()`` of the
    baseline's models does, in a child of its own). None for a local track file, a track
    validated before builds were kept, or one kept by another capture code
    (``bench.captured.build_version``: a fix to the capture reaches no stale build); its
    author's code then builds it in the job, at validation's seed."""
    custom = request.custom_track
    if custom is None or not pins_baseline(request) or custom.baseline_build_version != build_version():
        return None
    return custom.baseline_build


MIN_FREE_BYTES = 64 * 2**20  # below this on the temporary directory's disk, no job starts


def _free_bytes() -> int:
    try:
        return shutil.disk_usage(tempfile.gettempdir()).free
    except OSError:
        return 0


def _no_space() -> BenchError:
    return BenchError(ErrorCode.NO_SPACE, f"The worker's temporary directory ({tempfile.gettempdir()}) has "
                      f"{_free_bytes() // 2**20} MiB free; a job needs at least {MIN_FREE_BYTES // 2**20} MiB.")


def _check_space() -> None:
    """``no_space`` before any child starts when the disk for the job's files is (nearly) full."""
    if _free_bytes() < MIN_FREE_BYTES:
        raise _no_space()
