"""One job of the stage-2 protocol: ``Job``, its state and its steps, which ``bench.judge``
drives from top to bottom (the sweep on the union grid with its edges, fresh paired seeds,
the confirmation, the mechanism, the outcome the report is built from).

The parent (this module) owns the data labels, the scores and the run records; the rules of
what to run and what the numbers mean are ``bench.plan``'s and ``bench.decide``'s. Each arm's
code runs in its own child process, reached only through the job's executor
(``bench.execution``), so the idea can neither grade itself nor touch the baseline's
training; both children train at the same time, one per core.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import math
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import baseline_cache, wire
from bench import custom_track as custom_mod
from bench import data as data_mod
from bench import plan as plan_mod
from bench.assemble import Outcome, Stage
from bench.captured import (
    MAX_TENSOR_ELEMENTS,
    ArmCapture,
    capture_warnings,
    copy_first_build,
)
from bench.card import TrackSettings, card_timing
from bench.decide import (
    MIN_BUFFER_ROOM,
    Counted,
    CountLimits,
    Reference,
    SweepRow,
    SweepRun,
    at_edge,
    best,
    count_limits,
    counts_error,
    densify,
    diverged_score,
    duplicate_config_error,
    edge_steps,
    efficacy,
    efficacy_possible,
    fill_diverged,
    matched_config,
    repeats_futile,
    report_cfg,
    same_build_error,
    seed_means,
    stage_better,
    stage_comparisons,
    stage_p,
    sweep_table,
    too_many_diverged,
    tuned_for_error,
)
from bench.errors import BenchError, ErrorCode
from bench.execution import ARMS, Executor, MeasureRun, Trained
from bench.metrics import ROW_CHECKS, check_predictions, check_rows_alone, score
from bench.npy import read_npy
from bench.options import EngineOptions
from bench.seeding import (
    CONFIRM_SEED_BASE,
    SWEEP_SEED_BASE,
    RunSeeds,
    SeedSecret,
    build_seed,
    capture_order,
    confirmation_seeds,
    model_key,
    run_seeds,
    task_seed,
)
from bench.stats import (
    ALPHA,
    CONFIRMATION_LOOKS,
    CONFIRMATION_SHARES,
    Comparison,
    confirmation_continues,
)
from bench.track import Track

MAX_GROUP = 16  # runs trained as one batched model at most (the child stacks their data)
CAPTURE_TIMEOUT_S = 120.0  # building one arm's models (every config and init seed), by default


def capture_limit(request: JudgeRequest, builds: int) -> tuple[float, str]:
    """The capture command's own deadline (``ArmSession.request``'s ``within``)."""
    return request.capture_timeout_s, (
        f"Building the models ({builds} builds: every config and init seed) took longer than "
        f"{request.capture_timeout_s:.0f} s; build_model must build a model and return.")


@dataclass
class JudgeRequest:
    """One submission: the idea file, its track, and optional overrides."""

    track: str
    idea_code: str
    baseline_code: str | None = None
    n_seeds: int | None = None
    hparams: dict[str, list[Any]] | None = None
    mechanism: dict[str, Any] | None = None
    name: str | None = None
    hypothesis: str | None = None
    timeout_s: float = 1800.0
    memory_mb: int = 6144
    device: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # A registered (or local) custom track; ``track`` then names its name@version.
    custom_track: custom_mod.CustomTrack | None = None
    # The seed epoch's secret (bench.seeding); None: the host's (``bench.options.configure``).
    seed_secret: SeedSecret | None = None
    # What this job's confirmation seeds are drawn under (the service's job id): the same key
    # and secret give the same numbers; None: a fresh random key (a one-off ``ideabench run``).
    job_key: str | None = None
    # The job's caches and execution; None: the host's (``bench.options.configure``).
    options: EngineOptions | None = None
    # Set by ``judge`` for a matched baseline's job: what its check against the track's canonical
    # baseline found (``matched_check``), whose counts parity and compute parity use.
    canonical: dict[str, Any] | None = None
    # False for that check itself: a screening only, no confirmation.
    confirm: bool = True
    # True for that check itself: the track's baseline builds with the seeds the matched one
    # (the check's idea) builds with, so that an honest copy of it is the same model there.
    checking_matched: bool = False
    # For that check too: the idea's configs (``declared_configs``) the matched baseline's tuning
    # budget must equal; the check sweeps both of its arms on a grid that much denser.
    tuning_configs: int = 1
    # How long building every config and init seed of one arm may take (a build_model that
    # sleeps held the only worker for the whole job timeout).
    capture_timeout_s: float = CAPTURE_TIMEOUT_S
    # A check before the queue (``check``): capture and the checks before training, no run.
    check_only: bool = False
    # (seconds before training, seconds per run) this deployment's jobs of the track took (a
    # worker's ``app.jobs.estimate.deployment_timing``): the time left before the first run ends;
    # None: the card's measured ``timing`` (the reference machine's)
    timing: tuple[float, float] | None = None


@dataclass(frozen=True)
class Progress:
    """Where a running protocol stands: stage is sweep / final / confirmation / mechanism."""

    stage: str
    done: int
    total: int
    eta_s: float | None
    message: str = ""
    # The run that just finished, when this progress is one: arm, stage, cfg, seed_index,
    # seconds, cached. Never its metric: no test number leaves the engine before the report.
    run: dict[str, Any] | None = None
    # The runs the job may still add (grid edges, the matched baseline, a confirmation of one
    # or two looks, while undecided) counted in: the most it can make, and the seconds left then
    at_most: int | None = None
    eta_max_s: float | None = None


ProgressCallback = Callable[[Progress], None]


@dataclass
class RunRecord:
    """One training run as the parent sees it."""

    arm: str
    cfg: dict[str, Any]
    seed: int
    split: str
    stage: str = "sweep"  # sweep (val), screening or confirmation (test)
    value: float = math.nan
    diverged: bool = False
    seconds: float = 0.0
    n_params: int = 0
    run_id: str = ""
    repeat: int = 0  # the seed's r-th run of a test stage (the card's defaults.repeats; 0: the seed's own)


class _Tracker:
    """Counts finished runs and estimates time left; thread-safe.

    The estimate is the runs left times the seconds per run so far, timed from the start of
    training (``start_training``): the children's start and the capture come once per job, and
    counting them per run told a sequence job at 13 of 32 runs that 63 s were left when 110 s
    were (issue 27.2). Before a run has ended, ``prior`` (the track card's measured ``timing``:
    seconds before training, seconds per run) gives it: what is left of the part before
    training, plus the runs left at the card's rate; without one it is None until then."""

    def __init__(self, callback: ProgressCallback | None, total: int, clock: Callable[[], float] = time.monotonic,
                 offset: int = 0, prior: tuple[float, float] | None = None) -> None:
        self.callback = callback
        self.prior = prior
        self.started = clock()
        self.total = total
        self.done = 0
        # runs made before this job's (a matched baseline's check): counted in what is shown,
        # so a job's count never goes back, and left out of the time per run
        self.offset = offset
        self.stage = "sweep"
        self.clock = clock
        self.training_started: float | None = None
        self.lock = threading.Lock()
        self.emit_lock = threading.Lock()
        # runs the job may still add, by part, until the protocol decides them (``expect``)
        self.undecided: dict[str, int] = {}

    def add_total(self, extra: int, part: str | None = None) -> None:
        """``extra`` runs more; taken from ``part``'s undecided runs when it names one."""
        with self.lock:
            self.total += extra
            if part is not None and part in self.undecided:
                self.undecided[part] = max(0, self.undecided[part] - extra)

    def expect(self, part: str, at_most: int) -> None:
        """``part`` (edges, matched, confirmation) may still add ``at_most`` runs; 0: decided."""
        with self.lock:
            if at_most > 0:
                self.undecided[part] = at_most
            else:
                self.undecided.pop(part, None)

    @property
    def at_most(self) -> int:
        return self.total + sum(self.undecided.values())

    def start_training(self) -> None:
        """The first run starts now: the time per run is measured from here."""
        if self.training_started is None:
            self.training_started = self.clock()

    def eta(self, runs: int | None = None) -> float | None:
        """Seconds left for the runs counted so far (``runs``: that many in all); before the
        first run has ended, from ``prior`` once the run plan is known, else None."""
        left = max(0, (self.total if runs is None else runs) - self.done)
        if self.done and self.training_started is not None:
            return (self.clock() - self.training_started) / self.done * left
        if self.prior is None or not self.total:
            return None
        fixed_s, run_s = self.prior
        return max(0.0, fixed_s - (self.clock() - self.started)) + left * run_s

    def emit(self, message: str = "", run: dict[str, Any] | None = None) -> None:
        if self.callback is None:
            return
        # Read and sent under one lock: both arms' threads emit, and a count read before the
        # other's run ended must not reach the callback after it (runs done never go back).
        with self.emit_lock:
            at_most = self.at_most
            known = bool(self.total or self.undecided)  # (None before the run plan is known)
            self.callback(Progress(self.stage, self.done + self.offset, self.total + self.offset, self.eta(), message,
                                   run, at_most + self.offset if known else None,
                                   self.eta(at_most) if known else None))

    def run_finished(self, run: dict[str, Any]) -> None:
        with self.lock:
            self.done += 1
        self.emit(run=run)



