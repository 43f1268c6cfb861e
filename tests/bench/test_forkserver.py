"""A job's fork server (bench.sandbox.forkserver): its children keep every layer of a fresh child,
and what one sandbox shared among siblings could open stays shut.

The hostile ideas run through ``bench.judge.judge`` on the smoke track, whose own baseline
makes the server see the track packages, so an idea child is the case where Landlock alone
hides them. Each probe reports what it got; the test names what each must get.
"""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import sandbox
from bench.catalog import get_card
from bench.errors import BenchError
from bench.judge import JudgeRequest, judge
from bench.sandbox import forkserver, landlock
from tests.bench.test_sandbox import GOOD_TAIL, _assert_nothing_left

SMOKE = get_card("smoke")
REPO = Path(__file__).resolve().parents[2]
why_not = forkserver.available()
needs_server = pytest.mark.skipif(
    why_not is not None and os.environ.get("CI", "") not in ("1", "true"),
    reason=f"no fork server here ({why_not}); CI=true never skips",
)


@pytest.fixture
def job_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    from bench import warm

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path
    warm.discard()  # a worker's slot and fork server, should a test end before it discards them


# A hostile idea's helpers: ``probe(name, attempt)`` records "ok" or the errno's name in
# ``results``; ``call`` makes a libc call that returned -1 an OSError.
PROBE_PRELUDE = r'''
import ctypes, errno, json, os, signal, socket
libc = ctypes.CDLL(None, use_errno=True)
results = {}
def probe(name, attempt):
    try:
        attempt()
        results[name] = "ok"
    except OSError as exc:
        results[name] = errno.errorcode.get(exc.errno, str(exc.errno))
def call(fn, *args):
    if fn(*args) == -1:
        raise OSError(ctypes.get_errno(), "refused")
'''

PROBES = PROBE_PRELUDE + r'''
job = os.path.dirname(os.getcwd())
try:
    listed = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    results["list_proc"] = "ok"
except OSError as exc:
    listed = []
    results["list_proc"] = errno.errorcode.get(exc.errno, str(exc.errno))
others = sorted(set(listed) | {1, os.getppid()})  # bwrap's init and the server, at least
results["others"] = len(others)
probe("list_job_dir", lambda: os.listdir(job))
probe("list_server_dir", lambda: os.listdir(os.path.dirname(job)))
probe("read_server_log", lambda: [open(os.path.join(d, "sandbox.log")).read() for d in (os.path.dirname(job), job)
                                  if os.path.basename(d).startswith(("ideabench-job-", "ideabench-forks-"))])
probe("read_sibling_dir", lambda: os.listdir(os.path.join(job, "baseline")))
probe("write_job_dir", lambda: open(os.path.join(job, "planted"), "w").write("x"))
probe("read_tracks", lambda: os.listdir(TRACKS))
probe("read_repo", lambda: open(PYPROJECT).read())
probe("signal_others", lambda: [os.kill(pid, 0) for pid in others])
probe("environ_of_others", lambda: [open(f"/proc/{pid}/environ", "rb").read() for pid in others])
# the server's reaped-children CPU: a worker's earlier jobs' (red team, session 30)
probe("stat_of_others", lambda: [open(f"/proc/{pid}/stat").read() for pid in others])
probe("own_stat", lambda: open("/proc/self/stat").read())
probe("mem_of_others", lambda: [open(f"/proc/{pid}/mem", "rb") for pid in others])
probe("fds_of_others", lambda: [os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY) for pid in others
                                 for fd in os.listdir(f"/proc/{pid}/fd")])
probe("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
probe("socketpair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
probe("fifo_in_own_dir", lambda: os.mkfifo("channel"))
probe("clone_parent", lambda: call(libc.syscall, 56, 0x8000 | 17, 0, 0, 0, 0))
results["capabilities"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
probe("sysv_shm", lambda: call(libc.shmget, 0, 4096, 0o1600))
probe("sysv_msg", lambda: call(libc.msgget, 0, 0o1600))
probe("sysv_sem", lambda: call(libc.semget, 0, 1, 0o1600))
probe("write_own_dir", lambda: open("mine.txt", "w").write("x"))
baseline = os.path.join(job, "baseline")
probe("chmod_sibling", lambda: os.chmod(baseline, 0o500))
probe("utime_sibling", lambda: os.utime(baseline))
probe("setxattr_sibling", lambda: os.setxattr(baseline, "user.note", b"x"))
probe("getxattr_sibling", lambda: os.getxattr(baseline, "user.note"))
probe("inotify", lambda: call(libc.inotify_init1, 0))
results["seed_dirs_seen"] = sum(os.path.exists(os.path.join(job, "data", str(n))) for n in range(3000))
raise RuntimeError("PROBES " + json.dumps(results, separators=(",", ":")))
'''


