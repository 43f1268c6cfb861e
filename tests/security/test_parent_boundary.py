"""Hostile ideas against the parent's side of the boundary (PROTOCOL.md, "Who computes what").

Each file in ``hostile/`` is written as an adversary who has read our source would write it.
Each goes through ``bench.judge`` on the smoke track (what ``ideabench run`` calls) and must
end with a precise error code, leak nothing, hang nothing, and leave the next job correct.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from bench import options as engine_options
from bench.catalog import get_card
from bench.decide import diverged_score, fill_diverged
from bench.errors import BenchError, ErrorCode
from bench.judge import JudgeRequest, judge
from bench.runner import ArmSession, write_new_file
from bench.sandbox import Limits
from bench.wire import Train
from tests.conftest import fresh_children, use_cache

HOSTILE = Path(__file__).parent / "hostile"
SMOKE = get_card("smoke")


def hostile(name: str) -> str:
    return (HOSTILE / name).read_text()


@pytest.fixture
def job_tmp(tmp_path: Path, jobs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Jobs' temp dirs land under the module's ``jobs_dir`` (judge uses tempfile), their cache
    under ``tmp_path``."""
    monkeypatch.setattr(tempfile, "tempdir", str(jobs_dir))
    use_cache(tmp_path / "cache")
    return tmp_path


def judge_error(source: str, **kwargs: object) -> BenchError:
    kwargs.setdefault("timeout_s", 120.0)
    kwargs.setdefault("n_seeds", 2)
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=source, **kwargs))  # type: ignore[arg-type]
    return info.value


def test_events_forged_for_the_baseline_are_refused_and_do_not_poison_the_cache(job_tmp: Path) -> None:
    error = judge_error(hostile("forge_baseline_events.py"))
    assert error.code == ErrorCode.SANDBOX_VIOLATION, error.message
    assert "protocol pipe" in error.hint
    # The next, honest submission on the same cache: the baseline itself, judged against the
    # baseline, must not come out as a win (it would, had the forged diverged flags been cached).
    baseline = SMOKE["example_idea"]
    report = judge(JudgeRequest(track="smoke", idea_code=baseline, n_seeds=2, timeout_s=120)).model_dump(mode="json")
    assert report["practical_verdict"] != "helps"
    assert report["bench_report"]["diverged"] == {"baseline": 0, "idea": 0}


def test_predictions_of_another_shape_are_refused_before_scoring(job_tmp: Path) -> None:
    error = judge_error(hostile("eval_shape.py"))
    assert error.code == ErrorCode.BAD_OUTPUT_SHAPE, error.message
    assert "(256, 1)" in error.message or "expected float" in error.message


