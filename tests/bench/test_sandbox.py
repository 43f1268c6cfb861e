"""Hostile submissions end with a precise error, harm nothing and leave nothing running.

Each hostile idea goes through ``bench.judge.judge`` on the smoke track. The
job's temp dir is put under the test's ``tmp_path`` so every process of the job
(the bootstrap's command line names its working directory) can be found
afterwards; processes a test starts itself carry a marker in their command line.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from bench import sandbox
from bench.catalog import get_card
from bench.errors import BenchError, ErrorCode
from bench.judge import JudgeRequest, judge
from bench.sandbox import cgroups as sandbox_cgroups

REPO = Path(__file__).resolve().parents[2]
SMOKE = get_card("smoke")
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
LAYERS = sandbox.probe_layers()
GOOD_TAIL = "\nimport torch\nfrom torch import nn\n\ndef build_model(spec):\n    return nn.Linear(8, 1)\n"

needs_bwrap = pytest.mark.skipif(
    "namespaces" not in LAYERS and not IN_CI,
    reason="bubblewrap (bwrap) is not installed: run scripts/system_deps.sh as root "
    "(with CI=true these tests never skip)",
)
needs_pids_limit = pytest.mark.skipif(
    "cgroup_pids" not in LAYERS and not IN_CI,
    reason="no writable pids cgroup here: a fork bomb would hit the host (CI=true never skips)",
)


@pytest.fixture
def job_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Jobs' temp dirs land under ``tmp_path`` (judge uses tempfile)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _fork_server() -> tuple[set[int], set[Path]]:
    """The process's fork server, which a job leaves running for the next one (``bench.warm.lend``):
    the processes of its cgroup (its bubblewrap, bubblewrap's init, the zygote, its template and the
    spare waiting for the next request: ``bench.sandbox.zygote``) and its cgroup's directories. A
    forked child is moved to a cgroup of its own before it runs anything, and what it starts stays
    there: nothing a job's code started is among them."""
    from bench import warm
    from bench.sandbox import launcher

    server = warm.current_server()
    if server is None or server.proc is None or server.proc.poll() is not None:
        return set(), set()
    group = launcher.cgroup_of(server.proc)
    if group is None:
        return {server.proc.pid}, set()
    return {server.proc.pid, *group.pids_in()}, set(group.dirs)


def _processes_with(marker: str) -> list[tuple[int, str]]:
    found = []
    server, _ = _fork_server()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid() or int(entry.name) in server:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append((int(entry.name), cmdline))
    return found


def _assert_nothing_left(*markers: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        left = [p for m in markers for p in _processes_with(m)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"processes left running after the job: {left}"
    v2, v1 = sandbox_cgroups.cgroup_mounts()
    own = sandbox_cgroups.own_cgroups()
    parents = [v1[c] / own.get(c, "/").lstrip("/") for c in v1]
    if v2 is not None:
        parents.append(v2 / own.get("", "/").lstrip("/"))
    _, server_groups = _fork_server()
    cgroups = [p for d in parents for p in d.glob(f"{sandbox.CGROUP_PREFIX}{os.getpid()}-*") if p not in server_groups]
    assert not cgroups, f"cgroups left behind: {cgroups}"


def _judge_fails(job_tmp: Path, code: str, source: str, *markers: str, **kwargs: object) -> BenchError:
    kwargs.setdefault("timeout_s", 90.0)
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=source, n_seeds=2, **kwargs))  # type: ignore[arg-type]
    error = info.value
    assert error.code.value == code, error.message
    _assert_nothing_left(str(job_tmp), *markers)
    return error


# -- network ----------------------------------------------------------------------
@needs_bwrap
@pytest.mark.parametrize("address", [("127.0.0.1", 5432), ("127.0.0.1", 6379), ("1.1.1.1", 443)])
def test_network_is_refused(job_tmp: Path, address: tuple[str, int]) -> None:
    source = f"import socket\nsocket.create_connection({address!r}, timeout=3)\n" + GOOD_TAIL
    error = _judge_fails(job_tmp, "sandbox_violation", source)
    assert "network" in error.message


