"""Red team of the lent fork server (session 37: commits dfa9700, 3447b8e): every job of a
process forks its children from the process's fork server (``bench.warm.lend``), one job at a
time (``_serving``), and ``give_back`` closes the server where a child of the ended job still runs.

Each test names an attack. A test whose docstring starts "FINDING" failed while its hole was open
(helper-63) and passes since the fix (``warm._forget`` at a fork, ``_lend_slot``'s order and its
refusal beside a prepared slot; the zygote's template and spares, session 38). The others show an
attack the design already stops.
"""

from __future__ import annotations

import errno
import json
import os
import re
import select
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import sandbox, warm
from bench.catalog import get_card
from bench.errors import BenchError
from bench.judge import JudgeRequest, judge
from bench.sandbox import forkserver
from tests.bench.test_forkserver import PROBE_PRELUDE, needs_server
from tests.bench.test_sandbox import GOOD_TAIL, _assert_nothing_left

SMOKE = get_card("smoke")


@pytest.fixture
def job_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    warm.discard()  # no server of an earlier test's directory
    yield tmp_path
    warm.discard()


def _wait_readable(fd: int, timeout_s: float) -> bool:
    readable, _, _ = select.select([fd], [], [], timeout_s)
    return bool(readable)


# ---------------------------------------------------------------------------------------------
# FINDINGS
# ---------------------------------------------------------------------------------------------


@needs_server
def test_a_prefork_pool_process_leaves_the_main_processs_server_and_its_check_alone(job_tmp: Path) -> None:
    """FINDING (medium): ``ideabench worker --concurrency N`` (docs/deploy.md) runs Celery's prefork
    pool: the pool's processes are forked from the worker's main process, where the check thread
    (workers/checks.py) now borrows the process's fork server (``check`` -> ``_run`` -> ``warm.lend``)
    and leaves it in ``warm._server``. A pool process forked after a check (at start, or a pool
    process replaced after a task's hard time limit or a crash) inherits ``_server`` (its Popen, its
    socket, its cgroup); at its first job ``_worker_server`` asks ``_server.alive``: ``Popen.poll``
    of a process that is not its child gets ECHILD and reads 0, so the server looks dead and
    ``_close_server`` kills it (``launcher.kill``: the inherited cgroup's ``cgroup.kill``), shuts its
    socket down and removes its directory, under the main process's check that forks there now:
    the check's children die and its directory goes (a check answered ``crashed``/internal by another
    process's job). Before this change a check never made the process's server. Fix: note the pid
    that made the server (or ``os.register_at_fork(after_in_child=...)``) and, in a process that did
    not make it, forget the inherited server, slot and lease without closing them."""
    limits = sandbox.Limits()
    earlier = warm.lend(limits)  # a check answered in the main process: the server stays
    assert earlier is not None and earlier.server is not None
    earlier.tmp.cleanup()
    warm.give_back(earlier)
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a pool process: forked from the worker's main process
        status = 1
        try:
            os.close(go_w)
            os.close(done_r)
            if _wait_readable(go_r, 60):
                os.read(go_r, 1)
                job = warm.lend(limits)  # the pool process's first job
                if job is not None:
                    job.tmp.cleanup()
                    warm.give_back(job)
                warm.discard()
                status = 0
        except BaseException:  # noqa: BLE001
            status = 2
        finally:
            try:
                os.write(done_w, bytes([status]))
            finally:
                os._exit(status)
    os.close(go_r)
    os.close(done_w)
    check = warm.lend(limits)  # the next check, in the main process, while the pool process judges
    assert check is not None and check.server is earlier.server
    proc, fd = sandbox.launch(Path(check.tmp.name) / "idea", limits, server=check.server)
    assert isinstance(proc, forkserver.ForkedProcess)
    try:
        os.write(go_w, b"x")
        assert _wait_readable(done_r, 90), "the pool process hung"
        os.read(done_r, 1)
        os.waitpid(pid, 0)
        # the check's server, its child and its directory, as before the pool process's job
        assert check.server.alive, "the pool process closed the main process's fork server"
        with pytest.raises(subprocess.TimeoutExpired):  # still running: no exit status
            proc.wait(timeout=2)
        assert Path(check.tmp.name).exists(), "the pool process removed the check's directory"
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        sandbox.kill(proc)
        os.close(fd)
        for end in (go_w, done_r):
            os.close(end)
        check.tmp.cleanup()
        warm.give_back(check)
        warm.discard()


