"""Red team of the zygote's template and spares (session 38, ``bench.sandbox.zygote``): the zygote
no longer forks children; a *template* forked before any request forks a *spare* for each request
the zygote hands on, the spare reads only its own and becomes the child; the template reaps
children, reports their exits and kills one on the zygote's word. (The red team attacked a first
cut whose template kept a spare forked in advance; its two findings are fixed.)

Each test names an attack, run as a hostile submitted idea would (code a forked child executes:
here through the child's ``make_data`` command, which runs a submitted track file, so a probe
costs a fork, not a judged job) or, for the protocol between the zygote and its template, with
the zygote driven message by message. A test whose docstring starts "FINDING" fails while its hole
was open, and passes since its fix; the others show an attack the design stops.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import sandbox
from bench.sandbox import forkserver, launcher
from tests.bench.test_forkserver import needs_server
from tests.bench.test_sandbox import _assert_nothing_left
from tests.security.test_lent_server_redteam import HEAP_REGIONS

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# helpers: a server of the test's own, a hostile child's code run in a forked child
# ---------------------------------------------------------------------------------------------


def _start(tmp_path: Path) -> forkserver.ForkServer:
    server = forkserver.ForkServer.start(tmp_path / "job", sandbox.Limits(), tracks=False)
    assert server is not None
    assert server._ready.wait(forkserver.READY_TIMEOUT_S) and server.failed is None, server.failed
    return server


class _Pipe:
    """The JSON lines a child writes on its protocol pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = b""

    def next(self, timeout_s: float) -> dict[str, object] | None:
        """Its next message (None: the pipe closed, a child that killed itself)."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.pending:
            readable, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            assert readable, f"the child said nothing in {timeout_s} s"
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return dict(json.loads(line))

    def until_answer(self, timeout_s: float) -> list[dict[str, object]]:
        """Every message until the child answers its command or the pipe closes."""
        out: list[dict[str, object]] = []
        while (message := self.next(timeout_s)) is not None:
            out.append(message)
            if "ok" in message or "error" in message:
                break
        return out


def _command(proc: forkserver.ForkedProcess, pipe: _Pipe, source: str, timeout_s: float) -> list[dict[str, object]]:
    ready = pipe.next(timeout_s)
    assert ready is not None and ready.get("ready") is True, ready
    command = {"op": "make_data", "track_source": REPORT_PRELUDE + source, "items": []}
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(command) + "\n").encode())
    proc.stdin.flush()
    return pipe.until_answer(timeout_s)


def _run(server: forkserver.ForkServer, workdir: Path, source: str, *, keep: bool = False,
         timeout_s: float = 60.0) -> tuple[forkserver.ForkedProcess, dict[str, object], int | None]:
    """Fork a child in ``workdir`` and have it run ``source`` (a track file, executed by the child's
    ``make_data``). The source reports with ``report(dict)`` (a line on the protocol pipe); returns
    the child, what it reported, and (``keep``) its protocol fd, the child left running."""
    proc, fd = sandbox.launch(workdir, sandbox.Limits(), server=server)
    assert isinstance(proc, forkserver.ForkedProcess), "not forked from the server"
    try:
        said = _command(proc, _Pipe(fd), source, timeout_s)
        probes = [m["probe"] for m in said if "probe" in m]
        assert probes, f"the hostile child reported nothing: {said}"
        report = probes[0]
        assert isinstance(report, dict)
    except BaseException:
        sandbox.kill(proc)
        os.close(fd)
        raise
    if keep:
        return proc, report, fd
    sandbox.kill(proc)
    os.close(fd)
    return proc, report, None


REPORT_PRELUDE = r'''
import ctypes, errno, json, os, signal, struct, time
libc = ctypes.CDLL(None, use_errno=True)
def report(value):
    os.write(3, (json.dumps({"probe": value}) + "\n").encode())  # the protocol pipe, at fd 3
def errname(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno))
'''


def _status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _server_processes(server: forkserver.ForkServer) -> dict[str, list[tuple[int, int]]]:
    """The processes of the server's cgroup by role, as (host pid, pid in the sandbox): its
    bubblewrap, bubblewrap's init, the zygote, the template, the spares."""
    assert server.proc is not None
    group = launcher.cgroup_of(server.proc)
    assert group is not None
    table: dict[int, tuple[int, int, str]] = {}
    for pid in group.pids_in():
        try:
            status = _status(pid)
        except OSError:
            continue
        ns = status["NSpid"].split()
        table[pid] = (int(ns[-1]) if len(ns) > 1 else 0, int(status["PPid"]), status["State"])
    roles: dict[str, list[tuple[int, int]]] = {"bwrap": [], "init": [], "zygote": [], "template": [], "spare": [],
                                               "other": []}
    by_role: dict[int, str] = {}
    for pid, (ns, _, _) in table.items():
        if ns == 0:
            by_role[pid] = "bwrap"
        elif ns == 1:
            by_role[pid] = "init"
    for _ in range(3):  # the zygote is init's child, the template the zygote's, the spares the template's
        for pid, (_, ppid, _) in table.items():
            if pid in by_role:
                continue
            parent = by_role.get(ppid)
            if parent in ("init", "zygote", "template"):
                by_role[pid] = {"init": "zygote", "zygote": "template", "template": "spare"}[parent]
    for pid, (ns, _, _) in table.items():
        roles[by_role.get(pid, "other")].append((pid, ns))
    return roles