# -- the worker's environment and files --------------------------------------------
@needs_bwrap
def test_worker_environment_is_invisible(job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"hunter2-{uuid.uuid4().hex}"
    monkeypatch.setenv("IDEABENCH_FAKE_DATABASE_URL", f"postgresql://u:{secret}@db/x")
    source = (
        "import os\n"
        "try:\n"
        "    p1 = open('/proc/1/environ', 'rb').read()\n"
        "except PermissionError:\n"  # a forked child: Landlock refuses what is outside its domain
        "    p1 = b''\n"
        "me = open('/proc/self/environ', 'rb').read()\n"
        "raise RuntimeError(f'P1={p1!r} ENV={sorted(os.environ)!r} SELF={me!r}')\n" + GOOD_TAIL
    )
    error = _judge_fails(job_tmp, "invalid_code", source)
    assert "P1=b''" in error.message  # bwrap's PID 1 runs with an empty environment
    assert secret not in error.message
    assert "IDEABENCH_FAKE_DATABASE_URL" not in error.message


@needs_bwrap
@pytest.mark.parametrize("path", [str(REPO / "pyproject.toml"), "/etc/shadow", "/etc/hostname"])
def test_host_files_are_invisible(job_tmp: Path, path: str) -> None:
    source = f"open({path!r}).read()\n" + GOOD_TAIL
    error = _judge_fails(job_tmp, "sandbox_violation", source)
    assert path in error.message


@needs_bwrap
def test_writing_outside_the_temp_dir_fails(job_tmp: Path) -> None:
    name = f"evil-{uuid.uuid4().hex}.txt"
    targets = [str(REPO / name), f"/tmp/{name}", f"/etc/{name}", str(job_tmp / name)]
    source = (
        "import os\n"
        f"targets = {targets!r} + [os.path.join(os.path.dirname(os.getcwd()), 'data', {name!r})]\n"
        "wrote = []\n"
        "last = None\n"
        "for t in targets:\n"
        "    try:\n"
        "        open(t, 'w').write('x')\n"
        "        wrote.append(t)\n"
        "    except OSError as exc:\n"
        "        last = exc\n"
        "if wrote:\n"
        "    raise RuntimeError(f'WROTE {wrote}')\n"
        "raise last\n" + GOOD_TAIL
    )
    error = _judge_fails(job_tmp, "sandbox_violation", source)
    # The submitted code runs in the capture child, which sees no data directory at all.
    # (a forked child: Landlock refuses every path but its own directory)
    assert any(why in error.message for why in ("outside the job's temp dir", "reading", "refused by the sandbox"))
    for target in targets:
        assert not Path(target).exists()


@pytest.mark.skipif(
    "seccomp" not in LAYERS and not IN_CI,
    reason="pyseccomp (and libseccomp2) not installed: no seccomp filter here (CI=true never skips)",
)
def test_namespace_and_ptrace_calls_are_refused(job_tmp: Path) -> None:
    source = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "results = {}\n"
        "results['unshare'] = (libc.unshare(0x10000000), ctypes.get_errno())\n"
        "results['ptrace'] = (libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"
        "assert all(rc == -1 for rc, _ in results.values()), results\n"
        "raise PermissionError(ctypes.get_errno(), 'unshare/ptrace refused')\n" + GOOD_TAIL
    )
    error = _judge_fails(job_tmp, "sandbox_violation", source)
    assert "system call refused" in error.message