def _probe_results(job_tmp: Path, keep_warm: bool = False) -> dict[str, object]:
    source = (PROBES.replace("TRACKS", repr(str(REPO / "tracks"))).replace("PYPROJECT", repr(str(REPO / "pyproject.toml")))
              + GOOD_TAIL)
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=source, n_seeds=2, timeout_s=120), keep_warm=keep_warm)
    if keep_warm:
        from bench import warm

        warm.discard()
    _assert_nothing_left(str(job_tmp))
    found = re.search(r"PROBES (\{.*?\})", info.value.message)
    assert found, info.value.message
    return dict(json.loads(found.group(1)))


@needs_server
@pytest.mark.parametrize("path", ["own", "lent", "worker"])
def test_a_forked_idea_reaches_nothing_of_its_siblings_its_server_or_the_track_packages(
        job_tmp: Path, path: str) -> None:
    """A job's children come from the process's server, lent to a job without warm children
    (``lent``) or with a worker's warm slot (``worker``), where the job's directory lies in the
    server's (a previous job's beside it); or, while another job forks there (a check beside a
    worker's job), from a server of the job's own (``own``)."""
    from bench import warm

    if path == "own":
        held = warm.lend(sandbox.Limits())  # another job forks from the process's server now
        assert held is not None and held.server is not None
        forks = held.server.forks
        try:
            results = _probe_results(job_tmp)
        finally:
            held.tmp.cleanup()
            warm.give_back(held)
        assert held.server.forks == forks  # none of the job's children came from the process's server
        _check_probes(results)
        return
    if path == "worker":
        request = JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2)
        warm.prepare(sandbox.Limits(memory_mb=request.memory_mb))
        judge(request, keep_warm=True)  # a job through the worker's server, then the next slot from it
    _check_probes(_probe_results(job_tmp, keep_warm=path == "worker"))


def _check_probes(results: dict[str, object]) -> None:
    assert results.pop("others") >= 2  # bwrap's init and the server, at least: the probes below mean something
    assert results.pop("write_own_dir") == "ok"
    for name in ("list_job_dir", "list_server_dir", "read_server_log", "read_sibling_dir", "write_job_dir", "read_tracks"):
        assert results.pop(name) == "EACCES", name  # Landlock: only its own directory (not the one the job's lies in)
    assert results.pop("read_repo") == "ENOENT"  # outside the server's view altogether
    assert results.pop("signal_others") == "EPERM"  # scoped signals
    for name in ("environ_of_others", "mem_of_others", "fds_of_others", "stat_of_others", "list_proc"):
        assert results.pop(name) == "EACCES", name  # of /proc only its own entry (Landlock)
    assert results.pop("own_stat") == "ok"
    for name in ("unix_socket", "socketpair", "sysv_shm", "sysv_msg", "sysv_sem", "clone_parent"):
        assert results.pop(name) == "EPERM", name  # seccomp's allowlist (red team)
    assert results.pop("fifo_in_own_dir") == "EPERM"  # no socket or FIFO files (seccomp's allowlist, and Landlock)
    for name in ("chmod_sibling", "utime_sibling", "setxattr_sibling", "getxattr_sibling", "inotify"):
        assert results.pop(name) == "EPERM", name  # metadata Landlock does not mediate (red team 2)
    assert results.pop("seed_dirs_seen") == 0  # the seeds' data directories are named by a token of the job
    assert int(str(results.pop("capabilities")), 16) == 0  # --cap-drop ALL, even for a worker run as root
    assert not results