def _settled(server: forkserver.ForkServer, timeout_s: float = 10.0) -> dict[str, list[tuple[int, int]]]:
    """The server's processes between requests: no spare (the template forks one for each request,
    and its child is moved to a cgroup of its own before it runs anything)."""
    deadline = time.monotonic() + timeout_s
    while True:
        roles = _server_processes(server)
        if not roles["spare"] or time.monotonic() > deadline:
            return roles
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# FINDINGS
# ---------------------------------------------------------------------------------------------

ZYGOTE_ALONE = r'''
import os, sys, types
entry = types.ModuleType("bench.child")  # nothing to import and warm: the protocol alone
entry.prepare = lambda: None
entry.started = lambda: None
sys.modules["bench.child"] = entry
from bench.sandbox import zygote
os.fork = lambda: 4242  # the template is the test's: it speaks the template's and the spares' part
zygote.main()
'''
PID = struct.Struct("=i")
EXIT = struct.Struct("=ii")


def test_the_zygote_reports_an_earlier_childs_exit_before_it_answers_a_fork_that_reused_its_pid(tmp_path: Path) -> None:
    """FINDING (low, fixed: integrity of one job's children; needs the sandbox's PID counter wrapped): the
    zygote reads one of the template's exit reports per turn of its loop, then one of the parent's
    requests, and its bookkeeping (``children``) is by pid. A spare forked after the template reaped
    a child may take that child's pid (the server's PID namespace is shared: a hostile child advances
    its counter with threads, 5,000-7,000 a second measured here, ``pid_max`` 4,194,304 in the
    sandbox, and the counter persists across every job of a lent server). When two children end at
    once (a hostile idea's two children exit together) while the zygote does not run (a busy host:
    here a SIGSTOP stands for it), the zygote takes the first report, hands the parent's next request
    to the spare that reused the second one's pid, answers ``forked`` for it, and only then reads the
    stale report: it says ``{"exited": pid}`` with the dead child's status for the new child. The
    parent then marks the new child ended while it runs (its job reads a crash of the exit status
    the hostile child chose), keeps the old handle in ``_retired`` with no exit ever to come, and the
    old handle's ``kill`` (``launcher.kill``: ``proc.kill`` while ``returncode`` is None) goes as
    ``{"kill": pid}``: the template kills the new child's process group (it is unreaped and not the
    spare). Fixed: the zygote forwards every report queued before it reads a request, and once the
    spare's pid came, every report already queued before it announces it (the template sends a
    child's exit before it forks a spare that may reuse the pid, so that exit is queued by then)."""
    sock, sock_z = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    spares_z, spares_t = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    report_z, report_t = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ends = [sock_z, spares_z, spares_t, report_z, report_t]
    fds = [end.fileno() for end in ends]
    proc = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE_ALONE, ",".join(map(str, fds))], pass_fds=fds, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")},
    )
    for end in (sock_z, spares_z, report_z):
        end.close()
    sock.settimeout(30)
    spares_t.settimeout(10)
    said: list[dict[str, object]] = []

    def message() -> dict[str, object]:
        data = sock.recv(1 << 16)
        assert data, f"the zygote ended: {said}"
        said.append(json.loads(data))
        return said[-1]

    def fork(nonce: str) -> None:
        r, w = os.pipe()
        try:
            socket.send_fds(sock, [json.dumps({"fork": {}, "nonce": nonce}).encode()], [r, w, w])
        finally:
            os.close(r)
            os.close(w)

    def spare_takes(pid: int) -> None:  # the waiting spare: its request, then its pid to the zygote
        data, got, _, _ = socket.recv_fds(spares_t, 1 << 16, 3)
        for fd in got:
            os.close(fd)
        assert b'"fork"' in data
        spares_t.send(PID.pack(pid))

    try:
        assert message().get("ready") is True, said
        for nonce, pid in (("hostile-1", 100), ("hostile-2", 101), ("trainer", 102)):
            fork(nonce)
            spare_takes(pid)
            assert message() == {"forked": pid, "nonce": nonce}
        time.sleep(0.2)  # the zygote waits in select
        os.kill(proc.pid, signal.SIGSTOP)  # ... and does not run for a moment (a busy host)
        try:
            report_t.send(EXIT.pack(101, 0))  # the template reaped both hostile children at once,
            report_t.send(EXIT.pack(100, 42))  # reported them, and forked a spare that got pid 100
            fork("next")  # the parent's next child (it had its answer for the trainer)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        spare_takes(100)
        deadline = time.monotonic() + 2
        sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                message()
            except TimeoutError:
                pass
        forked = said.index({"forked": 100, "nonce": "next"})
        stale = [i for i, m in enumerate(said) if m.get("exited") == 100]
        assert stale and all(i < forked for i in stale), (
            f"the zygote reported the dead child 100's exit (status 42) as the new child 100's: {said}")
    finally:
        proc.kill()
        proc.wait(10)
        for end in (sock, spares_t, report_t):
            end.close()