@needs_server
def test_a_lend_that_failed_half_way_does_not_hold_the_server_for_ever(
        job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FINDING (low: availability/performance): ``_lend_slot`` sets ``_serving = server`` before it
    makes the job's directory (``JobDir``: ``mkdtemp``, an ``open`` and a ``flock`` that raise on a
    full disk, EMFILE, EDQUOT). When that raises, the launcher answers None and nobody ever gives the
    lease back: from then on every ``lend`` answers None (each job starts a server of its own:
    2-4 CPU-s more), ``take`` refuses every warm slot of the server and ``prepare`` forks no child
    there, until the process restarts. Fix: make the JobDir first and set ``_serving`` only when
    the slot is returned (or reset it in an ``except``)."""
    limits = sandbox.Limits()
    real = warm.JobDir
    failed: list[str] = []

    def job_dir(parent: str | None = None) -> warm.JobDir:
        if not failed:
            failed.append("once")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(parent)

    monkeypatch.setattr(warm, "JobDir", job_dir)
    assert warm.lend(limits) is None  # this job starts its own server: fine
    monkeypatch.setattr(warm, "JobDir", real)
    following = warm.lend(limits)
    try:
        assert following is not None, "a lend that failed once left the process's server leased for ever"
    finally:
        if following is not None:
            following.tmp.cleanup()
            warm.give_back(following)


@needs_server
def test_a_warm_slot_that_lived_beside_a_lent_job_is_not_given_to_the_next_job(job_tmp: Path) -> None:
    """FINDING (low: the design's invariant, defence in depth): the rule "while a job forks from the
    server no warm child is forked there" holds one way only. A slot prepared first (the worker's
    next job's four children, forked from the server) stays alive while a check (the worker's check
    thread) or a matched baseline's nested check (``check_matched_baseline`` judges before ``take``)
    is lent the same server and runs submitted code in children beside them; after ``give_back`` the
    next job ``take``s that slot, so its trainers and capture children lived beside another live
    job's hostile children (docs/security.md: "a sibling may also be a child of the process's previous
    job, never a live one"). Landlock, scoped signals and seccomp are then the only walls between
    them. Fix: ``lend`` answers None (or discards the prepared slot) while a prepared slot's
    children come from the server, or ``take`` refuses a slot made before the server's last lend."""
    limits = sandbox.Limits()
    warm.prepare(limits)
    slot = warm.peek()
    assert slot is not None and slot.server is not None
    assert all(isinstance(proc, forkserver.ForkedProcess) for proc, _ in slot.launched.values())
    lent = warm.lend(limits)  # a check beside the worker, between two of its jobs
    beside = False
    if lent is not None:
        assert lent.server is slot.server
        proc, fd = sandbox.launch(Path(lent.tmp.name) / "idea", limits, server=lent.server)  # the check's child
        beside = isinstance(proc, forkserver.ForkedProcess) and proc.poll() is None and slot.alive
        sandbox.kill(proc)
        os.close(fd)
        lent.tmp.cleanup()
        warm.give_back(lent)
    taken = warm.take(limits)  # the worker's next job
    try:
        assert not (beside and taken is slot), (
            "the next job adopted warm children that lived beside a lent job's children")
    finally:
        if taken is not None:
            taken.discard()
            warm.give_back(taken)


# A hostile idea's reader of its own writable memory: ``heap_regions()`` yields (address, bytes)
# of the heap and anonymous mappings, what a forked child inherits from the server at the fork.
HEAP_REGIONS = r"""
def heap_regions():
    mem = open("/proc/self/mem", "rb", buffering=0)
    for line in open("/proc/self/maps").read().splitlines():
        parts = line.split()
        if "rw" not in parts[1] or (len(parts) > 5 and parts[5] != "[heap]"):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if hi - lo > 256 << 20:
            continue
        try:
            mem.seek(lo)
            yield lo, mem.read(hi - lo)
        except OSError:
            continue
"""
SCAN = HEAP_REGIONS + r"""
import json, os, re
own = os.path.basename(os.path.dirname(os.getcwd()))
names = set()
for _, data in heap_regions():
    names.update(m.group().decode() for m in re.finditer(rb"ideabench-job-[a-z0-9_]{8}", data))
raise RuntimeError("SCAN " + json.dumps({"own": own, "others": sorted(names - {own})}))
"""