@needs_server
def test_a_cold_jobs_children_are_forked_and_judge_as_fresh_ones(job_tmp: Path) -> None:
    request = JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2, job_key="forked-or-fresh")
    forked = judge(request).model_dump(mode="json")["bench_report"]
    _assert_nothing_left(str(job_tmp))
    policy = sandbox.policy()
    sandbox.configure(sandbox.SandboxPolicy(bwrap=policy.bwrap, allow_weak=policy.allow_weak,
                                            require_full_isolation=policy.require_full_isolation, fork_server=False))
    try:
        fresh = judge(request).model_dump(mode="json")["bench_report"]
    finally:
        sandbox.configure(policy)
    assert "landlock" in forked["isolation"] and "landlock" not in fresh["isolation"]
    assert [x for x in forked["isolation"] if x != "landlock"] == fresh["isolation"]
    for arm in ("baseline", "idea"):
        assert forked[arm]["full"]["per_seed"] == fresh[arm]["full"]["per_seed"]
        assert forked[arm]["sweep"] == fresh[arm]["sweep"]


def test_no_server_where_it_is_turned_off_or_landlock_lacks_the_scopes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = sandbox.policy()
    monkeypatch.setattr(landlock, "abi", lambda: 5)
    assert forkserver.available() == "Landlock ABI 5 (scopes need 6)"
    assert forkserver.ForkServer.start(tmp_path, sandbox.Limits(), tracks=False) is None
    monkeypatch.undo()
    sandbox.configure(sandbox.SandboxPolicy(bwrap=policy.bwrap, fork_server=False))
    try:
        assert forkserver.available() is not None
        assert forkserver.ForkServer.start(tmp_path, sandbox.Limits(), tracks=False) is None
    finally:
        sandbox.configure(policy)


def _ready(fd: int) -> dict[str, object]:
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 4096)
        assert chunk, "the child closed its protocol pipe"
        line += chunk
    return dict(json.loads(line))


@needs_server
def test_a_forked_child_lives_in_its_own_cgroup_and_dies_by_its_kill(tmp_path: Path) -> None:
    server = forkserver.ForkServer.start(tmp_path / "job", sandbox.Limits(), tracks=False)
    assert server is not None
    try:
        proc, fd = sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits(), server=server)
        assert isinstance(proc, forkserver.ForkedProcess)
        assert _ready(fd)["ready"] is True
        group = sandbox.launcher.cgroup_of(proc)
        server_group = sandbox.launcher.cgroup_of(server.proc)  # type: ignore[arg-type]
        assert group is not None and server_group is not None
        assert proc.pid in group.pids_in() and proc.pid not in server_group.pids_in()
        assert {"landlock", "cgroup_memory", "cgroup_pids", "cgroup_kill", "seccomp", "namespaces"} <= set(
            sandbox.layers_of(proc))
        sandbox.kill(proc)
        assert proc.returncode == -signal.SIGKILL
        assert not any(d.exists() for d in group.dirs) and not group.dirs
        os.close(fd)
        # a child whose view the server cannot give starts fresh: its directory outside the job's
        outside, fd = sandbox.launch(tmp_path / "elsewhere" / "idea", sandbox.Limits(), server=server)
        assert not isinstance(outside, forkserver.ForkedProcess) and "landlock" not in sandbox.layers_of(outside)
        sandbox.kill(outside)
        os.close(fd)
    finally:
        server.close()
    _assert_nothing_left(str(tmp_path))


@needs_server
def test_children_end_with_their_server(tmp_path: Path) -> None:
    server = forkserver.ForkServer.start(tmp_path / "job", sandbox.Limits(), tracks=False)
    assert server is not None
    proc, fd = sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits(), server=server)
    try:
        assert _ready(fd)["ready"] is True
        assert server.proc is not None
        sandbox.kill(server.proc)  # the server dies (a crash, an OOM): its PID namespace with it
        assert proc.wait(timeout=30) < 0
        assert os.read(fd, 1) == b""  # the child is gone, not merely marked
    finally:
        sandbox.kill(proc)
        os.close(fd)
        server.close()
    _assert_nothing_left(str(tmp_path))