AGE = r'''
fields = open("/proc/self/stat").read().rpartition(")")[2].split()
started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # its start, in seconds since boot
report({"age": time.clock_gettime(time.CLOCK_BOOTTIME) - started})
'''


@needs_server
def test_a_forked_childs_start_time_tells_nothing_of_the_previous_fork(tmp_path: Path) -> None:
    """FINDING (low, fixed: timing of another job): a child's process was its spare, forked when the
    previous request was taken, so its own start time (``/proc/self/stat`` field 22, its own entry,
    allowed; with ``CLOCK_BOOTTIME``, which seccomp allows) is the time the server forked the
    previous child: another job's last child for a job's first one (a lent server), and for a warm
    slot's children, forked when the previous job ended, when that job's last child started. Here a
    child forked 3 s after the previous one reads that it is 3 s old, before any of its own work.
    Combined with the job's own start, it tells how long the previous submitter's job ran after its
    last fork (what the session-30 red team read from the server's reaped CPU). Fixed: the template
    forks a spare when a request comes (the zygote's ``FORK`` word)."""
    server = _start(tmp_path)
    try:
        _run(server, tmp_path / "job" / "earlier-job" / "idea", "report({})")  # another job's last child
        time.sleep(4)  # the previous fork, 4 s before: a child that started then reads 4 s
        _, seen, _ = _run(server, tmp_path / "job" / "later-job" / "idea", AGE)
        assert float(seen["age"]) < 2.0, (  # its own start (and a loaded host's) only
            f"a child reads its process is {seen['age']:.2f} s old: the previous fork's time")
    finally:
        server.close()
    _assert_nothing_left(str(tmp_path))