# Calls on no allowlist (bench.sandbox.guard.ALLOWED_SYSCALLS): each would succeed, or fail with
# another errno, outside the filter, so EPERM from every one says the allowlist refused it.
ALLOWLIST_PROBE = (
    "import ctypes, errno, fcntl, os, resource, socket, termios\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def refused(call):\n"
    "    try:\n"
    "        call()\n"
    "    except OSError as exc:\n"
    "        return True if exc.errno == errno.EPERM else exc.errno\n"
    "    return False\n"
    "def refused_c(rc):\n"
    "    return True if rc == -1 and ctypes.get_errno() == errno.EPERM else (rc, ctypes.get_errno())\n"
    "here = os.open('.', os.O_RDONLY)\n"
    "plain = os.open('plain', os.O_RDWR | os.O_CREAT, 0o600)\n"
    "word = ctypes.c_int(0)\n"
    "import mmap\n"
    "area = mmap.mmap(-1, 4096)\n"
    "page = ctypes.addressof(ctypes.c_char.from_buffer(area))\n"
    "results = {\n"
    "    'execve': refused(lambda: os.execv('/bin/true', ['true'])),\n"
    "    'socket_unix': refused(lambda: socket.socket(socket.AF_UNIX)),\n"
    "    'socketpair': refused(socket.socketpair),\n"
    "    'symlink': refused(lambda: os.symlink('target', 'link')),\n"
    "    'link': refused(lambda: os.link('plain', 'hard')),\n"
    "    'mkfifo': refused(lambda: os.mkfifo('fifo')),\n"
    "    'memfd_create': refused(lambda: os.memfd_create('x')),\n"
    "    'setaffinity_other': refused(lambda: os.sched_setaffinity(os.getppid(), os.sched_getaffinity(0))),\n"
    "    'prlimit_other': refused(lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE)),\n"
    "    'tiocsti': refused(lambda: fcntl.ioctl(0, termios.TIOCSTI, b'x')),\n"
    "    'prctl_timerslack': refused_c(libc.prctl(29, 1000, 0, 0, 0)),\n"
    "    'personality': refused_c(libc.personality(0xFFFFFFFF)),\n"
    # red team 3: metadata, locks, notices and shared futexes (channels, a hidden directory)
    "    'fchmod': refused(lambda: os.chmod(here, 0o700)),\n"
    "    'futimens': refused(lambda: os.utime(here)),\n"
    "    'mkdir_unlistable': refused(lambda: os.mkdir('hidden', 0o300)),\n"
    "    'umask_owner': refused_c(libc.syscall(95, 0o700)),\n"
    "    'f_notify': refused(lambda: fcntl.fcntl(here, 1026, 1)),\n"
    "    'lockf': refused(lambda: fcntl.lockf(plain, fcntl.LOCK_EX | fcntl.LOCK_NB)),\n"
    "    'flock': refused(lambda: fcntl.flock(plain, fcntl.LOCK_EX | fcntl.LOCK_NB)),\n"
    "    'f_setown': refused(lambda: fcntl.fcntl(plain, fcntl.F_SETOWN, os.getpid())),\n"
    "    'fadvise': refused(lambda: os.posix_fadvise(plain, 0, 0, os.POSIX_FADV_DONTNEED)),\n"
    "    'futex_shared_wake': refused_c(libc.syscall(202, ctypes.byref(word), 1, 1, 0, 0, 0)),\n"
    # red team 4: bytes with no name in its directory, the page cache as a channel
    "    'o_tmpfile': refused(lambda: os.open('.', os.O_TMPFILE | os.O_RDWR, 0o600)),\n"
    "    'fallocate_keep_size': refused_c(libc.fallocate(plain, 1, 0, 1 << 20)),\n"
    "    'fallocate': refused_c(libc.fallocate(plain, 0, 0, 1 << 20)),\n"
    "    'unlink': refused(lambda: os.unlink('plain')),\n"
    "    'rename': refused(lambda: os.rename('plain', 'moved')),\n"
    "    'rmdir': refused(lambda: (os.mkdir('empty'), os.rmdir('empty'))),\n"
    "    'preadv2_nowait': refused(lambda: os.preadv(plain, [bytearray(8)], 0, os.RWF_NOWAIT)),\n"
    "    'madvise_pageout': refused_c(libc.madvise(ctypes.c_void_p(page), 4096, 21)),\n"
    "}\n"
    # what it may do: a private futex, its own directory with the owner's rights, fcntl's basics
    "allowed = {\n"
    "    'futex_private_wake': libc.syscall(202, ctypes.byref(word), 129, 1, 0, 0, 0) == 0,\n"
    "    'mkdir': os.mkdir('mine', 0o755) is None,\n"
    "    'f_getfl': fcntl.fcntl(plain, fcntl.F_GETFL) >= 0,\n"
    "    'madvise_dontneed': libc.madvise(ctypes.c_void_p(page), 4096, 4) == 0,\n"
    "}\n"
    "if any(v is not True for v in results.values()) or not all(allowed.values()):\n"
    "    raise ValueError(f'allowed: {results} {allowed}')\n"
    "raise PermissionError(errno.EPERM, 'every probed call refused')\n"
)