@needs_server
def test_a_forked_child_learns_no_other_jobs_directory_from_the_servers_memory(job_tmp: Path) -> None:
    """FINDING (low: information about other jobs): a forked child inherited the zygote's address
    space, and the zygote parses every fork request of every job it served (``json.loads`` of
    ``{"fork": {"workdir": ..., "read": [...]}}``) in the same heap: the freed strings stay there.
    A later job's idea read its own memory (``/proc/self/mem``, its own entry, allowed) and found
    an earlier job's directory name (and so the worker's jobs, one by one; and, beside a prepared
    slot, the next job's directory). Landlock refused every access to it: a name, not a way in.
    Fixed: no child is forked from the zygote; each is a spare forked by a template that never
    reads a request, and reads only its own (``bench.sandbox.zygote``)."""
    limits = sandbox.Limits()
    previous = warm.lend(limits)  # an earlier job of the process, one child forked for it
    assert previous is not None and previous.server is not None
    proc, fd = sandbox.launch(Path(previous.tmp.name) / "idea", limits, server=previous.server)
    assert isinstance(proc, forkserver.ForkedProcess)
    sandbox.kill(proc)
    os.close(fd)
    earlier = Path(previous.tmp.name).name
    previous.tmp.cleanup()
    warm.give_back(previous)
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=SCAN + GOOD_TAIL, n_seeds=2, timeout_s=120))
    found = re.search(r"SCAN (\{.*?\})", info.value.message)
    assert found, info.value.message
    seen = json.loads(found.group(1))
    assert seen["own"].startswith("ideabench-job-") and seen["own"] != earlier
    assert seen["others"] == [], f"a later job's child read other jobs' directory names: {seen['others']}"


# ---------------------------------------------------------------------------------------------
# Attacks the design stops
# ---------------------------------------------------------------------------------------------

WEDGE = PROBE_PRELUDE + r'''
import time
class RLimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_uint64), ("max", ctypes.c_uint64)]
server = os.getppid()  # the template every later job's children are forked from (bench.sandbox.zygote)
low = RLimit(4, 4)
probe("stop_server", lambda: os.kill(server, signal.SIGSTOP))
probe("kill_init", lambda: os.kill(1, signal.SIGKILL))
probe("prlimit_server_nofile", lambda: call(libc.prlimit64, server, 7, ctypes.byref(low), None))
probe("prlimit_server_stack", lambda: call(libc.prlimit64, server, 3, ctypes.byref(low), None))
probe("nice_server", lambda: os.setpriority(os.PRIO_PROCESS, server, 19))
probe("affinity_server", lambda: os.sched_setaffinity(server, {0}))
probe("sched_idle_server", lambda: os.sched_setscheduler(server, os.SCHED_IDLE, os.sched_param(0)))
probe("ioprio_server", lambda: call(libc.syscall, 251, 1, server, 3 << 13))
# the zygote (the template's parent) and the spare waiting for the next job's request (the
# template's next fork): no pid in the server's namespace but its own may be signalled or read
def reach_any(attempt):
    reached = []
    for pid in range(1, os.getpid() + 64):
        if pid == os.getpid():
            continue
        try:
            attempt(pid)
            reached.append(pid)
        except OSError:
            pass
    if reached:
        raise RuntimeError(f"reached {reached}")
probe("signal_any_pid", lambda: reach_any(lambda pid: os.kill(pid, signal.SIGSTOP)))
probe("read_any_pid", lambda: reach_any(lambda pid: open(f"/proc/{pid}/stat").read()))
jobs = os.path.dirname(os.path.dirname(os.getcwd()))  # the server's directory: every job's lies there
probe("plant_in_server_dir", lambda: open(os.path.join(jobs, "planted"), "w").write("x"))
probe("plant_in_job_dir", lambda: open(os.path.join(os.path.dirname(os.getcwd()), "planted"), "w").write("x"))
probe("link_to_server_dir", lambda: os.symlink(jobs, "up"))
# a grandchild that leaves the child's session and outlives it, if it can
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(300)
    os._exit(0)
os.waitpid(first, 0)
# what the fork handed down from the server: a writable shared mapping or a descriptor would be a
# channel to every later child of the server (other jobs')
results["shared_writable"] = [l for l in open("/proc/self/maps").read().splitlines() if l.split()[1][1:4:2] == "ws"]
own_dir = os.getcwd()
foreign = []
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue  # the listing's own descriptor
    if not (target.startswith(("pipe:", own_dir + "/")) or target == own_dir):
        foreign.append(target)
results["foreign_fds"] = foreign
raise RuntimeError("WEDGE " + json.dumps(results, separators=(",", ":")))
'''