# ---------------------------------------------------------------------------------------------
# Attacks the design stops
# ---------------------------------------------------------------------------------------------

LINEAGE = r'''
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        pass  # the listing's own descriptor
report({"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "sid": os.getsid(0), "fds": fds,
        "cgroup": open("/proc/self/cgroup").read(), "cwd": os.getcwd()})
'''


@needs_server
def test_a_spares_child_holds_only_its_own_descriptors_and_runs_in_its_own_cgroup(tmp_path: Path) -> None:
    """What a child holds when its submitted code runs, against the old zygote-forked child: no
    descriptor of the server's (the zygote's socket, the spare socket, the template's report socket
    and its ``taken`` pipe, its signal wake-up pipe): only its stdin and protocol pipes and files in
    its own directory; it already runs in a cgroup of its own (the parent moved it before the first
    command), in a session and group of its own; its parent is the template, never the zygote. No
    spare waits between requests (one that waited would read the next request)."""
    server = _start(tmp_path)
    try:
        for n in range(3):
            roles = _settled(server)
            assert [len(roles[r]) for r in ("bwrap", "init", "zygote", "template", "spare", "other")] == [1, 1, 1, 1, 0, 0], roles
            (template_host, template_ns), = roles["template"]
            workdir = (tmp_path / "job" / f"job-{n}" / "idea").resolve()
            proc, seen, fd = _run(server, workdir, LINEAGE, keep=True)
            state = proc.sandbox_state
            own_group = {d.name for d in state.cgroup.dirs}  # type: ignore[attr-defined]
            sandbox.kill(proc)
            assert fd is not None
            os.close(fd)
            assert proc.ns_pid == seen["pid"]  # the spare became it
            assert seen["ppid"] == template_ns and seen["pgid"] == seen["sid"] == seen["pid"]
            fds = dict(seen["fds"])  # type: ignore[arg-type]
            assert {"0", "1", "2", "3"} <= set(fds), fds
            assert fds["0"].startswith("pipe:") and fds["3"].startswith("pipe:"), fds
            foreign = {fd: target for fd, target in fds.items()
                       if fd not in ("0", "3") and not target.startswith(str(workdir) + "/")}
            assert foreign == {}, f"descriptors not the child's own: {foreign}"
            assert server.proc is not None
            server_group = launcher.cgroup_of(server.proc)
            assert server_group is not None and own_group
            named = {line.rsplit("/", 1)[-1] for line in str(seen["cgroup"]).splitlines() if "ideabench" in line}
            assert named and named <= own_group and not named & {d.name for d in server_group.dirs}, (named, own_group)
        roles = _settled(server)
        assert not roles["spare"] and not roles["other"], roles
    finally:
        server.close()
    _assert_nothing_left(str(tmp_path))


REACH = r'''
own = os.getpid()
ptrace, pidfd_open, process_vm_readv, kcmp = 101, 434, 310, 312
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
local = IoVec(ctypes.cast(buf, ctypes.c_void_p), 8)
remote = IoVec(0x400000, 8)
def call(*args):
    if libc.syscall(*args) == -1:
        raise OSError(ctypes.get_errno(), "refused")
attempts = {
    "signal0": lambda pid: os.kill(pid, 0),
    "sigstop": lambda pid: os.kill(pid, signal.SIGSTOP),
    "stat": lambda pid: open(f"/proc/{pid}/stat").read(),
    "mem": lambda pid: open(f"/proc/{pid}/mem", "rb"),
    "fd_dir": lambda pid: os.listdir(f"/proc/{pid}/fd"),
    "pidfd_open": lambda pid: call(pidfd_open, pid, 0),
    "ptrace_seize": lambda pid: call(ptrace, 0x4206, pid, 0, 0),
    "process_vm_readv": lambda pid: call(process_vm_readv, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0),
    "kcmp": lambda pid: call(kcmp, own, pid, 0, 0, 0),
    "join_its_group": lambda pid: os.setpgid(0, pid),
}
reached = {}
for name, attempt in attempts.items():
    for pid in range(1, own + 64):  # init, the zygote, the template, the next children's, beyond
        if pid == own:
            continue
        try:
            attempt(pid)
            reached.setdefault(name, []).append(pid)
        except OSError:
            pass
report({"reached": reached, "pid": own, "ppid": os.getppid()})
# then a grandchild stops and continues its parent (the template's child) 2,000 times (a SIGCHLD to
# the template each), and signals every process it may: SIGSTOP, then SIGKILL (kill(-1): every
# process but itself that the signal reaches)
if os.fork() == 0:
    parent = os.getppid()
    for _ in range(2000):
        os.kill(parent, signal.SIGSTOP)
        os.kill(parent, signal.SIGCONT)
    try:
        os.kill(-1, signal.SIGSTOP)
        os.kill(-1, signal.SIGKILL)
    finally:
        os._exit(0)
time.sleep(60)
'''