@pytest.mark.skipif(
    "seccomp" not in LAYERS and not IN_CI,
    reason="pyseccomp (and libseccomp2) not installed: no seccomp filter here (CI=true never skips)",
)
def test_calls_on_no_allowlist_are_refused(job_tmp: Path) -> None:
    """Deny by default: exec, sockets of any family, links, FIFOs, memfds, another process's
    limits and CPUs, a terminal's input queue, prctl and personality options nobody listed;
    metadata, file locks, directory notices and shared futexes (red team 3: channels between
    siblings, a directory its owner may not list)."""
    error = _judge_fails(job_tmp, "sandbox_violation", ALLOWLIST_PROBE + GOOD_TAIL)
    assert "system call refused" in error.message


# -- resource exhaustion ---------------------------------------------------------------
@needs_pids_limit
@pytest.mark.slow
def test_fork_bomb(job_tmp: Path) -> None:
    source = "import os\nwhile True:\n    os.fork()\n" + GOOD_TAIL
    error = _judge_fails(job_tmp, "sandbox_violation", source)
    assert "process limit" in error.message


def test_memory_bomb(job_tmp: Path) -> None:
    source = "hog = []\nwhile True:\n    hog.append(b'x' * (64 << 20))\n" + GOOD_TAIL
    error = _judge_fails(job_tmp, "out_of_memory", source, memory_mb=1536)
    assert "memory" in error.message.lower()


@pytest.mark.slow
def test_infinite_loop_with_a_thread_ignoring_sigterm(job_tmp: Path) -> None:
    marker = f"ideabench-test-loop-{uuid.uuid4().hex}"
    source = (
        "import signal, threading\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "def spin():\n"
        "    while True:\n"
        "        pass\n"
        "threading.Thread(target=spin, daemon=False).start()\n"
        "while True:\n"
        "    pass\n" + GOOD_TAIL
    )
    error = _judge_fails(job_tmp, "timeout", source, marker, timeout_s=10.0)  # both cores spin until then
    assert "limit" in error.message


@needs_bwrap
@pytest.mark.slow
def test_double_forked_setsid_daemon_survives_nothing(job_tmp: Path) -> None:
    """A daemon (double fork, its own session) that outlives its job. It cannot exec another
    program (the allowlist refuses execve), so it names itself (PR_SET_NAME) and sleeps."""
    marker = uuid.uuid4().hex[:15]  # a thread name holds 15 characters
    source = (
        "import ctypes, os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        ctypes.CDLL(None).prctl(15, {marker.encode()!r}, 0, 0, 0)\n"
        "        while True:\n"
        "            time.sleep(1)\n"
        "    os._exit(0)\n"
        "os.wait()\n" + GOOD_TAIL
    )
    seen: list[bool] = []
    report = judge(
        JudgeRequest(track="smoke", idea_code=source, n_seeds=2, timeout_s=120),
        on_progress=lambda _: seen.append(bool(_processes_named(marker))),
    ).model_dump(mode="json")
    assert report["bench_report"]["n_seeds"] == 2
    assert any(seen), "the daemon never ran: the test proves nothing"
    deadline = time.monotonic() + 10
    while _processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_named(marker), "the daemon outlived its job"
    _assert_nothing_left(str(job_tmp))