@needs_server
def test_a_job_cannot_wedge_poison_or_outlive_into_the_shared_server(job_tmp: Path) -> None:
    """A hostile idea stops, kills, renices, pins, or lowers the rlimits of the template every later
    job is forked from (its parent: ``getppid``), signals or reads any other pid of the server's
    (the zygote, the spare that will be the next job's child), plants files in the server's and the job's
    directory and leaves a daemonised grandchild; it looks for what the fork handed down from the
    server (a writable shared mapping, a descriptor: a channel to later jobs' children). Each is refused (scoped signals, seccomp's
    ``prlimit64``/``sched_setaffinity`` on the caller only, no ``setpriority``/``sched_setscheduler``
    /``ioprio_set``, Landlock), nothing of the job outlives it, the server stays and the next job
    is judged exactly as the same job before the attack."""
    request = JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2, job_key="lent-redteam")
    before = judge(request).model_dump(mode="json")["bench_report"]
    server = warm.current_server()
    assert server is not None and "landlock" in before["isolation"]
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=WEDGE + GOOD_TAIL, n_seeds=2, timeout_s=120))
    found = re.search(r"WEDGE (\{.*?\})", info.value.message)
    assert found, info.value.message
    results = json.loads(found.group(1))
    for name in ("stop_server", "kill_init", "prlimit_server_nofile", "prlimit_server_stack", "nice_server",
                 "affinity_server", "sched_idle_server", "ioprio_server"):
        assert results[name] == "EPERM", (name, results)
    assert results["signal_any_pid"] == "ok" and results["read_any_pid"] == "ok", results  # reached none
    for name in ("plant_in_server_dir", "plant_in_job_dir"):
        assert results[name] == "EACCES", (name, results)
    assert results["shared_writable"] == [] and results["foreign_fds"] == [], results
    _assert_nothing_left(str(job_tmp))  # the grandchild died with its job
    assert warm.current_server() is server and server.alive and not server.alive_under(server.workdir)
    assert sorted(p.name for p in server.workdir.iterdir() if p.name.startswith("ideabench-")) == []
    after = judge(request).model_dump(mode="json")["bench_report"]
    assert warm.current_server() is server and "landlock" in after["isolation"]
    for arm in ("baseline", "idea"):
        assert after[arm]["full"]["per_seed"] == before[arm]["full"]["per_seed"]
        assert after[arm]["sweep"] == before[arm]["sweep"]