@needs_server
def test_a_child_reaches_neither_the_spare_nor_the_template_nor_the_zygote(tmp_path: Path) -> None:
    """A hostile child goes for the processes of the server beside it, by pid (all are guessable: the
    next job's child will be a pid just above its own, the template is its parent): signals,
    ``/proc/<pid>``, pidfds, ptrace, ``process_vm_readv``, ``kcmp``, joining a process group; then a
    grandchild floods the template with SIGCHLDs (stop/continue of its child) and sends SIGSTOP and
    SIGKILL to every process it may (``kill(-1)``). It reaches none of them (Landlock's scopes and
    ``/proc`` rule, seccomp); none is stopped or killed, and the server goes on serving (the next
    child a pid the hostile one tried)."""
    server = _start(tmp_path)
    try:
        before = _settled(server)
        proc, seen, fd = _run(server, tmp_path / "job" / "hostile" / "idea", REACH, keep=True)
        assert fd is not None
        try:
            assert seen["reached"] == {}, f"the hostile child reached: {seen['reached']}"
            assert proc.wait(timeout=30) == -signal.SIGKILL  # its grandchild killed it: its own domain only
        finally:
            sandbox.kill(proc)
            os.close(fd)
        after = _settled(server)
        for role in ("bwrap", "init", "zygote", "template"):
            assert after[role] == before[role], (role, before, after)
        assert not after["spare"] and not after["other"], after
        for pid, _ in [p for r in ("zygote", "template") for p in after[r]]:
            assert not _status(pid)["State"].startswith("T"), f"a server process is stopped: {pid}"
        assert server.alive
        _, following, _ = _run(server, tmp_path / "job" / "next" / "idea", "report({'pid': os.getpid()})", timeout_s=15)
        assert seen["pid"] < following["pid"] < seen["pid"] + 64  # the next child: a pid the hostile one tried
    finally:
        server.close()
    _assert_nothing_left(str(tmp_path))


EXIT_CHOSEN = r'''
os._exit(165)  # a status of its choosing: one byte for whoever reads the template's memory
'''
SCAN_EXITS = HEAP_REGIONS + r'''
import re
hits = []
for lo, data in heap_regions():  # the template's memory, inherited through the spare
    for m in re.finditer(b"\xa5\x00\x00\x00", data):  # the status; the pid before it
        at = m.start() - 4
        if at >= 0 and (lo + at) % 16 == 0:  # where a bytes object's data lies
            (pid,) = struct.unpack_from("=i", data, at)
            if 2 <= pid < 1000:
                hits.append([lo + at, pid])
report({"hits": hits})
'''