def _processes_named(comm: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == comm:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_printing_gigabytes_hits_the_output_cap(job_tmp: Path) -> None:
    source = "import sys\nchunk = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(chunk)\n" + GOOD_TAIL
    error = _judge_fails(job_tmp, "output_limit", source)
    assert "output" in error.message


# -- crashes and invalid ideas --------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "source", "needle"),
    [
        ("crashed", "import os\nos._exit(3)\n" + GOOD_TAIL, "status 3"),
        ("crashed", "import ctypes\nctypes.string_at(0)\n" + GOOD_TAIL, "SIGSEGV"),
        ("invalid_code", "import no_such_module_xyz\n" + GOOD_TAIL, "no_such_module_xyz"),
        ("not_a_module", "def build_model(spec):\n    return 42\n", "Module"),
        (
            "too_many_parameters",
            "from torch import nn\ndef build_model(spec):\n"
            "    return nn.Sequential(nn.Linear(8, 4000), nn.Linear(4000, 1))\n",
            "param",
        ),
    ],
    ids=["os_exit", "segfault", "missing_module", "not_a_module", "too_many_parameters"],
)
def test_crashes_and_invalid_ideas(job_tmp: Path, code: str, source: str, needle: str) -> None:
    error = _judge_fails(job_tmp, code, source)
    assert needle in error.message


# -- layers and degradation ------------------------------------------------------------------
def test_isolation_layers_name_what_ran(tmp_path: Path) -> None:
    workdir = tmp_path / "job" / "idea"
    proc, fd = sandbox.launch(workdir, sandbox.Limits())
    try:
        layers = sandbox.layers_of(proc)
        assert layers == sandbox.isolation_layers()
        for layer in ("empty_env", "rlimits", "output_cap", "no_new_privs"):
            assert layer in layers
        if "namespaces" in LAYERS or IN_CI:
            assert {"namespaces", "no_network", "seccomp"} <= set(layers)
    finally:
        sandbox.kill(proc)
        os.close(fd)
    _assert_nothing_left(str(tmp_path))


def test_a_reports_isolation_is_what_every_child_of_the_job_ran_under() -> None:
    """The capture children, where submitted code runs, count as much as the trainers (a review
    found only the two trainers' layers intersected)."""
    import threading
    from types import SimpleNamespace

    from bench.execution import SandboxExecutor

    full = ["namespaces", "no_network", "empty_env", "no_new_privs", "seccomp"]
    executor = SandboxExecutor.__new__(SandboxExecutor)
    executor._children = threading.Lock()
    executor.sessions = {"idea": SimpleNamespace(layers=full), "baseline": SimpleNamespace(layers=full)}
    executor.captures = {"idea": SimpleNamespace(layers=full), "baseline": SimpleNamespace(layers=full)}
    assert executor.isolation() == full
    executor.captures["rebuild_idea"] = SimpleNamespace(layers=[x for x in full if x != "seccomp"])
    assert executor.isolation() == full[:-1]