def config_grid(hparams: dict[str, list[Any]]) -> list[dict[str, Any]]:
    names = sorted(hparams)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(hparams[n] for n in names))]


class Job:
    """The state of one protocol run; ``judge`` drives it."""

    def __init__(self, request: JudgeRequest, options: EngineOptions, track: Track, workdir: Path,
                 on_progress: ProgressCallback | None, cancel: threading.Event, secret: SeedSecret,
                 deadline: float, executor: Executor, progress_offset: int = 0) -> None:
        self.request = request
        self.executor = executor
        self.options = options
        self.secret = secret
        self.job_key = request.job_key or secrets.token_hex(8)
        self.model_key = ""  # the captured models' key (seeding.model_key): the confirmation's seeds
        # a custom track's baseline build was validation's, bit for bit (check_track_baseline)
        self.build_checked = False
        # the track in the seeds' labels: a custom track's name@version, a built-in track's name
        self.seed_track = request.custom_track.id if request.custom_track is not None else track.name
        self.task_seed = task_seed(track.name, secret)
        self.track = track
        self.card = track.card
        self.settings = TrackSettings.of(track.card)
        self.workdir = workdir
        self.data_token = secrets.token_bytes(16)  # names the seeds' data directories (data_name)
        self.cancel = cancel
        self.deadline = deadline
        self.metric = self.card["metric"]["name"]
        self.ceiling = self.settings.divergence_ceiling
        self.seed_data: dict[int, data_mod.SeedData] = {}
        self._prefetcher: ThreadPoolExecutor | None = None
        self._prefetched: dict[int, Future[data_mod.SeedData]] = {}
        self.tracker = _Tracker(on_progress, 0, offset=progress_offset, prior=request.timing or card_timing(self.card))
        self.capture_info: dict[str, ArmCapture] = {}
        self.kept: dict[str, list[np.ndarray]] = {}  # run id -> trained tensors of a final model
        self.counted: dict[str, Counted] = {}  # the trainers' counts per config (check_counts)
        self.limits: CountLimits | None = None  # what the idea's configs were held to (check_counts)
        self.lr_grids: dict[str, list[float]] = {}  # each arm's swept learning rates
        self.runs: list[RunRecord] = []
        self.repeats_made: dict[str, list[int]] = {}  # runs per seed of each test stage's looks (``final``)
        # per stage and look (its pairs): the first-run values a look with repeats looked at first
        self.looked: dict[str, dict[int, dict[str, list[float]]]] = {}
        self.warnings: list[str] = []
        self._counter = itertools.count()
        self._groups = itertools.count()
        # Execution: "vectorized" only when both arms' models batch (decided at check).
        self.path = "sequential"
        self.path_reason = ""
        self.paths_used: dict[str, set[str]] = {arm: set() for arm in ARMS}
        self.cached: baseline_cache.CachedTrain | None = None  # the track's baseline through its cache
        self.cache_context: dict[str, Any] = {}
        self._lock = threading.Lock()

    # -- plumbing -------------------------------------------------------------
    def _export(self, seed: int) -> data_mod.SeedData:
        return data_mod.export(self.track, self.seeds(seed).split, self.task_seed, self.workdir / "data" / self.data_name(seed))

    def data_name(self, seed: int) -> str:
        """The name of protocol seed ``seed``'s data directory: keyed by a token of this job, so a
        child that can ``stat`` paths under the job's directory (Landlock does not mediate it, in
        a fork server's sandbox) learns no seed of the job's draw from the names (red team 2)."""
        return hmac.new(self.data_token, str(seed).encode(), hashlib.sha256).hexdigest()[:24]

    def seeds(self, seed: int, repeat: int = 0) -> RunSeeds:
        """The split / order / init seeds of protocol seed ``seed`` in this job's epoch (a
        confirmation seed's under the captured models' key); of its ``repeat``-th run, the
        same split with that run's own order and init."""
        return run_seeds(seed, self.secret, self.model_key or None, track=self.seed_track, repeat=repeat)

    def build_seed(self, arm: str, seed: int) -> int:
        """The seed ``arm``'s file builds protocol seed ``seed``'s model with (``seeding.build_seed``
        has the rule and why). The track's baseline in a matched baseline's check
        (``checking_matched``) builds with the matched one's seeds: non-inferiority is a point
        estimate, and an honest copy must be the same model there (the baseline cache then keys
        its runs by the build seed too)."""
        request = self.request
        bench = arm == "baseline" and request.baseline_code is None and request.custom_track is None
        return build_seed(self.secret, self.seeds(seed).init, bench=bench and not request.checking_matched,
                          shared=seed in self.sweep_seed_list or seed >= CONFIRM_SEED_BASE,
                          track=self.seed_track, job_key=self.job_key, seed=seed)

    @property
    def pins_baseline(self) -> bool:
        """``pins_baseline`` of this job's request."""
        return pins_baseline(self.request)

    def builds(self, arm: str, seeds: list[int]) -> list[int]:
        """The seeds ``arm``'s file builds protocol seeds ``seeds`` with (the pinned baseline:
        one, sweep seed 0's, whatever the seeds)."""
        if arm == "baseline" and self.pins_baseline:
            return [self.build_seed(arm, SWEEP_SEED_BASE)]
        return [self.build_seed(arm, s) for s in seeds]

    def capture_index(self, arm: str, seed: int) -> int:
        """Where protocol seed ``seed``'s build lies in ``arm``'s capture child."""
        return 0 if arm == "baseline" and self.pins_baseline else self.capture_seeds.index(seed)

    def prefetch(self, seeds: list[int]) -> None:
        """Make the seeds' data in a background thread (it overlaps child start and training)."""
        if self._prefetcher is None:
            self._prefetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ideabench-data")
        for seed in seeds:
            if seed not in self._prefetched and seed not in self.seed_data:
                self._prefetched[seed] = self._prefetcher.submit(self._export, seed)

    def data(self, seed: int) -> data_mod.SeedData:
        if seed not in self.seed_data:
            future = self._prefetched.get(seed)
            made = future.result() if future is not None else self._export(seed)
            first = next(iter(self.seed_data.values()), made)
            if made.rows != first.rows:
                # the checks and the compute count ran on the first seed's row counts
                # (bench.cost.forward_sizes): a forward of another count was never counted
                raise BenchError(ErrorCode.INVALID_TRACK,
                                 f"The track's splits have {made.rows} rows (train, validation, test) for one seed of "
                                 f"this job and {first.rows} for another.",
                                 "Keep the sizes of the three splits fixed; draw only their contents from the seed.")
            self.seed_data[seed] = made
        return self.seed_data[seed]

    def load_command(self, arm: str) -> wire.CaptureLoad:
        """What loads ``arm``'s file in a capture child."""
        custom = self.request.custom_track
        return wire.CaptureLoad(
            role=arm, track=self.track.name, spec=self.track.spec, param_cap=self.track.card["param_cap"],
            code=self.request.idea_code if arm == "idea" else self.request.baseline_code,
            track_source=custom.source if custom is not None and arm == "baseline" else None,
        )

    def close(self) -> None:
        """Stop making data nobody will use; end every child."""
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=True, cancel_futures=True)
        self.executor.close()

    def both(self, fn: Callable[[str], Any]) -> dict[str, Any]:
        """Run ``fn(arm)`` for both arms at once (one child each); first error wins."""
        with ThreadPoolExecutor(max_workers=len(ARMS)) as pool:
            futures = {arm: pool.submit(fn, arm) for arm in ARMS}
            errors = []
            results = {}
            for arm, future in futures.items():
                try:
                    results[arm] = future.result()
                except BaseException as exc:  # noqa: BLE001 - re-raised below
                    errors.append(exc)
                    self.executor.cancel()
            if errors:
                # Prefer the idea's own error over a cancellation it caused in the other arm.
                errors.sort(key=lambda e: isinstance(e, BenchError) and e.code == ErrorCode.CANCELLED)
                raise errors[0]
            return results

    def check_configs_differ(self) -> None:
        """Every config of an arm's grid builds another model (``bench.decide.duplicate_config_error``)."""
        for arm in ARMS:
            info = self.capture_info[arm]
            error = duplicate_config_error(arm, self.grids[arm], info.graph_sha256, info.seed_sha256)
            if error is not None:
                raise error

    def note_capture(self, replies: dict[str, wire.CaptureReply]) -> None:
        """The report's warnings for what a file did besides building its model
        (``bench.captured.capture_warnings``; a stored build's are its validation's)."""
        for arm in ARMS:
            who = "idea" if arm == "idea" else (
                "matched baseline" if self.request.baseline_code is not None else "track's baseline")
            self.warnings += capture_warnings(who, replies[arm])

    def check_track_baseline(self) -> None:
        """A custom track's baseline must build in a job the graph its validation captured
        (issue 25.8) and, in the seed epoch validation ran in, the very tensors it built there
        at sweep seed 0 (the one seed both build with its init seed): a track file that builds
        one model when validated and another when judging (by time, randomness, the number of
        seeds its capture is asked for, anything it reads) ends ``inconsistent_build``. A red
        team's baseline built a sound model for validation and a dead one in jobs (constants
        the redraw keeps, the same in every seed: the graph and every decoy matched).

        A stored build (``stored_build``) is validation's by construction (the compare catches
        only a damaged row). ``build_checked`` still needs validation's seed epoch: the job's
        data is checked against validation's checksums there alone (a red team of the stored
        build: a ``make_splits`` that changes its data after a rotation would count)."""
        custom = self.request.custom_track
        if custom is None:
            return
        info = self.capture_info["baseline"]
        same = custom.baseline_graph_sha256 in (None, info.graph_sha256[0])
        if (same and custom.baseline_seed_sha256 is not None and custom.validated_epoch == self.secret.epoch
                and self.pins_baseline
                and SWEEP_SEED_BASE in self.capture_seeds):
            same = info.seed_sha256[0][self.capture_index("baseline", SWEEP_SEED_BASE)] == custom.baseline_seed_sha256
            self.build_checked = same
        if same:
            return
        raise BenchError(
            ErrorCode.INCONSISTENT_BUILD,
            f"The custom track {custom.id}'s baseline built another model in this job than in its validation.",
            "The track's build_baseline must build the same model from the same seed every time (no state "
            "kept between builds, nothing read from its surroundings); register a new version.",
        )

    def check_same_build(self) -> None:
        """A matched baseline builds in its job what it built in its check
        (``bench.decide.same_build_error``)."""
        built = self.capture_info["baseline"]
        error = same_build_error((self.request.canonical or {}).get("built"), built.graph_sha256,
                                 built.tensors_sha256, built.configs)
        if error is not None:
            raise error

    def max_elements(self, arm: str) -> int:
        """What one init seed of ``arm``'s model may hold (``TrackSettings.max_build_elements``).
        A built-in track's own baseline is the bench's code and is not bounded here; a custom
        track's is its author's (a red team padded one with 10M float64 zeros)."""
        if arm == "baseline" and self.request.baseline_code is None and self.request.custom_track is None:
            return MAX_TENSOR_ELEMENTS
        return self.settings.max_build_elements

    def check_counts(self, replies: dict[str, wire.CheckReply]) -> None:
        """Parity and compute parity (PROTOCOL.md 1) on the trusted trainers' counts
        (``bench.decide.counts_error``): every idea config holds at most ``param_parity_ratio``
        times the baseline's parameters (the track's canonical baseline's, for a matched one),
        at most ``max_tensors`` parameter tensors, at most ``buffer_cap`` words of information in
        buffers, constants and literals (default: the baseline's own plus ``MIN_BUFFER_ROOM``),
        and costs at most ``compute_ratio`` times the baseline's forward per example."""
        self.counted = {arm: counted(replies[arm]) for arm in ARMS}
        canonical = self.request.canonical
        reference = None if canonical is None else Reference(
            n_params=int(canonical["n_params"]), n_buffers=int(canonical["n_buffers"]), flops=float(canonical["flops"]),
            n_tensors=int(canonical["n_tensors"]), dearest=float(canonical.get("dearest", 0.0)))
        if reference is not None and not all(math.isfinite(v) and v >= 0 for v in (reference.flops, reference.dearest)):
            # a limit of inf would lift compute parity (red team, session 38: no path makes one)
            raise BenchError(ErrorCode.INTERNAL, "the track's baseline's counts from its check are not finite")
        self.limits = count_limits(
            self.counted["baseline"], reference=reference, parity_ratio=self.settings.param_parity_ratio,
            buffer_cap=self.settings.buffer_cap, compute_ratio=self.settings.compute_ratio,
            batch_size=self.settings.defaults.batch_size, buffer_room=MIN_BUFFER_ROOM)
        error = counts_error(self.limits, self.grids["idea"], self.counted["idea"], self.counted["baseline"])
        if error is not None:
            raise error

    def enable_cache(self, device: str) -> None:
        """Reuse the canonical baseline's runs (bench.baseline_cache) when allowed: a built-in
        track's baseline only (a custom track's is its author's code, which builds the screening
        with this job's seeds alone: ``seeding.build_seed``)."""
        if self.request.baseline_code is not None or self.request.custom_track is not None \
                or not self.options.baseline_cache:
            return
        self.cached = baseline_cache.CachedTrain(
            baseline_cache.BaselineCache(self.options.baseline_dir), self.executor.train,
            shapes=lambda run: self.capture_info["baseline"].shapes[
                self.capture_info["baseline"].config_index(run["cfg"].get("hparams", {}))],
            warn=self.warnings.append)
        self.cache_context = {
            "kind": "baseline_run", "format": baseline_cache.FORMAT,
            "track": f"{self.card['name']}@{self.card['version']}", "card": self.card,
            "track_source": self.track.extras.get("source_sha256")
            or baseline_cache.source_hash(self.track.build_baseline),
            "device": device, "versions": baseline_cache.versions(),
            "code": baseline_cache.code_version(), "path": self.path, "threads": 1,
            "graph": list(self.capture_info["baseline"].graph_sha256),
        }

    @property
    def matched_path_fixed(self) -> bool:
        """A matched baseline (in its job, or in its check against the track's baseline) trains on
        the sequential path whatever the other arm is (red team, path_keyed_matched): the job's
        path also depends on the idea (an unbatchable idea puts both arms on the sequential
        path), and the two trainers differ where a file can sense it (an attention kernel, Adam's
        rounding). A matched baseline that compared two attention kernels in train mode was the
        track's baseline bit for bit in its vectorized check and sabotaged itself on the job's
        sequential path: an exact copy of the track's baseline got helps (8/8, confirmed)."""
        return self.request.baseline_code is not None or self.request.checking_matched

    @property
    def lower_is_better(self) -> bool:
        return self.settings.lower_is_better

    def diverged_value(self, stage: str) -> float:
        """What a diverged run of ``stage`` (sweep, screening, confirmation) scores (``diverged_score``)."""
        values = [r.value for r in self.runs if r.stage == stage]
        return diverged_score(values, self.ceiling, self.lower_is_better)

    def _describe(self, record: RunRecord) -> dict[str, Any]:
        seeds = self.seeds(record.seed, record.repeat)
        described = {
            "cfg": record.cfg, "seed": record.seed, "seeds": [seeds.split, seeds.order, seeds.init],
            "eval": record.split, "loss": self.card["metric"]["loss"],
            "data": self.data(record.seed).checksum,
        }
        build = self.build_seed(record.arm, record.seed)
        if build != seeds.init:  # (a matched baseline's check: the model is built from another seed)
            described["build"] = build
        return described

    def checked_rows(self, record: RunRecord) -> list[int]:
        """The eval rows of ``record`` its trainer also predicts one at a time
        (``bench.metrics.check_rows_alone``): drawn from the run's secret order seed."""
        target = self.data(record.seed)
        n = len(target.y_val if record.split == "val" else target.y_test)
        rng = np.random.default_rng([self.seeds(record.seed, record.repeat).order, 0x726F7773])
        return sorted(int(i) for i in rng.choice(n, size=min(ROW_CHECKS, n), replace=False))

    def _score(self, record: RunRecord, pred: np.ndarray, diverged: bool, seconds: float, n_params: int,
               cached: bool = False) -> None:
        target = self.seed_data[record.seed]
        y = target.y_val if record.split == "val" else target.y_test
        check_predictions(pred, (len(y), *self.card["spec"]["output_shape"]), record.arm)
        record.value = score(self.metric, pred, y)
        record.diverged = bool(diverged) or not math.isfinite(record.value)
        if record.diverged:
            record.value = math.nan
        record.seconds = float(seconds)
        record.n_params = int(n_params)
        self.tracker.run_finished({
            "arm": record.arm, "stage": record.stage, "cfg": report_cfg(record.cfg),
            "seed_index": self.stage_seeds(record.stage).index(record.seed),
            "seconds": round(record.seconds, 3), "cached": cached,
        })

    def train(self, records: list[RunRecord]) -> None:
        """Train ``records`` (both arms in parallel) and score them in place.

        Runs of one arm with the same split, hparams and trainer settings form a batch
        group (trained as one batched model on the vectorized path). A built-in track's
        baseline trains through the baseline cache (``baseline_cache.CachedTrain``): a group
        whose runs are all cached is scored from the cache (final models kept for the
        mechanism are rebuilt in the child from their cached state_dicts).
        """
        by_id: dict[str, RunRecord] = {}
        batches: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
        groups: dict[str, list[RunRecord]] = {}
        seen: dict[str, int] = {}
        for record in records:
            record.run_id = f"{record.arm}{next(self._counter)}"
            by_id[record.run_id] = record
            key = baseline_cache.canonical_json([
                record.arm, record.split, record.cfg.get("hparams", {}),
                [record.cfg[k] for k in ("epochs", "batch_size", "weight_decay")],
            ])
            seen[key] = seen.get(key, 0) + 1
            # At most MAX_GROUP runs per group: the child stacks the group's data.
            groups.setdefault(f"{key}#{(seen[key] - 1) // MAX_GROUP}", []).append(record)
        cache_keys: dict[str, str] = {}
        cacheable = self.cached is not None and records[0].stage != "confirmation"  # fresh seeds: never again
        for members in groups.values():
            group_id = next(self._groups)
            if cacheable and members[0].arm == "baseline":
                cache_keys.update(self.cache_keys(members))
            for record in members:
                seeds = self.seeds(record.seed, record.repeat)
                batches[record.arm].append({
                    "run_id": record.run_id, "cfg": record.cfg, "eval": record.split,
                    "data_dir": str(self.data(record.seed).data_dir), "init_seed": seeds.init,
                    "order_seed": seeds.order, "loss": self.card["metric"]["loss"],
                    "schedule": self.settings.defaults.schedule,
                    "keep": self.kept_for_mechanism(record), "group": group_id,
                    "rows": self.checked_rows(record),
                    # a repeat run starts from its seed's captured build, with its own initial values
                    **({"build_init": self.seeds(record.seed).init} if record.repeat else {}),
                })

        def on_run_for(arm: str) -> Callable[[Trained], None]:
            def on_run(trained: Trained) -> None:
                record = by_id[trained.run_id]
                if not trained.cached:  # (a cached run's path is its key's: what the job chose)
                    with self._lock:
                        self.paths_used[arm].add(trained.path)
                pred = trained.predictions
                self._score(record, pred, trained.diverged, trained.seconds, trained.n_params, cached=trained.cached)
                if not record.diverged and not trained.cached:  # (a cached run's rows were checked when it trained)
                    check_rows_alone(pred, self.checked_rows(record), trained.read_rows(), arm)
                if self.kept_for_mechanism(record):  # the trained tensors, for the mechanism
                    state = trained.read_state(self.capture_info[arm].shapes[self._config_index(record)])
                    with self._lock:
                        self.kept[record.run_id] = state

            return on_run

        def run_arm(arm: str) -> None:
            if not batches[arm]:
                return
            if self.cached is not None and arm == "baseline":
                self.cached.train(arm, batches[arm], self.path, on_run_for(arm), cache_keys)
            else:
                self.executor.train(arm, batches[arm], self.path, on_run_for(arm))

        self.both(run_arm)
        self.runs.extend(records)

    def kept_for_mechanism(self, record: RunRecord) -> bool:
        """Whether ``record``'s trained tensors are kept for the mechanism: a screening run, its
        seed's own (one model per seed is measured, whatever the repeats)."""
        return self.mechanism is not None and record.stage == "screening" and record.repeat == 0

    def cache_keys(self, members: list[RunRecord]) -> dict[str, str]:
        """The baseline cache's key of each run of one batch group: the track, the run (config,
        seeds, data), the path and, on the vectorized path, the whole group (batched runs are
        trained together)."""
        described = [self._describe(r) for r in members]
        signature = sorted(baseline_cache.canonical_json(d) for d in described) if self.path == "vectorized" else None
        return {r.run_id: baseline_cache.digest({**self.cache_context, "run": d, "group": signature})
                for r, d in zip(members, described, strict=True)}

    def execution(self) -> dict[str, Any]:
        """How the runs ran, for the report's ``bench_report.execution``."""
        used = set().union(*self.paths_used.values())
        if not used:
            path = self.path
        elif len(used) == 1:
            path = next(iter(used))
        else:
            path = "mixed"
        hits, misses = (0, 0) if self.cached is None else (self.cached.hits, self.cached.misses)
        info: dict[str, Any] = {
            "path": path, "arms_in_parallel": True, "baseline_cache": hits > 0,
            "baseline_cache_hits": hits, "baseline_cache_misses": misses,
        }
        if self.path_reason:
            info["sequential_reason"] = self.path_reason
        return info

    def choose_path(self, replies: dict[str, wire.CheckReply], wanted: bool) -> None:
        """Vectorized when both arms' models batch, else both run one at a time."""
        if not wanted:
            self.path, self.path_reason = "sequential", (
                "a matched baseline trains on one path in its check and its job" if self.matched_path_fixed
                else "IDEABENCH_EXECUTION=sequential")
            return
        reasons = [f"{arm}: {replies[arm].why or ''}" for arm in ARMS if not replies[arm].vectorizable]
        self.path = "sequential" if reasons else "vectorized"
        self.path_reason = "; ".join(reasons)

    # -- the protocol ---------------------------------------------------------
    mechanism: dict[str, Any] | None = None
    grids: dict[str, list[dict[str, Any]]]
    sweep_seed_list: list[int]

    def check_untrained_rows(self) -> None:
        """A check's row test (issue 27.5): each arm's first config at its initial weights (no
        training step) predicts the first sweep split's eval rows, in the batch and the job's
        secret rows one at a time, as every run of a job does; a model whose rows read each
        other ends the check ``row_dependent`` before a job trains it."""
        d = self.settings.defaults
        self.train([RunRecord(arm, {"lr": d.lr_grid[0], "epochs": 0, "batch_size": d.batch_size,
                                    "weight_decay": d.weight_decay, "hparams": self.grids[arm][0]},
                              self.sweep_seed_list[0], "val") for arm in ARMS])

    def configs(self, arm: str, lrs: list[float]) -> list[dict[str, Any]]:
        """The arm's configs for learning rates ``lrs`` (x its hyperparameter grid)."""
        d = self.settings.defaults
        return [
            {"lr": lr, "epochs": d.epochs, "batch_size": d.batch_size, "weight_decay": d.weight_decay, "hparams": hp}
            for lr in lrs
            for hp in self.grids[arm]
        ]

    def budget_factor(self, arm: str) -> int:
        """How many times as many learning rates ``arm`` sweeps as the idea: the baseline gets a
        denser lr grid over the same range when the idea has more hyperparameter configs, so its
        tuning budget is at least the idea's by construction (PROTOCOL.md section 1)."""
        n_lrs = len(self.settings.defaults.lr_grid)
        if arm == "idea":  # a matched baseline in its check: as many configs as the idea it is for
            return plan_mod.budget_factor(self.request.tuning_configs, len(self.grids["idea"]), n_lrs)
        return plan_mod.budget_factor(len(self.grids["idea"]), len(self.grids[arm]), n_lrs, self.budget_factor("idea"))

    def swept(self, arm: str) -> bool:
        """Whether ``arm`` trains a sweep in this job: every arm but a matched baseline whose final
        config its check chose (``pinned``), whose sweep would decide nothing. Its grid is the one
        its check swept (``lr_grids``, which the edge rule, ``lr_matched`` and the report read:
        a grid no run of it trained would judge its lr's edge against lrs it never ran, red
        team), and the report shows that sweep (``outcome``). Without that sweep at hand it sweeps
        as before."""
        found = self.request.canonical or {}
        return not (arm == "baseline" and found.get("chosen") is not None and bool(found.get("sweep")))

    def checked_grid(self) -> list[float]:
        """The learning rates a pinned matched baseline's check swept (edges included)."""
        return sorted({float(row["cfg"]["lr"]) for row in (self.request.canonical or {}).get("sweep") or []})

    def check_tuned_for(self) -> None:
        """A pinned matched baseline's tuning budget is its check's (``bench.decide.tuned_for_error``)."""
        if self.swept("baseline"):
            return
        error = tuned_for_error(len(self.grids["idea"]), int((self.request.canonical or {}).get("tuned_for", 1)))
        if error is not None:
            raise error

    def sweep(self, lrs: list[float], part: str) -> None:
        """Train every config of both arms on the sweep seeds, scored on validation.

        ``lrs`` are the idea's learning rates for ``part`` of the sweep (``grid``, or one
        edge step ``below``/``above``); each arm sweeps ``densify`` of them (``swept``: not a
        pinned matched baseline).
        """
        records = [
            RunRecord(arm, cfg, seed, "val")
            for seed in self.sweep_seed_list
            for arm in ARMS if self.swept(arm)
            for cfg in self.configs(arm, densify(lrs, self.budget_factor(arm), part))
        ]
        self.lr_grids = {arm: sorted({*self.lr_grids.get(arm, []), *densify(lrs, self.budget_factor(arm), part)})
                         if self.swept(arm) else self.checked_grid() for arm in ARMS}
        self.train(records)

    def sweep_table(self, arm: str) -> list[SweepRow]:
        """The arm's sweep, one row per config (``bench.decide.sweep_table``)."""
        runs = [SweepRun(r.cfg, r.value, r.diverged) for r in self.runs if r.arm == arm and r.split == "val"]
        return sweep_table(runs, self.diverged_value("sweep"))

    def best(self, arm: str) -> SweepRow:
        """The arm's sweep row with the best mean validation metric (first on ties); a matched
        baseline's is the config its check chose (``pinned``)."""
        pinned = self.pinned() if arm == "baseline" else None
        return pinned if pinned is not None else best(self.sweep_table(arm), self.lower_is_better)

    def pinned(self) -> SweepRow | None:
        """A matched baseline's final config is the one (lr and hparams) its check chose and
        measured against the track's baseline: its shortfall (``worse_by``), which ``reaches``
        subtracts, holds at that config alone. Re-tuned in the job on a grid the idea's configs
        densify (``budget_factor``), it ran at an lr its check never ran (0.03 is on no
        densified grid of 0.01..0.1), where a file that reads its own lr off Adam's first step
        sandbagged freely: a copy of the track's baseline got helps (red team, lr_keyed_matched)."""
        chosen = (self.request.canonical or {}).get("chosen")
        if chosen is None:
            return None
        d = self.settings.defaults
        config = {"lr": float(chosen["lr"]), "epochs": d.epochs, "batch_size": d.batch_size,
                  "weight_decay": d.weight_decay, "hparams": dict(chosen["hparams"])}
        shown = report_cfg(config)
        for row in self.sweep_table("baseline"):
            if row.cfg == shown:
                return row
        return SweepRow(config=config, cfg=shown)

    def run_sweep_with_edges(self) -> None:
        """Sweep the lr grid; extend it once (both arms) where an arm's best lr is at an edge."""
        self.tracker.start_training()
        lrs = sorted(self.settings.defaults.lr_grid)
        self.sweep(lrs, "grid")
        parts = edge_steps(lrs, {arm: self.best(arm).cfg["lr"] for arm in ARMS}, self.lr_grids)
        if self.request.checking_matched:
            # A matched baseline's check extends both edges, whatever its arms' best: its job
            # does not sweep it again (``swept``), so this is the budget its idea's extension is
            # matched with (red team: an idea of 12 configs at its grid's edge swept 48 pairs
            # against its pinned baseline's 37; extended only where its check was, an honest
            # idea left at its edge got harms).
            parts = [("below", [lrs[0] / 2]), ("above", [lrs[-1] * 2])]
        self.tracker.expect("edges", 0)
        self.tracker.add_total(sum(
            len(self.configs(a, densify(v, self.budget_factor(a), p))) for a in ARMS if self.swept(a) for p, v in parts
        ) * len(self.sweep_seed_list))
        for part, values in parts:
            self.sweep(values, part)
        for arm in ARMS:
            grid = self.lr_grids[arm]
            lr = self.best(arm).cfg["lr"]
            if at_edge(lr, grid):
                self.warnings.append(
                    f"{arm}: best lr {lr:g} is still at the edge of its swept grid "
                    f"[{grid[0]:g}, {grid[-1]:g}]; its optimum may lie outside."
                )

    def matched_cfg(self) -> dict[str, Any] | None:
        """The baseline's best config at the idea's best lr, when the two differ
        (``bench.decide.matched_config``)."""
        return matched_config(self.best("baseline").config, self.best("idea").config)

    def runs_per_seed(self, repeats: int = 1) -> int:
        """Runs of one final seed: both arms, and the baseline at the idea's lr when it differs,
        each ``repeats`` times."""
        return (len(ARMS) + (self.matched_cfg() is not None)) * repeats

    def final(self, seeds: list[int], stage: str,
              prior: dict[str, list[RunRecord]] | None = None) -> dict[str, list[RunRecord]]:
        """Train each arm's best config (no re-tuning) on fresh paired ``seeds``, scored on test;
        and the baseline at the idea's learning rate too when it differs (``matched``).

        ``stage`` screening: the protocol's final seeds; confirmation: seeds of this job alone.

        On a card with ``repeats`` K > 1, each seed's first runs come first; unless they decide
        the look (futile, ``bench.decide.repeats_futile``: the idea no better than a baseline it
        must beat; or efficacy, below), each seed then runs K - 1 times more and ``stage_values`` averages a seed's runs
        (``self.repeats_made`` records which). The look also stops, its test run on the first runs,
        when they already win on every pair (``bench.decide.efficacy``): the means' test of a look
        that goes on then counts that stop (``self.looked``, ``stage_comparisons(first=)``), so the
        look's level is unchanged. Both are judged on what the look's test runs on: with ``prior``
        (the confirmation's first look, when this is its second) the pooled pairs. A futile stop
        has p above a half and takes only wins away. A matched baseline's check always runs all
        K (it estimates)."""
        self.tracker.stage = "final" if stage == "screening" else stage
        repeats = self.settings.defaults.repeats
        cfgs = {arm: dict(self.best(arm).config) for arm in ARMS}
        matched = self.matched_cfg()
        if stage == "screening":
            self.tracker.expect("matched", 0)
        if matched is not None:
            cfgs["matched"] = matched
            if stage == "screening":  # (the confirmation counts its own runs)
                self.tracker.add_total(len(seeds))
        records = {key: [RunRecord("baseline" if key == "matched" else key, cfg, seed, "test", stage)
                         for seed in seeds] for key, cfg in cfgs.items()}
        self.train([r for seed_runs in zip(*records.values(), strict=True) for r in seed_runs])
        made = 1
        if repeats > 1:
            self.check_diverged(records, stage)  # (before any repeat: a quarter of the first runs ends it)
        if repeats > 1 and not self.first_runs_decide(stage, records, prior):
            more = {key: [RunRecord(first.arm, first.cfg, first.seed, "test", stage, repeat=r)
                          for first in firsts for r in range(1, repeats)] for key, firsts in records.items()}
            self.tracker.add_total(sum(len(runs) for runs in more.values()),
                                   "repeats" if stage == "screening" else "confirmation")
            self.train([r for seed_runs in zip(*more.values(), strict=True) for r in seed_runs])
            records = {key: sorted(records[key] + more[key], key=lambda r: (seeds.index(r.seed), r.repeat))
                       for key in records}
            made = repeats
        if stage == "screening":
            self.tracker.expect("repeats", 0)
        self.repeats_made.setdefault(stage, []).append(made)
        self.check_diverged(records, stage)
        return records

    def first_runs_decide(self, stage: str, records: dict[str, list[RunRecord]],
                          prior: dict[str, list[RunRecord]] | None) -> bool:
        """Whether a look's first runs (``records``; pooled with ``prior``, the confirmation's first
        look, when this is its second) decide it: futile, or a win at the look's own one-sided
        level (the screening's alpha / 2, a confirmation look's share). A look that goes on
        keeps what it looked at (``self.looked``) where it could have stopped for efficacy: its
        means' test counts that stop. A matched baseline's check never stops (it estimates)."""
        if self.request.checking_matched:
            return False
        pooled = records if prior is None else {key: prior[key] + records[key] for key in records}
        looked = self.stage_values(pooled)
        first_tests = stage_comparisons(looked, self.lower_is_better)
        may_stop = efficacy_possible(len(looked["idea"]), ALPHA / 2 if stage == "screening" else
                                     CONFIRMATION_SHARES[0 if prior is None else 1] * ALPHA)
        if repeats_futile(first_tests, self.lower_is_better) or (may_stop and efficacy(first_tests)):
            return True
        if may_stop:
            self.looked.setdefault(stage, {})[len(looked["idea"])] = looked
        return False

    @staticmethod
    def check_diverged(records: dict[str, list[RunRecord]], stage: str) -> None:
        """More than a quarter of any key's runs of this look diverged: the comparison means nothing."""
        for key, runs in records.items():
            count = sum(r.diverged for r in runs)
            if too_many_diverged(count, len(runs)):
                who = "baseline's (at the idea's learning rate)" if key == "matched" else f"{key}'s"
                raise BenchError(
                    ErrorCode.DIVERGED,
                    f"{count} of the {who} {len(runs)} {stage} runs diverged (NaN/inf loss or "
                    f"predictions); above a quarter the comparison means nothing.",
                )

    def stage_seeds(self, stage: str) -> list[int]:
        """The protocol seeds of ``stage`` (sweep, screening, confirmation), in order."""
        if stage == "sweep":
            return self.sweep_seed_list
        if stage == "screening":
            return self.screening_seed_list
        return [s for s in self.capture_seeds if s >= CONFIRM_SEED_BASE]

    def identify_models(self) -> None:
        """``model_key``: both arms' graphs and their tensors at the sweep seeds (the same for
        every job of the epoch; the screening draw and the capture order are left out), the
        track, its epoch and the grids. Resubmitting an identical model draws the same
        confirmation, so it re-rolls nothing (issue 25.6)."""
        positions = [self.capture_seeds.index(s) for s in self.sweep_seed_list]
        self.model_key = model_key({
            "track": self.track.name, "epoch": self.secret.epoch, "custom": self.request.custom_track is not None,
            "arms": {arm: {"grid": self.grids[arm], "graphs": list(self.capture_info[arm].graph_sha256),
                           "sweep_tensors": [[per_seed[i] for i in positions]
                                             for per_seed in self.capture_info[arm].seed_sha256]}
                     for arm in ARMS},
        })

    def stage_values(self, runs: dict[str, list[RunRecord]]) -> dict[str, list[float]]:
        """Test values of one stage per seed (both arms, and ``matched`` when run), diverged runs
        filled (``diverged_score``), a seed's repeat runs made one value (``bench.decide.seed_means``,
        the card's ``seed_value``)."""
        fill = self.diverged_value(runs["idea"][0].stage)
        statistic = self.settings.defaults.seed_value
        return {key: seed_means([r.seed for r in records], fill_diverged([r.value for r in records], fill), statistic)
                for key, records in runs.items()}

    def reference_check(self, stages: list[dict[str, list[RunRecord]] | None]) -> dict[str, Any] | None:
        """On a custom track: on how many of its test seeds the baseline beat the bench's
        reference fits (a constant and a ridge regression, fitted on that seed's train split,
        scored on its test split; ``custom_track.beats_references``). Validation measured this
        once, on one build; the baseline is its author's code, built again in every job, and a
        red team's baseline built a sound model for validation and a dead one (a constant, by
        its biases) in jobs, or on odd build seeds only: an exact copy of the validated baseline
        got helps, confirmed. None on a built-in track, or when the metric is not lower-is-better."""
        if self.request.custom_track is None or not self.lower_is_better:
            return None
        metric, n_classes = self.card["metric"]["name"], int(self.card["spec"]["output_shape"][0])
        checked, short = 0, 0
        for runs in stages:
            for record in (runs or {}).get("baseline", []):
                data = self.data(record.seed)
                x_train, y_train, x_test = (read_npy((data.data_dir / f"{name}.npy").read_bytes())
                                            for name in ("x_train", "y_train", "x_test"))
                fits = custom_mod.reference_fit(metric, x_train, y_train, x_test, data.y_test, n_classes)
                checked += 1
                short += not custom_mod.beats_references(record.value, fits)
        return {"seeds": checked, "not_beaten": short, "margin": custom_mod.REFERENCE_MARGIN}

    def screened_better(self, runs: dict[str, list[RunRecord]]) -> bool:
        """The idea is significantly better than the baseline, and than the baseline at the
        idea's learning rate when that was run (``matched_cfg``)."""
        return stage_better(self.tests(runs))

    def p_better(self, runs: dict[str, list[RunRecord]]) -> float:
        """A stage's one-sided p that the idea is better (``bench.decide.stage_p``)."""
        return stage_p(self.tests(runs))

    def first_values(self, runs: dict[str, list[RunRecord]]) -> dict[str, list[float]] | None:
        """The first-run values the look of ``runs`` looked at before its repeats (``self.looked``),
        else None (one run a seed, a stop, or a check)."""
        return self.looked.get(runs["idea"][0].stage, {}).get(len({r.seed for r in runs["idea"]}))

    def tests(self, runs: dict[str, list[RunRecord]]) -> list[Comparison]:
        """A look's tests (``bench.decide.stage_comparisons``), counting its efficacy stop where it
        had one to pass; a look that made its repeats leaves ``harms`` to its first runs (a matched
        baseline's check makes every repeat and estimates: its tests stay as they are)."""
        return self.stage(runs).tests(self.lower_is_better)

    def confirm(self, n_seeds: int) -> dict[str, list[RunRecord]]:
        """The confirmation stage (PROTOCOL.md 2.6): the screened configs (no re-tuning) on
        seeds drawn for these models alone (``seeding.run_seeds`` under ``model_key``), ``n_seeds``
        at a time: a second look at ``n_seeds`` more when the first is neither significant
        nor futile (``stats.confirmation_continues``)."""
        seeds = confirmation_seeds(CONFIRMATION_LOOKS * n_seeds)
        self.capture_confirmation(seeds[:n_seeds])
        # now that matched is known: at most every seed's runs, repeats included
        self.tracker.expect("confirmation", self.runs_per_seed(self.settings.defaults.repeats) * len(seeds))
        runs = self._confirmation_look(seeds[:n_seeds], "screening found a win: confirming it on fresh seeds")
        self.first_look = self.stage(runs)  # as decided now: the report shows this look
        if not confirmation_continues(self.p_better(runs), ALPHA):
            self.tracker.expect("confirmation", 0)
        else:
            self.capture_confirmation(seeds[n_seeds:])
            more = self._confirmation_look(seeds[n_seeds:], f"the confirmation's first look was close: "
                                           f"{n_seeds} more fresh seeds", prior=runs)
            runs = {key: runs[key] + more[key] for key in runs}
        return runs

    def capture_confirmation(self, seeds: list[int]) -> None:
        """Each arm's chosen config built with the inits of the confirmation ``seeds`` too, checked
        and handed to its trainer (issue 25: a file must not build otherwise for the confirmation).

        The builds happen in a fresh capture child per arm, after the first ones are closed (no
        live process knows this job's seeds), mixed in a secret order with decoys: this job's
        screening seeds, which the first capture built and the screening trained. Every decoy's
        tensors must come out bit for bit as they did then; a file cannot tell a decoy from a
        confirmation seed (both are fresh to the job), so one that builds otherwise for the
        confirmation builds otherwise for the decoys too, and is refused. The child exports
        nothing (``wire.Rebuild``): the graph and its constants are the first capture's.

        A built-in track's own baseline is the bench's code, run in a child no submitted code
        ran in: it builds again in that child (one child start fewer; docs/performance.md,
        session 14)."""
        self.executor.forget_builds()  # every capture child submitted code ran in
        if self.request.custom_track is None:  # (a custom track's data is made in its sandbox, after)
            self.prefetch(seeds)  # the look's data, while the children start
        inits = [self.seeds(s).init for s in seeds]
        first = len(self.capture_seeds)
        decoys = list(self.screening_seed_list)
        order = capture_order(decoys + seeds, self.secret, f"{self.job_key}/confirmation/{seeds[0]}")

        def rebuild(arm: str) -> None:
            info = self.capture_info[arm]
            hparams = dict(self.best(arm).config).get("hparams", {})
            config = info.config_index(hparams)
            if arm == "baseline" and self.pins_baseline:  # its one build, nothing run again
                copy_first_build(info, config, [first + i for i in range(len(seeds))])
                self.executor.more_inits(arm, inits)
                return
            self.executor.rebuild(
                arm, hparams=hparams, build_seeds=[self.build_seed(arm, s) for s in order],
                within=capture_limit(self.request, len(order)), captured=info, config=config,
                decoys=[self.capture_seeds.index(s) if s in decoys else None for s in order],
                numbers=[first + seeds.index(s) if s in seeds else None for s in order],
                max_elements=self.max_elements(arm))
            self.executor.more_inits(arm, inits)

        self.both(rebuild)
        self.capture_seeds = self.capture_seeds + seeds

    def _confirmation_look(self, seeds: list[int], message: str,
                           prior: dict[str, list[RunRecord]] | None = None) -> dict[str, list[RunRecord]]:
        self.tracker.add_total(self.runs_per_seed() * len(seeds), "confirmation")
        self.tracker.stage = "confirmation"
        self.tracker.emit(message)
        custom = self.request.custom_track
        if custom is not None:
            self.executor.make_data(custom, [self.seeds(s).split for s in seeds])
        return self.final(seeds, "confirmation", prior)

    def _probe_arm(self, arm: str, finals: list[RunRecord]) -> list[float]:
        """The declared service probe on the arm's final models, in its trusted trainer."""
        assert self.mechanism is not None
        directory = self.workdir / "data" / f"trained_{arm}"
        directory.mkdir(parents=True, exist_ok=True)
        runs = []
        for record in finals:
            for j, array in enumerate(self.kept[record.run_id]):
                np.save(directory / f"{record.run_id}_{j}.npy", array, allow_pickle=False)
            runs.append({"hparams": record.cfg.get("hparams", {}), "init_seed": self.seeds(record.seed).init,
                         "prefix": str(directory / f"{record.run_id}_"),
                         "probe": str(self.seed_data[record.seed].probe_path),
                         "data_dir": str(self.seed_data[record.seed].data_dir)})
        return self.executor.probe(arm, wire.Probe(probe=self.mechanism["probe"], runs=runs))

    def _config_index(self, record: RunRecord) -> int:
        return self.capture_info[record.arm].config_index(record.cfg.get("hparams", {}))

    def measure(self, finals: dict[str, list[RunRecord]]) -> dict[str, list[float]]:
        """The idea's ``measure`` on every final model of both arms, in the capture children.

        Each arm's capture child builds its final models again and loads the weights the
        trusted trainer trained; on the baseline's, the idea's ``measure`` code runs (a fresh
        child for a built-in track's own baseline, whose capture child trains). The
        values are the idea's own numbers: the report marks them ``self_measured``.
        """
        self.tracker.stage = "mechanism"
        self.tracker.emit("measuring the mechanism signature")
        assert self.mechanism is not None
        finals = {key: [r for r in records if self.kept_for_mechanism(r)] for key, records in finals.items()}
        if "probe" in self.mechanism:
            return self.both(lambda arm: self._probe_arm(arm, finals[arm]))

        def measure_arm(arm: str) -> list[float]:
            runs = [MeasureRun(run_id=record.run_id, config=self._config_index(record),
                               seed_index=self.capture_index(arm, record.seed), state=self.kept[record.run_id],
                               probe=read_npy(self.seed_data[record.seed].probe_path.read_bytes()))
                    for record in finals[arm]]
            # the idea's measure() runs on the baseline's models too
            values = self.executor.measure(arm, runs, self.request.idea_code if arm == "baseline" else None)
            if len(values) != len(runs) or not all(math.isfinite(v) for v in values):
                raise BenchError(ErrorCode.MECHANISM_ERROR, f"measure() gave no usable values for the {arm}.")
            return [float(v) for v in values]

        return self.both(measure_arm)

    # -- the outcome --------------------------------------------------------------
    def stage(self, runs: dict[str, list[RunRecord]]) -> Stage:
        """One test stage's runs as the report needs them."""
        return Stage(
            values=self.stage_values(runs), seeds=list(dict.fromkeys(r.seed for r in runs["idea"])),
            diverged={key: sum(r.diverged for r in records) for key, records in runs.items()},
            seconds={key: float(sum(r.seconds for r in records)) for key, records in runs.items()},
            matched_lr=runs["matched"][0].cfg["lr"] if "matched" in runs else None, first=self.first_values(runs),
            repeated=self.last_look_repeated(runs),
        )

    def last_look_repeated(self, runs: dict[str, list[RunRecord]]) -> bool:
        """Whether the look that ends ``runs`` (a confirmation's second look pools the first's pairs
        before its own) made its repeats: it did so only when its first runs favoured the idea
        (``first_runs_decide``), so its tests leave ``harms`` to those first runs. A matched
        baseline's check makes every repeat and estimates: never."""
        last = runs["idea"][-1].seed  # repeats follow their look's first runs
        return not self.request.checking_matched and any(r.repeat and r.seed == last for r in runs["idea"])

    def outcome(self, finals: dict[str, list[RunRecord]], confirmation: dict[str, list[RunRecord]] | None,
                measured: dict[str, list[float]] | None, device: str, wall_s: float,
                references: dict[str, Any] | None = None) -> Outcome:
        """Everything the report is made of, fixed now (``bench.assemble.build_report``)."""
        tables = {arm: [row.report() for row in self.sweep_table(arm)] if self.swept(arm)
                  else list((self.request.canonical or {}).get("sweep") or []) for arm in ARMS}
        digest = hashlib.sha256()
        for seed in sorted(self.seed_data):
            digest.update(self.seed_data[seed].checksum.encode())
        custom = self.request.custom_track
        return Outcome(
            card=self.card, matched_baseline=self.request.baseline_code is not None,
            matched_check=self.request.canonical,
            custom_track=({**custom.report_block(), "build_checked": self.build_checked}
                          if custom is not None else None),
            submission={"name": self.request.name, "hypothesis": self.request.hypothesis},
            mechanism=self.mechanism, measured=measured,
            screening=self.stage(finals), confirmation=None if confirmation is None else self.stage(confirmation),
            first_look=self.first_look,
            confirmation_runs=sum(r.stage == "confirmation" for r in self.runs),
            job_key=self.job_key, model_key=self.model_key, seed_commitment=self.secret.report_block(),
            n_params={arm: finals[arm][0].n_params for arm in ARMS},
            buffers={arm: max(self.counted[arm].n_buffers) for arm in ARMS},
            tensors={arm: max(self.counted[arm].n_tensors) for arm in ARMS},
            flops={arm: max(self.counted[arm].flops) for arm in ARMS},
            dearest={arm: self.counted[arm].dearest_cost(self.settings.defaults.batch_size) for arm in ARMS},
            diverged={arm: sum(r.diverged for r in self.runs if r.arm == arm) for arm in ARMS},
            wall={arm: float(sum(r.seconds for r in self.runs if r.arm == arm)) for arm in ARMS},
            sweep_tables=tables, best_cfgs={arm: self.best(arm).cfg for arm in ARMS},
            lr_grids=dict(self.lr_grids), capture=self.capture_blocks(),
            data_checksum=digest.hexdigest(), sweep_seeds=list(self.sweep_seed_list),
            isolation=self.executor.isolation(),
            execution=self.execution(), warnings=list(self.warnings), device=device, wall_s=wall_s,
            references=references, repeats_made={stage: list(looks) for stage, looks in self.repeats_made.items()},
        )

    def capture_blocks(self) -> dict[str, dict[str, Any]]:
        """Each arm's capture block, with ``family``: the graph family of the config the sweep
        chose (the model judged; a decoy config first in the grid sets nothing)."""
        blocks = {}
        for arm in ARMS:
            info = self.capture_info[arm]
            chosen = self._config_index(RunRecord(arm, dict(self.best(arm).config), 0, "test", "screening"))
            blocks[arm] = {**info.report_block(), "family": info.families[chosen]}
        if self.request.checking_matched:  # the matched baseline's configs, in index order (check_same_build)
            blocks["idea"]["configs"] = list(self.capture_info["idea"].configs)
        return blocks

    capture_seeds: list[int]  # every protocol seed a model is built with, in capture order
    screening_seed_list: list[int]  # drawn for this job from the epoch's pool
    first_look: Stage | None = None  # the confirmation's first look, when one ran


def pins_baseline(request: JudgeRequest) -> bool:
    """A custom track's own baseline is its validated build (issue 25, "still open" (b) until
    session 21): its author's code builds once per config, at the seed validation built
    with, and that build (its graph and tensors, bit for bit validation's in the epoch
    validation ran in) is every seed's; the trusted trainer draws each seed's parameter
    values (``bench.redraw``). A baseline honest at validation's build and sabotaged at any
    other has no other build to sabotage. Not in a matched baseline's check, where the
    track's baseline builds with the matched one's seeds."""
    return request.custom_track is not None and request.baseline_code is None and not request.checking_matched


def counted(reply: wire.CheckReply) -> Counted:
    """A trainer's check reply as ``bench.decide``'s typed counts."""
    return Counted(
        n_params=tuple(reply.n_params), n_buffers=tuple(reply.n_buffers), n_tensors=tuple(reply.n_tensors),
        flops=tuple(reply.flops), forwards=tuple(tuple(zip(rows, costs, strict=True))
                                                 for rows, costs in zip(reply.forward_rows, reply.forward_cost,
                                                                        strict=True)))