@needs_server
def test_concurrent_lends_take_and_prepare_never_share_the_server(job_tmp: Path) -> None:
    """Racing callers (a worker's job thread, its check thread, the launcher's prepare): of four
    threads that ``lend`` at once exactly one borrows the server; while it does ``take`` refuses a
    slot of the server and ``prepare`` forks none there; the ``give_back`` of a slot lent nothing
    releases no lease of another job."""
    limits = sandbox.Limits()
    warm.prepare(limits)
    prepared = warm.peek()
    assert prepared is not None and prepared.server is not None
    server = prepared.server
    assert warm.take(limits) is prepared  # the worker's job: its lease
    try:
        got: list[warm.Slot | None] = []
        barrier = threading.Barrier(4)

        def borrow() -> None:
            barrier.wait()
            got.append(warm.lend(limits))

        threads = [threading.Thread(target=borrow) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert got == [None] * 4  # the worker's job forks there: each starts a server of its own
    finally:
        prepared.discard()
        warm.give_back(prepared)
    got = []
    threads = [threading.Thread(target=lambda: got.append(warm.lend(limits))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    lent = [slot for slot in got if slot is not None]
    assert len(lent) == 1 and lent[0].server is server  # one borrower at a time
    holder = lent[0]
    try:
        assert warm.lend(limits) is None
        warm.prepare(limits)
        slot = warm.peek()
        assert slot is not None and slot.server is None  # children of their own sandboxes
        assert warm.take(limits) is slot
        slot.discard()
        warm.give_back(slot)  # a slot of no server: nothing to give back, the holder's lease stays
        assert warm.lend(limits) is None
    finally:
        holder.tmp.cleanup()
        warm.give_back(holder)
    again = warm.lend(limits)
    assert again is not None and again.server is server
    again.tmp.cleanup()
    warm.give_back(again)
    warm.discard()
    _assert_nothing_left(str(job_tmp))


@needs_server
def test_a_matched_baseline_whose_nested_check_fails_gives_the_server_back(job_tmp: Path) -> None:
    """``check_matched_baseline`` judges the matched baseline (a nested ``judge``, lent the server)
    before the job's ``take``/``lend``: its failure, raised before the outer ``try``, still ends
    with the nested job's ``give_back``; the server is lendable again and nothing is left."""
    broken = "raise RuntimeError('matched baseline refuses to load')\n" + GOOD_TAIL
    with pytest.raises(BenchError):
        judge(JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], baseline_code=broken,
                           n_seeds=2, timeout_s=120), keep_warm=True)
    server = warm.current_server()
    assert server is not None and server.alive
    assert warm._serving is None
    _assert_nothing_left(str(job_tmp))
    _lent_again(server)


def _lent_again(server: forkserver.ForkServer) -> None:
    """The next job is lent the same server (and gives it back)."""
    lent = warm.lend(sandbox.Limits())
    assert lent is not None and lent.server is server
    lent.tmp.cleanup()
    warm.give_back(lent)


@needs_server
def test_a_job_cancelled_mid_way_leaves_nothing_beside_the_next_job(job_tmp: Path) -> None:
    """A job cancelled while its children run (a user's DELETE, the worker's heartbeat): its
    children are killed, its directory removed and its lease given back; nothing of it runs beside
    the next job, and the server serves that job."""
    cancel = threading.Event()

    def on_progress(progress: object) -> None:
        if "capturing" in str(getattr(progress, "message", "")):
            cancel.set()

    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2), on_progress, cancel)
    assert info.value.code.value == "cancelled", info.value
    server = warm.current_server()
    assert server is not None and server.alive and warm._serving is None
    assert server.alive_under(server.workdir) == []
    assert [p.name for p in server.workdir.iterdir() if p.name.startswith("ideabench-")] == []
    _assert_nothing_left(str(job_tmp))
    _lent_again(server)


@needs_server
def test_a_check_beside_a_workers_job_never_forks_beside_its_children(
        job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's job (``keep_warm``) and a check in its check thread, started at once: whichever
    borrows the process's server first forks there; the other starts a server of its own. No fork
    from any server ever finds a live child of another job's directory beside it (a spy on
    ``ForkServer.fork``), both answer, and nothing is left once both ended."""
    from bench.judge import check

    beside: list[tuple[str, set[str]]] = []
    forked: list[str] = []
    fork = forkserver.ForkServer.fork

    def spied(self: forkserver.ForkServer, workdir: Path, *args: object, **kwargs: object) -> object:
        job = workdir.resolve().parent
        with self._lock:
            live = {str(c.workdir.parent) for c, _ in [*self._children.values(), *self._retired] if c.returncode is None}
        if live - {str(job)}:
            beside.append((str(job), live))
        forked.append(str(job))
        return fork(self, workdir, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(forkserver.ForkServer, "fork", spied)
    barrier = threading.Barrier(2)
    answers: dict[str, object] = {}

    def run(name: str, call: object) -> None:
        barrier.wait()
        try:
            answers[name] = call()  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001
            answers[name] = exc

    request = JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2)
    threads = [
        threading.Thread(target=run, args=("job", lambda: judge(request, keep_warm=True))),
        threading.Thread(target=run, args=("check", lambda: check(request))),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(isinstance(answer, BaseException) for answer in answers.values()), answers
    assert set(answers) == {"job", "check"}
    assert warm._serving is None
    assert beside == [], beside
    assert len(set(forked)) >= 2  # the job's and the next job's warm slot, at least (the spy saw forks)
    warm.discard()
    _assert_nothing_left(str(job_tmp))