@pytest.mark.parametrize("baseline", ["canonical", "submitted", "stored"])
def test_only_a_built_in_tracks_own_baseline_shares_its_capture_child_with_its_trainer(
        baseline: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in track's own baseline is captured and trained in one child, which sees the
    track packages (issue 26.9); a submitted baseline gets a capture child that sees none and
    a trainer of its own, and never the warm slot's baseline or measure child (they see the
    packages); a custom track's stored build (session 22) gets no capture child at all, and the
    idea's measure() of it a fresh child that sees no packages."""
    import threading
    from types import SimpleNamespace

    from bench import execution

    made: list[dict[str, object]] = []

    class Session:
        def __init__(self, arm: str, workdir: Path, *args: object, **kwargs: object) -> None:
            made.append({"dir": workdir.name, "hide_tracks": kwargs.get("hide_tracks", True),
                         "read_only": kwargs.get("read_only"), "adopted": kwargs.get("launched") is not None})
            self.proc = SimpleNamespace(poll=lambda: None)

        def wait_ready(self) -> None:
            pass

    monkeypatch.setattr(execution, "ArmSession", Session)
    dropped: list[str] = []
    slot = SimpleNamespace(launched={"idea": object(), "capture_idea": object(), "measure_baseline_1": object()},
                           drop=dropped.append, server=None)  # a slot of warm children
    executor = execution.SandboxExecutor(tmp_path, 512, 0.0, threading.Event(), 60.0,
                                         canonical_baseline=baseline == "canonical", tracks_dir=tmp_path, slot=slot,
                                         baseline_build=b"stored" if baseline == "stored" else None)  # type: ignore[arg-type]
    executor.start()
    executor.start_trainers(measured=True)
    hidden = {m["dir"]: m["hide_tracks"] for m in made}
    adopted = {m["dir"]: m["adopted"] for m in made}
    if baseline == "canonical":
        assert [m["dir"] for m in made] == ["baseline", "capture_idea", "idea", "measure_baseline_1"] and dropped == []
        assert executor.captures["baseline"] is executor.sessions["baseline"]
        assert hidden == {"baseline": False, "capture_idea": True, "idea": True, "measure_baseline_1": False}
        assert adopted["measure_baseline_1"]
    elif baseline == "submitted":
        assert [m["dir"] for m in made] == ["capture_baseline", "capture_idea", "idea", "baseline"]
        assert dropped == ["baseline", "measure_baseline_1"]
        assert executor.captures["baseline"] is not executor.sessions["baseline"]
        assert set(hidden.values()) == {True}
    else:
        assert [m["dir"] for m in made] == ["capture_idea", "idea", "baseline", "measure_baseline_1"]
        assert dropped == ["baseline", "measure_baseline_1"] and not adopted["measure_baseline_1"]
        assert set(hidden.values()) == {True}
    assert all(m["read_only"] == [] for m in made if str(m["dir"]).startswith(("capture_", "measure_")))
    assert len(executor.children()) == len(made)  # each child once


def test_full_isolation_required_refuses_without_bwrap(tmp_path: Path) -> None:
    # full isolation required overrides allow_weak
    sandbox.configure(sandbox.SandboxPolicy(bwrap="0", require_full_isolation=True, allow_weak=True))
    with pytest.raises(BenchError) as info:
        sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits())
    assert info.value.code == ErrorCode.SANDBOX_UNAVAILABLE
    assert "namespaces" in info.value.message and sandbox.REQUIRE_ENV in info.value.message
    with pytest.raises(BenchError):
        sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits(), require_full_isolation=True)
    _assert_nothing_left(str(tmp_path))


@pytest.mark.parametrize("require_full", [None, False])
def test_the_sandbox_fails_closed_without_namespaces(
    tmp_path: Path, require_full: bool | None
) -> None:
    """Issue 25.10: on a host without bubblewrap the service judged submitted code with no
    namespaces and no network isolation, one log line the only sign. Now nothing starts."""
    sandbox.configure(sandbox.SandboxPolicy(bwrap="0"))
    with pytest.raises(BenchError) as info:
        sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits(), require_full_isolation=require_full)
    assert info.value.code == ErrorCode.SANDBOX_UNAVAILABLE
    assert "namespaces, no_network" in info.value.message and sandbox.ALLOW_WEAK_ENV in info.value.hint
    found = sandbox.check(tmp_path / "check")
    assert not found.judges and found.missing == ["namespaces", "no_network"]
    assert found.describe() == "refused: missing namespaces, no_network"
    _assert_nothing_left(str(tmp_path))


def test_a_judge_without_its_sandbox_gives_no_verdict(job_tmp: Path) -> None:
    sandbox.configure(sandbox.SandboxPolicy(bwrap="0"))
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2))
    assert info.value.code == ErrorCode.SANDBOX_UNAVAILABLE
    _assert_nothing_left(str(job_tmp))