@needs_server
def test_a_dead_childs_exit_status_does_not_reach_a_later_childs_memory(tmp_path: Path) -> None:
    """The template's heap is every later child's: it reaps children and packs each one's exit
    status (``EXIT.pack(pid, status)``) for the zygote. A hostile child exits with a status of its
    choosing (a byte for a later job's child to read, a channel between jobs); the later children,
    forked from spares forked after it was reaped, scan their memory for its (pid, status) record.
    None finds it (the template's buffers are reused at once); nor does a child's heap hold the
    record before (the control)."""
    server = _start(tmp_path)
    try:
        _, control, _ = _run(server, tmp_path / "job" / "control" / "idea", SCAN_EXITS)
        baseline = {(at, pid) for at, pid in control["hits"]}  # type: ignore[union-attr]
        proc, fd = sandbox.launch(tmp_path / "job" / "sender" / "idea", sandbox.Limits(), server=server)
        assert isinstance(proc, forkserver.ForkedProcess)
        try:
            _command(proc, _Pipe(fd), EXIT_CHOSEN, 30)
            assert proc.wait(timeout=30) == 165
        finally:
            sandbox.kill(proc)
            os.close(fd)
        for n in range(2):  # the first spare was forked before the sender ended, the second after
            _, seen, _ = _run(server, tmp_path / "job" / f"reader-{n}" / "idea", SCAN_EXITS)
            found = [[at, pid] for at, pid in seen["hits"] if pid == proc.ns_pid and (at, pid) not in baseline]  # type: ignore[union-attr]
            assert found == [], f"a later child read the sender's exit status in its memory at {found}"
    finally:
        server.close()
    _assert_nothing_left(str(tmp_path))


@needs_server
def test_kill_words_reach_only_an_unreaped_child_never_the_spare_or_the_servers_processes(tmp_path: Path) -> None:
    """The zygote's kill is by pid: asked to kill the template,
    the zygote, bubblewrap's init, a child already reaped (its pid free for another process), or a
    pid no one has, the zygote and the template kill nothing; a live child beside them runs on."""
    server = _start(tmp_path)
    try:
        ended, _, _ = _run(server, tmp_path / "job" / "ended" / "idea", "report({})")
        assert ended.returncode is not None
        live, _, fd = _run(server, tmp_path / "job" / "live" / "idea", "report({})", keep=True)
        assert fd is not None
        try:
            before = _settled(server)
            targets = [ns for role in ("init", "zygote", "template") for _, ns in before[role]]
            for ns_pid in [*targets, ended.ns_pid, live.ns_pid + 50]:
                server.kill_child(ns_pid)
            time.sleep(1)
            after = _settled(server)
            assert {r: after[r] for r in ("init", "zygote", "template")} == {
                r: before[r] for r in ("init", "zygote", "template")}, (before, after)
            assert live.poll() is None and server.alive
            with pytest.raises(subprocess.TimeoutExpired):
                live.wait(timeout=0.5)
            live.kill()  # and its own kill still works
            assert live.wait(timeout=10) == -signal.SIGKILL
        finally:
            sandbox.kill(live)
            os.close(fd)
    finally:
        server.close()
    _assert_nothing_left(str(tmp_path))


@needs_server
@pytest.mark.parametrize("lost", ["template", "zygote"])
def test_a_server_whose_template_or_zygote_dies_retires_and_its_children_with_it(tmp_path: Path, lost: str) -> None:
    """Should a child ever exhaust or kill the template (or the zygote), the server must fail closed:
    no later child forked by anything else, the live children gone, the server retired (the next
    job's children start fresh or from a new server). Here the host kills the template, or the
    zygote, while a child of a job runs."""
    server = _start(tmp_path)
    try:
        live, _, fd = _run(server, tmp_path / "job" / "live" / "idea", "report({})", keep=True)
        assert fd is not None
        try:
            roles = _settled(server)
            os.kill(roles[lost][0][0], signal.SIGKILL)
            assert live.wait(timeout=30) < 0  # the child died with its server
            deadline = time.monotonic() + 30
            while server.alive and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not server.alive and server.failed, "the server went on without its template"
            assert not server.serves((tmp_path / "job" / "next" / "idea").resolve(), [], True)
        finally:
            sandbox.kill(live)
            os.close(fd)
    finally:
        server.close()
    _assert_nothing_left(str(tmp_path))