def test_a_log_linked_to_proc_environ_leaks_nothing(job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox refuses the unlink and the link (seccomp's allowlist); the parent's reading of
    a log that is a link is tested without it below."""
    secret = f"hunter2-{uuid.uuid4().hex}"
    monkeypatch.setenv("IDEABENCH_FAKE_DATABASE_URL", f"postgresql://u:{secret}@db/x")
    error = judge_error(hostile("log_link.py"))
    assert error.code == ErrorCode.SANDBOX_VIOLATION, error.message
    assert secret not in error.message and "IDEABENCH_FAKE_DATABASE_URL" not in error.message


def test_a_log_replaced_by_a_fifo_does_not_hang_the_parent(job_tmp: Path) -> None:
    fresh_children()
    started = time.monotonic()
    error = judge_error(hostile("log_fifo.py"), timeout_s=60.0)
    assert error.code == ErrorCode.SANDBOX_VIOLATION, error.message
    assert time.monotonic() - started < 55


def test_the_parent_reads_no_log_that_is_a_link_or_a_fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no filter stopped the child (a weak sandbox), its log may be a link to the parent's
    own /proc/self/environ or a FIFO no writer opens: the parent's tail reads neither (it opens
    with O_NOFOLLOW and O_NONBLOCK, a regular file only) and returns at once."""
    secret = f"hunter2-{uuid.uuid4().hex}"
    monkeypatch.setenv("IDEABENCH_FAKE_DATABASE_URL", f"postgresql://u:{secret}@db/x")
    linked, fifo = tmp_path / "linked", tmp_path / "fifo"
    linked.mkdir()
    fifo.mkdir()
    (linked / "child.log").symlink_to("/proc/self/environ")
    os.mkfifo(fifo / "child.log")
    started = time.monotonic()
    for workdir in (linked, fifo):
        session = type("Session", (), {"workdir": workdir, "role": "idea"})()
        assert ArmSession.log_tail(session) == ""  # type: ignore[arg-type]
    assert time.monotonic() - started < 5


def test_a_flooded_pipe_is_cut_off(job_tmp: Path) -> None:
    error = judge_error(hostile("flood_pipe.py"))
    assert error.code == ErrorCode.SANDBOX_VIOLATION, error.message
    assert "bytes" in error.message


def test_an_arm_that_diverges_gets_no_verdict(job_tmp: Path) -> None:
    error = judge_error(hostile("diverge_in_eval.py"))
    assert error.code == ErrorCode.DIVERGED, error.message
    assert "idea" in error.message


def test_a_diverged_run_scores_at_the_ceiling_or_worse() -> None:
    nan = float("nan")
    # Lower is better: the ceiling, unless a finite run of the comparison is worse still.
    assert diverged_score([0.1, 0.2, nan], 100.0, lower_is_better=True) == 100.0
    assert diverged_score([0.1, 250.0, nan], 100.0, lower_is_better=True) == 250.0
    assert fill_diverged([0.1, nan], 100.0) == [0.1, 100.0]
    # Higher is better: never above the worst finite value.
    assert diverged_score([0.9, 0.8, nan], 1.0, lower_is_better=False) == -1.0


def _silent_child(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A child that says ready and then never reads its stdin."""
    read_fd, write_fd = os.pipe()
    code = (
        "import os, sys, time\n"
        f"os.write({write_fd}, b'{{\"ready\": true}}\\n')\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, pass_fds=(write_fd,),
                            start_new_session=True, cwd=tmp_path)
    os.close(write_fd)
    return proc, read_fd


def test_a_child_that_stops_reading_cannot_hang_a_command(tmp_path: Path) -> None:
    proc, fd = _silent_child(tmp_path)
    session = ArmSession("idea", tmp_path / "idea", Limits(), time.monotonic() + 3.0, threading.Event(),
                         3.0, launched=(proc, fd))
    started = time.monotonic()
    with pytest.raises(BenchError) as info:
        session.request(Train(runs=[{"x": "x" * 1000}] * 4000))  # 4 MB: past any pipe buffer
    assert info.value.code == ErrorCode.TIMEOUT
    assert time.monotonic() - started < 20
    session.close()
    assert proc.poll() is not None


def test_the_parent_never_writes_through_a_link_the_child_planted(tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("untouched")
    arm = tmp_path / "baseline"
    arm.mkdir()
    (arm / "restore_baseline3.pt").symlink_to(target)
    with pytest.raises(BenchError) as info:
        write_new_file(arm, "restore_baseline3.pt", b"chosen bytes")
    assert info.value.code == ErrorCode.SANDBOX_VIOLATION
    assert target.read_text() == "untouched"
    write_new_file(arm, "restore_baseline4.pt", b"ok")
    assert (arm / "restore_baseline4.pt").read_bytes() == b"ok"


# -- label reconstruction (secret seeds, hidden data) ----------------------------------
def test_the_label_oracle_works_on_public_seeds_and_fails_on_secret_ones(job_tmp: Path) -> None:
    import torch

    source = hostile("reconstruct_smoke_labels.py")
    namespace: dict[str, object] = {}
    exec(compile(source, "oracle.py", "exec"), namespace)
    model = namespace["build_model"](SMOKE["spec"])  # type: ignore[operator]
    model.eval()
    # The attack is real: on the data the old public seeds made, it answers every label.
    x, y = namespace["_smoke"](namespace["_public_split_seed"](1000))  # type: ignore[operator]
    with torch.no_grad():
        assert float(((model(x) - y) ** 2).mean()) < 1e-10
    # Layer 1, secret seeds: not one row of the data a job evaluates is in its table.
    from bench.registry import load_track
    from bench.seeding import run_seeds, task_seed

    secret = engine_options.current().deployment_secret()
    smoke = load_track("smoke")
    for seed in (0, 1000, 1001):
        splits = smoke.make_splits(run_seeds(seed, secret, track="smoke").split, task_seed("smoke", secret))
        distance = torch.cdist(splits.x_test, model.keys, compute_mode="donot_use_mm_for_euclid_dist")
        assert float(distance.min()) > 1e-3
    # Layer 2, the capture boundary: its table is a tensor the bench counts (and uses only in
    # eval mode): the job is refused before any training.
    error = judge_error(source, n_seeds=6)
    assert error.code in (ErrorCode.NOT_CAPTURABLE, ErrorCode.PARAMETER_PARITY), error.message


def test_the_idea_cannot_import_the_track_packages(job_tmp: Path) -> None:
    error = judge_error(hostile("import_tracks.py"))
    # a fresh child sees an empty directory (not a package); a forked one is refused by Landlock
    assert error.code in (ErrorCode.INVALID_CODE, ErrorCode.SANDBOX_VIOLATION), error.message
    assert "tracks" in error.message


def test_bundled_public_data_sets_are_invisible_to_the_idea(job_tmp: Path) -> None:
    error = judge_error(hostile("read_sklearn_data.py"))
    assert "EMPTY" in error.message and "LEAKED" not in error.message, error.message


def test_a_child_that_fills_its_directory_is_stopped(job_tmp: Path) -> None:
    error = judge_error(hostile("fill_disk.py"))
    assert error.code == ErrorCode.OUTPUT_LIMIT, error.message
    assert "quota" in error.message


def test_directory_usage_counts_bytes_and_stops_counting_entries(tmp_path: Path) -> None:
    from bench.runner import directory_usage

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "big").write_bytes(b"x" * 100_000)
    for i in range(50):
        (tmp_path / f"f{i}").write_text("x")
    (tmp_path / "link").symlink_to("/etc")  # not followed
    used, entries = directory_usage(tmp_path, 10_000)
    assert used >= 100_000 and entries == 53
    assert directory_usage(tmp_path, 10)[1] == 11  # it stops one past the bound


def test_the_seed_secret_is_out_of_reach_of_submitted_code(
    job_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.seeding import SECRET_FILE

    # the worker's environment holds its settings (the child must see none of them)
    monkeypatch.delenv("IDEABENCH_SEED_SECRET")
    monkeypatch.setenv("IDEABENCH_DATA_DIR", str(job_tmp / "var"))
    options = dataclasses.replace(engine_options.current(), seed_secret="", data_dir=job_tmp / "var")
    engine_options.configure(options)  # embedded mode: the secret is a file in the data dir
    secret = options.deployment_secret()  # generated into the data dir, as in embedded mode
    path = job_tmp / "var" / SECRET_FILE
    source = (
        "import os\n"
        f"found = [os.environ.get('IDEABENCH_SEED_SECRET'), os.environ.get('IDEABENCH_DATA_DIR')]\n"
        "try:\n"
        f"    found.append(open({str(path)!r}).read())\n"
        "except OSError as exc:\n"
        "    found.append(type(exc).__name__)\n"
        "raise RuntimeError(f'FOUND {found}')\n"
        "def build_model(spec):\n    pass\n"
    )
    error = judge_error(source)
    assert "FOUND [None, None," in error.message, error.message
    assert secret.key.hex() not in error.message


def test_a_child_cannot_speak_with_the_benchs_error_words(job_tmp: Path) -> None:
    """Issue 25.11: a child wrote {"error": {"code": "internal", ...}} and the parent raised it as its
    own, with a 1 MiB message of the idea's choosing stored. Deny by default: only the child's side's
    codes pass, and its text is short and plain."""
    error = judge_error(hostile("forge_bench_error.py"))
    assert error.code is ErrorCode.CRASHED, error.to_dict()
    assert len(error.message) <= 1100 and "\r" not in error.message
    assert "failed" in error.message


@pytest.mark.parametrize("code", ["internal", "cancelled", "no_space", "sandbox_unavailable", "diverged", "bogus", None])
def test_only_the_childs_codes_pass_as_sent(code: str | None) -> None:
    from bench.runner import CHILD_CODES, child_error

    forged = child_error("idea", {"code": code, "message": "m" * 5000, "hint": "\x1b[31mh"})
    assert forged.code is ErrorCode.CRASHED and len(forged.message) <= 1100
    own = child_error("idea", {"code": "not_capturable", "message": "x\x00y", "hint": "use torch.where"})
    assert own.code is ErrorCode.NOT_CAPTURABLE and own.message == "x y" and own.hint == "use torch.where"
    assert ErrorCode.INTERNAL not in CHILD_CODES


def test_big_endian_tensors_are_the_ideas_fault_not_a_bug(job_tmp: Path) -> None:
    error = judge_error(hostile("big_endian.py"))
    assert error.code is ErrorCode.NOT_CAPTURABLE and "byte order" in error.message, error.to_dict()


def test_sparse_tensor_files_are_refused_before_they_are_read(job_tmp: Path) -> None:
    error = judge_error(hostile("sparse_tensors.py"))
    assert error.code is ErrorCode.SANDBOX_VIOLATION and "sparse" in error.message, error.to_dict()


def test_a_seeds_tensors_are_counted_from_their_headers_before_any_is_read(tmp_path: Path) -> None:
    """Issue 25.9: the parent read each tensor, then summed: one 32M-element tensor per seed made
    it write 4.7 GB before parity refused the model. Now the headers are summed first."""
    import types

    import numpy as np

    from bench import captured
    from bench.capture import tensor_path

    (tmp_path / "capture").mkdir()
    session = types.SimpleNamespace(workdir=tmp_path, role="idea")
    for j, size in enumerate((100, 900)):
        path = tmp_path / tensor_path(0, 0, j)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, np.zeros(size, np.float32))
    captured._count_first(session, 0, 0, 2, 1000)  # type: ignore[arg-type]  # exactly at the bound
    with pytest.raises(BenchError) as info:
        captured._count_first(session, 0, 0, 2, 999)  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.NOT_CAPTURABLE and "1000 tensor elements" in info.value.message


def test_the_track_cache_evicts_the_least_recently_used_versions(tmp_path: Path) -> None:
    from bench.custom_track import evict

    for age, name in enumerate(("old", "mid", "new")):
        directory = tmp_path / name / "1"
        directory.mkdir(parents=True)
        (directory / "x.npy").write_bytes(os.urandom(64 << 10))
        os.utime(tmp_path / name, (1_000_000 + age, 1_000_000 + age))
    removed = evict(tmp_path, keep=tmp_path / "old", max_bytes=140 << 10)
    assert removed == [tmp_path / "mid"]  # "old" is the one in use
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "old"]


def test_literal_numbers_count_with_the_buffers(job_tmp: Path) -> None:
    error = judge_error(hostile("literal_table.py"))
    assert error.code is ErrorCode.PARAMETER_PARITY and "literal numbers" in error.message, error.to_dict()


def test_tensors_are_counted_in_words_not_elements() -> None:
    """The 442 diabetes rows packed into a complex128 buffer of 226 elements passed a cap of 385
    counted by element; in 32-bit words it holds 904 (compressed: random numbers hardly shrink)."""
    import torch
    from torch import nn

    from tests.capture_helpers import through_capture

    class Packed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.read = nn.Linear(8, 1)
            self.register_buffer("table", torch.randn(226, dtype=torch.complex128, generator=torch.Generator().manual_seed(0)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.read(x) + self.table.real.sum() * 0.0

    n_params, n_buffers = through_capture(Packed(), [8]).counts()
    assert n_params == 9 and 800 < n_buffers <= 226 * 4 + 1  # the table (hardly compressible), and the literal 0.0


@pytest.mark.parametrize("name", ["tied_block.py", "broadcast_dense.py"])
def test_compute_is_counted_and_capped(job_tmp: Path, name: str) -> None:
    error = judge_error(hostile(name))
    assert error.code is ErrorCode.COMPUTE_PARITY and "per example" in error.message, error.to_dict()


@pytest.mark.parametrize(("shape", "said"), [("2**14, 2**15", "per example past the first"),
                                             ("2**20, 2**20", "operations (counted by the bench), past")])
def test_compute_that_does_not_grow_with_the_batch_is_counted_before_it_runs(job_tmp: Path, shape: str,
                                                                            said: str) -> None:
    """Session 33: a constant summed each forward cost nothing per added row, so it was not
    counted (2**29 elements: judged, 45 times the baseline's job time; 2**40: the trainer held
    for the job's whole timeout, counting). Both are counted on fake tensors and refused before
    a forward runs (the job's 120 s would end the second as ``timeout``)."""
    source = hostile("fixed_cost_gadget.py")
    assert "2**14, 2**15" in source
    error = judge_error(source.replace("2**14, 2**15", shape))
    assert error.code is ErrorCode.COMPUTE_PARITY and said in error.message, error.to_dict()


CANONICAL_COPY = (
    "from torch import nn\n"
    "def build_model(spec):\n"
    "    return nn.Sequential(nn.Linear(spec['n_features'], 32), nn.ReLU(), nn.Linear(32, 1))\n"
)


def test_a_sandbagged_matched_baseline_makes_no_win(job_tmp: Path) -> None:
    """Issue 25.5: the matched baseline is judged against the canonical one on the same seeds
    first; worse than it by more than the smallest effect, the job ends baseline_inferior."""
    error = judge_error(CANONICAL_COPY, baseline_code=hostile("sandbagged_baseline.py"), n_seeds=4)
    assert error.code is ErrorCode.BASELINE_INFERIOR, error.to_dict()
    assert "worse than the track's canonical baseline" in error.message


def test_a_sandbagged_matched_baseline_gains_nothing_from_a_second_config(job_tmp: Path) -> None:
    """Red team (issue 25.5): two configs gave the track's baseline a denser grid in the check,
    whose lr (best on validation) did badly on test: the sandbag passed as non-inferior and a
    copy of the canonical baseline got helps. Non-inferiority now holds against the track's
    baseline at its own lr and at the matched one's."""
    error = judge_error(CANONICAL_COPY, baseline_code=hostile("sandbag_two_configs.py"), n_seeds=7,
                        job_key="r4_forge5_a")
    assert error.code is ErrorCode.BASELINE_INFERIOR, error.to_dict()


def test_an_honest_matched_baseline_is_checked_and_parity_is_the_canonical_ones(job_tmp: Path) -> None:
    """A matched baseline padded with dead parameters admitted an idea as large (issue 25.5):
    parity is measured against the canonical baseline (321 parameters on smoke)."""
    report = judge(JudgeRequest(track="smoke", idea_code=CANONICAL_COPY, baseline_code=CANONICAL_COPY,
                                n_seeds=2, timeout_s=300.0)).model_dump(mode="json")["bench_report"]
    check = report["matched_baseline_check"]
    assert check["non_inferior"] is True and check["n_params"] == 321 and check["seeds"]
    # the canonical baseline's dearest forward, from its check, is the job's compute limit too (session 38)
    parity = report["parameter_parity"]
    assert check["dearest"] == parity["dearest_per_example"]["baseline"] >= 0, (check, parity)  # the copy's own
    assert report["execution"]["path"] == "sequential"  # as in its check (Job.matched_path_fixed)
    assert report["execution"]["sequential_reason"] == "a matched baseline trains on one path in its check and its job"
    wide = CANONICAL_COPY.replace("32), nn.ReLU(), nn.Linear(32, 1)", "36), nn.ReLU(), nn.Linear(36, 1)")
    big_baseline = CANONICAL_COPY.replace("32), nn.ReLU(), nn.Linear(32, 1)", "40), nn.ReLU(), nn.Linear(40, 1)")
    error = judge_error(wide, baseline_code=big_baseline)  # 361 > 1.1 x 321, though < 1.1 x 401
    assert error.code is ErrorCode.PARAMETER_PARITY and "321" in error.message, error.to_dict()


def test_a_build_model_that_sleeps_ends_its_job_at_the_capture_limit(job_tmp: Path) -> None:
    """Issue 27.2: a build_model that sleeps held the only worker for the whole job timeout
    (1,800 s), stuck at capturing."""
    sleepy = CANONICAL_COPY.replace("def build_model(spec):\n", "def build_model(spec):\n    import time; time.sleep(60)\n")
    started = time.monotonic()
    error = judge_error(sleepy, capture_timeout_s=4.0)
    assert error.code is ErrorCode.CAPTURE_TIMEOUT and "build_model must build a model" in error.message
    assert time.monotonic() - started < 40


def test_a_matched_baseline_that_reads_its_role_is_refused(job_tmp: Path) -> None:
    """Red team: sound in its check (run as the idea), weak in the job (run as the baseline): a copy
    of the canonical baseline then won 12 of 12 confirmation pairs. The job's build must equal the
    check's, graphs and tensors."""
    error = judge_error(CANONICAL_COPY, baseline_code=hostile("two_faced_baseline.py"), n_seeds=2)
    assert error.code is ErrorCode.INCONSISTENT_BUILD, error.to_dict()


def test_a_matched_baseline_is_compared_at_the_config_its_check_measured(job_tmp: Path) -> None:
    """Red team (session 15): a matched baseline that reads the lr it is trained at off Adam's
    first step (a constant scalar parameter kicked by exactly lr, then carried by momentum to
    5.9562 lr) is the canonical MLP (reparametrized) only at lr 0.03, where its check measured it
    (worse_by 6.6e-5), and sandbagged at every other lr. An idea that is a copy of the canonical
    baseline with a second config densified the matched baseline's grid in the job (budget_factor
    2: geomspace(0.01, 0.1, 6), no 0.03): it re-tuned to 0.0251, sandbagged, and the copy got
    helps / worked (screening gain 0.425, confirmation 0.501, m 0.0127). The job's final matched
    config is now its check's (bench.protocol.Job.pinned)."""
    report = judge(JudgeRequest(track="smoke", idea_code=hostile("canonical_copy_two_configs.py"),
                                baseline_code=hostile("lr_keyed_matched.py"), n_seeds=8, job_key="rt_lrkey_1",
                                timeout_s=600.0)).model_dump(mode="json")
    br = report["bench_report"]
    check = br["matched_baseline_check"]
    assert check["non_inferior"] and check["worse_by"] < check["smallest_effect"]
    assert br["baseline"]["best_cfg"]["lr"] == check["chosen"]["lr"] == 0.03
    assert report["practical_verdict"] != "helps", br["comparison"]


def test_a_matched_baseline_that_senses_its_trainers_path_gains_nothing(job_tmp: Path) -> None:
    """Red team (session 15, second pass): a matched baseline that compares two attention kernels
    in train mode is the canonical MLP bit for bit on the vectorized path (its check: both arms
    batch) and sabotages itself on the sequential one, where an idea with running statistics (an
    unbatchable BatchNorm on a detached zero branch) puts the job; an exact copy of the canonical
    baseline got helps (screening delta -0.724, 8/8; confirmation -0.785, 8/8). A matched
    baseline now trains on the sequential path in its check and in its job
    (``Job.matched_path_fixed``): its check saw the sabotage and ended the job
    ``baseline_inferior``. Since session 17 every child runs attention through the math kernel
    alone (``bench.child.main``), so this file's detector reads the same on both paths: it is
    the canonical MLP everywhere, and the copy of the canonical baseline wins nothing."""
    report = judge(JudgeRequest(track="smoke", idea_code=hostile("bn_copy_idea.py"),
                                baseline_code=hostile("path_keyed_matched.py"), n_seeds=8,
                                job_key="rt2-path-test")).model_dump(mode="json")
    assert (report["system_verdict"], report["practical_verdict"]) == ("failed", "inconclusive"), report["summary"]


def test_an_idle_child_past_its_quota_is_caught_while_the_parent_reads_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team 5: the parent measured a child's directory only while it talked to that child,
    so the idea's capture child, idle for the whole screening, held 2.6 GiB past its quota while
    the parent read the trainers. Reading any child of a job now measures every live child of
    that job (not another job's)."""
    from bench import runner

    killed: list[str] = []
    monkeypatch.setattr(ArmSession, "_kill", lambda self, reason: killed.append(self.role))

    def session(role: str, cancel: threading.Event) -> ArmSession:
        made = object.__new__(ArmSession)  # the disk check's state only: no child is started
        made.role, made.workdir, made.cancel = role, tmp_path / role, cancel
        made.workdir.mkdir()
        made.limits, made._disk_checked, made._disk_lock, made._fd = Limits(disk_mb=1), 0.0, threading.Lock(), 99
        with runner._live_lock:
            runner._live.add(made)
        return made

    job, other_job = threading.Event(), threading.Event()
    reading, idle, elsewhere = session("trainer", job), session("capture_idea", job), session("x", other_job)
    (elsewhere.workdir / "blob").write_bytes(b"x" * (2 << 20))
    reading._check_disks()  # the other job's child is past its quota: not this job's to judge
    assert killed == []
    (idle.workdir / "blob").write_bytes(b"x" * (2 << 20))
    idle._disk_checked = 0.0
    with pytest.raises(BenchError) as info:
        reading._check_disks()
    assert info.value.code == ErrorCode.OUTPUT_LIMIT and "capture_idea" in info.value.message
    assert killed == ["capture_idea"]