def test_degraded_launch_reports_missing_layers(tmp_path: Path) -> None:
    sandbox.configure(sandbox.SandboxPolicy(bwrap="0", allow_weak=True))  # development only
    proc, fd = sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits(), require_full_isolation=False)
    try:
        layers = sandbox.layers_of(proc)
        assert "namespaces" not in layers and "no_network" not in layers
        assert "empty_env" in layers and "no_new_privs" in layers
        assert sandbox.missing_judge_layers(layers) == ["namespaces", "no_network"]
    finally:
        sandbox.kill(proc)
        os.close(fd)
    found = sandbox.check(tmp_path / "check")
    assert found.judges and found.describe() == "weak: missing namespaces, no_network"
    _assert_nothing_left(str(tmp_path))


def test_bwrap_failing_to_start_refuses_or_degrades(tmp_path: Path) -> None:
    sandbox.configure(sandbox.SandboxPolicy(bwrap="/bin/false"))
    with pytest.raises(BenchError) as info:
        sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits())
    assert info.value.code == ErrorCode.SANDBOX_UNAVAILABLE and "bwrap failed" in info.value.message
    sandbox.configure(sandbox.SandboxPolicy(bwrap="/bin/false", allow_weak=True))
    proc, fd = sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits(), require_full_isolation=False)
    try:
        assert "namespaces" not in sandbox.layers_of(proc)
    finally:
        sandbox.kill(proc)
        os.close(fd)
    with pytest.raises(BenchError) as info:
        sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits(), require_full_isolation=True)
    assert "bwrap failed" in info.value.message
    _assert_nothing_left(str(tmp_path))


@needs_bwrap
def test_full_isolation_runs_here_when_required(tmp_path: Path) -> None:
    proc, fd = sandbox.launch(tmp_path / "job" / "idea", sandbox.Limits(), require_full_isolation=True)
    try:
        assert set(sandbox.FULL_ISOLATION) <= set(sandbox.layers_of(proc))
    finally:
        sandbox.kill(proc)
        os.close(fd)
    _assert_nothing_left(str(tmp_path))


@pytest.mark.slow
def test_worker_stays_healthy_after_hostile_jobs(job_tmp: Path) -> None:
    _judge_fails(job_tmp, "crashed", "import ctypes\nctypes.string_at(0)\n" + GOOD_TAIL)
    report = judge(JudgeRequest(track="smoke", idea_code=SMOKE["example_idea"], n_seeds=2)).model_dump(mode="json")
    assert report["bench_report"]["isolation"] == sandbox.isolation_layers()
    _assert_nothing_left(str(job_tmp))


def test_the_parent_reads_child_outputs_without_following_links(tmp_path: Path) -> None:
    """open_output: only plain files under the child's own directory, by the parent's names."""
    import os

    from bench.runner import open_output

    root = tmp_path / "idea"
    (root / "seed_1").mkdir(parents=True)
    (root / "pred_a.npy").write_bytes(b"ok")
    (root / "seed_1" / "x.npy").write_bytes(b"ok2")
    secret = tmp_path / "labels.npy"
    secret.write_bytes(b"secret")
    (root / "pred_link.npy").symlink_to(secret)
    (root / "seed_link").symlink_to(tmp_path)
    os.mkfifo(root / "pred_fifo.npy")
    with open_output(root, "pred_a.npy", "idea") as fh:
        assert fh.read() == b"ok"
    with open_output(root, "seed_1/x.npy", "track") as fh:
        assert fh.read() == b"ok2"
    for name in ("pred_link.npy", "seed_link/labels.npy", "pred_fifo.npy", "../labels.npy", str(secret), "seed_1"):
        with pytest.raises(BenchError) as exc:
            open_output(root, name, "idea").close()
        assert exc.value.code.value == "sandbox_violation", name
    with pytest.raises(BenchError) as missing:
        open_output(root, "pred_none.npy", "idea")
    assert missing.value.code.value == "crashed"