@needs_server
def test_a_workers_fork_server_serves_job_after_job_and_its_jobs_fork_every_child(
        job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import warm
    from tests.conftest import count_launches

    request = JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2, job_key="warm-server")
    limits = sandbox.Limits(memory_mb=request.memory_mb)
    cold = judge(request, keep_warm=True).model_dump(mode="json")["bench_report"]
    slot = warm.peek()
    # the worker's server and the children forked from it, in a job directory inside the server's
    assert slot is not None and slot.server is not None
    assert sorted(slot.launched) == ["baseline", "capture_idea", "idea", "measure_baseline_1"]
    assert all(isinstance(proc, forkserver.ForkedProcess) for proc, _ in slot.launched.values())
    server = slot.server
    assert Path(slot.tmp.name).parent == server.workdir
    # the first job found no slot: it forked its children from the worker's server too (lent), and
    # the slot's four came after them
    forked = server.forks
    assert forked == 4 + 3
    started = count_launches(monkeypatch)
    adopted = judge(request, keep_warm=True).model_dump(mode="json")["bench_report"]
    assert started == [] and server.forks == forked  # the job adopted every child it needed (the measure one unused)
    for arm in ("baseline", "idea"):
        assert cold[arm]["full"]["per_seed"] == adopted[arm]["full"]["per_seed"]
    assert "landlock" in adopted["isolation"] and adopted["isolation"] == cold["isolation"]
    # lent, not closed: the next job's children come from the same server, no import again, and
    # it remembers only the children alive (a worker's server forks job after job)
    following = warm.peek()
    assert following is not None and following.server is server and server.alive and server.forks == forked + 4
    assert not Path(slot.tmp.name).exists() and len(server._children) == 4
    # a slot whose server died is not taken, and the next slot gets a new server
    assert server.proc is not None
    sandbox.kill(server.proc)
    assert warm.take(limits) is None
    warm.prepare(limits)
    replacement = warm.peek()
    assert replacement is not None and replacement.server is not None and replacement.server is not server
    assert replacement.server.alive and not server.workdir.exists()
    warm.discard()
    _assert_nothing_left(str(job_tmp))


@needs_server
def test_one_job_at_a_time_forks_from_the_workers_server(job_tmp: Path) -> None:
    """A job without warm children borrows the process's server (``warm.lend``); while it forks
    there, a second job (a check beside a worker's job) is lent nothing and takes no warm slot, and
    no warm child is forked there: no job's children live beside another live job's."""
    from bench import warm

    limits = sandbox.Limits()
    first = warm.lend(limits)
    assert first is not None and first.server is not None and first.launched == {}
    try:
        assert Path(first.tmp.name).parent == first.server.workdir
        assert warm.lend(limits) is None  # the second job starts a server of its own
        warm.prepare(limits)  # the next job's warm children: not from a server a job forks from now
        slot = warm.peek()
        assert slot is not None and slot.server is None and slot.launched
        assert not any(isinstance(proc, forkserver.ForkedProcess) for proc, _ in slot.launched.values())
        assert warm.take(limits) is slot  # sandboxes of their own: nothing shared with the live job's
        slot.discard()
    finally:
        first.tmp.cleanup()
        warm.give_back(first)
    again = warm.lend(limits)
    assert again is not None and again.server is first.server  # one import per process
    # a child its job left running (a close that failed): the server goes at give_back, and its
    # PID namespace with everything in it, before another job forks there
    proc, fd = sandbox.launch(Path(again.tmp.name) / "idea", limits, server=again.server)
    assert isinstance(proc, forkserver.ForkedProcess) and again.server.alive_under(Path(again.tmp.name)) == [proc.pid]
    warm.give_back(again)
    assert warm.current_server() is None and not again.server.alive and proc.wait(timeout=30) < 0
    os.close(fd)
    again.tmp.cleanup()
    warm.discard()
    _assert_nothing_left(str(job_tmp))