def test_a_small_npy_promising_a_huge_array_is_refused(tmp_path: Path) -> None:
    import numpy as np
    from numpy.lib import format as npy_format

    from bench.runner import load_npy

    good = tmp_path / "good.npy"
    np.save(good, np.arange(6, dtype=np.float32).reshape(3, 2))
    with open(good, "rb") as fh:
        assert load_npy(fh, "idea", "prediction file").shape == (3, 2)
    huge = tmp_path / "huge.npy"
    with open(huge, "wb") as fh:  # the header says 10^12 floats; the file holds 8 bytes
        npy_format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
        fh.write(b"\\0" * 8)
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for path in (huge, objects):
        with open(path, "rb") as fh, pytest.raises(BenchError) as exc:
            load_npy(fh, "idea", "prediction file")
        assert exc.value.code.value == "training_error"


def test_a_child_reaped_before_is_not_killed_again_by_its_number() -> None:
    """``sandbox.kill`` of a child already ended and reaped (a session closed twice: the
    confirmation closes the first capture children, the job's end closes them again) signals
    no process group by its old number, which may be another process's by then (red team)."""
    from types import SimpleNamespace

    from bench.sandbox.launcher import kill

    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)  # leads a group of its pid
    try:
        reaped = SimpleNamespace(pid=stranger.pid, returncode=0, wait=lambda timeout=None: 0, kill=lambda: None)
        kill(reaped)  # type: ignore[arg-type]
        with pytest.raises(subprocess.TimeoutExpired):  # alive: the reaped child's number was not signalled
            stranger.wait(timeout=1)
    finally:
        stranger.kill()
        stranger.wait()


# Calls no child may make, whatever the allowlist gains later: the earlier deny list, and what
# the allowlist refuses on purpose (test_calls_on_no_allowlist_are_refused probes some of them).
NEVER_ALLOWED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot", "bpf",
    "keyctl", "add_key", "request_key", "unshare", "setns", "perf_event_open", "kexec_load", "init_module",
    "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "fsopen", "fsmount", "move_mount", "open_tree", "iopl", "ioperm", "execve", "execveat",
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "link", "linkat", "symlink",
    "symlinkat", "mknod", "mknodat", "memfd_create", "personality", "unlink", "unlinkat", "rmdir", "rename",
    "renameat", "renameat2", "mincore", "fadvise64", "futex_waitv", "open", "openat", "fallocate", "preadv2",
    "pwritev2", "madvise", "flock", "shmget", "msgget", "semget", "mq_open",
    "pidfd_open", "pidfd_getfd", "kcmp", "process_madvise", "prctl", "ioctl", "clone", "clone3", "prlimit64",
    "sched_setaffinity", "setuid", "setgid", "setgroups", "capset", "chmod", "chown", "setxattr", "inotify_init1",
)


# What one sandbox shared by a fork server's children would open between siblings that a sandbox
# of their own closes (session 25's red teams; a second filter the server stacked refused them
# until every child's allowlist did): System V and POSIX IPC (a segment outlived its child and
# told a later one the confirmation's decoys), pidfds, kcmp, path metadata, xattrs, inotify.
SIBLING_CHANNELS = (
    "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    "mq_getsetattr", "pidfd_send_signal", "chmod", "fchmodat", "fchmodat2", "lchown", "fchownat", "utime",
    "utimes", "futimesat", "utimensat", "lsetxattr", "removexattr", "lremovexattr", "getxattr", "lgetxattr",
    "listxattr", "llistxattr", "fsetxattr", "inotify_init", "inotify_add_watch", "fanotify_init", "fanotify_mark",
)


def test_the_allowlist_holds_none_of_the_calls_a_sandbox_refuses() -> None:
    from bench.sandbox.guard import ALLOWED_SYSCALLS

    assert len(set(ALLOWED_SYSCALLS)) == len(ALLOWED_SYSCALLS)
    # prctl, ioctl, clone, prlimit64, open(at), fallocate, preadv2, madvise: only by argument
    assert not set(ALLOWED_SYSCALLS) & (set(NEVER_ALLOWED) | set(SIBLING_CHANNELS))
