"""The fork server's side inside the sandbox: prepare once, then fork children on request.

Started by ``bench.sandbox.forkserver`` as the bootstrap's entry (``python -m bench.sandbox
... bench.sandbox.zygote``), so it runs with every layer a sandboxed child has (namespaces, an
empty environment, rlimits, no_new_privs, seccomp, a cgroup). It imports the program its
children run (``launcher.CHILD_ENTRY``) and calls its ``prepare()`` (torch, torch.export warmed),
then serves one request at a time on its socket (a ``SOCK_SEQPACKET`` pair; one JSON object
per packet):

- ``{"fork": {...}}`` with three descriptors (the child's stdin, its protocol pipe, its boot
  log): fork a child that restricts itself with Landlock to its own view, sets its rlimits and
  runs the entry's ``main()``; answered ``{"forked": pid, "nonce": ...}`` (its pid in the
  sandbox, the request's nonce) or ``{"error": ..., "nonce": ...}``;
- ``{"kill": pid}``: SIGKILL the process group of a child not yet reaped (no answer);
- ``{"exited": pid, "returncode": rc}`` is sent when a child it forked ends (``rc < 0``: killed
  by a signal); nothing for any other process it reaps.

It never runs submitted code and never reads a child's commands (they go straight from the
parent to the child's stdin); a child holds none of its descriptors. A child that cannot
restrict itself exits (status ``RESTRICT_FAILED``) before it runs anything: fail closed.

**No child inherits another's request.** The zygote parses every request (its heap keeps the
freed strings: every job's directory), so no child is forked from it. Once prepared, and before
any request, it forks a *template* (``_template``), which never reads a request. For each request
the zygote puts the request's packet and descriptors, as they came, on the spare socket and tells
the template ``FORK``; the template forks a *spare*, which reads the request (only its own), sends
the zygote its pid and becomes the child. The template reaps its children and reports their exits
to the zygote, and kills one on its word (only a child it has not reaped: its pid is no one
else's); what the template's heap holds is pids. A red team read earlier jobs' directory names
from a forked child's own heap (session 37); a second (session 38) read, from the start time of
a spare forked in advance, when the previous child had been forked, and had an earlier child's
exit, reported late, taken for a new child's that reused its pid: a spare is forked at its
request, and the exits reported before a spare's fork are forwarded before its pid is taken.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import traceback
from typing import Any

from bench.sandbox import landlock
from bench.sandbox.launcher import CHILD_ENTRY

MAX_PACKET = 1 << 16
RESTRICT_FAILED = 71  # the child's exit status when Landlock, rlimits or its descriptors failed
PROTO_FD = 3  # the child's protocol pipe, at a fixed number
SPARE_WAIT_S = 20.0  # the spare's pid, once handed a request (below the parent's FORK_TIMEOUT_S)
PID = struct.Struct("=i")  # the zygote's words to the template (a pid to kill, or FORK) and a spare's
FORK = 0  # the zygote's word: fork a spare for the request waiting (no child's pid is 0)
EXIT = struct.Struct("=ii")  # the template's report: a child's pid and its exit status


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _prctl_deathsig() -> None:
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "PR_SET_PDEATHSIG failed")


def _spare(template: int, requests: socket.socket, others: list[socket.socket]) -> None:
    """In a spare, forked by the template for one request: read it on ``requests``, send its pid
    to the zygote there, become that child; never returns."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()  # its own process group from the start: a kill reaches what it forks
        _prctl_deathsig()
        if os.getppid() != template:
            raise RuntimeError("the template ended before its spare was ready")
        for other in others:
            other.detach()  # left to the child's closerange: the objects close nothing later
        data, fds, _, _ = socket.recv_fds(requests, MAX_PACKET, 3)
        if not data:
            os._exit(0)  # the zygote is gone
        requests.send(PID.pack(os.getpid()))
        requests.detach()
        if len(fds) != 3:
            raise ValueError(f"a fork needs 3 descriptors, got {len(fds)}")
        spec = json.loads(data)["fork"]
    except BaseException:  # noqa: BLE001 - nothing ran: say why in the server's log and stop
        try:
            os.write(2, traceback.format_exc().encode(errors="replace"))
        finally:
            os._exit(RESTRICT_FAILED)
    _become_child(fds, spec)


def _become_child(fds: list[int], spec: dict[str, Any]) -> None:
    """In a spare that took its request: take the child's descriptors, drop every other, restrict,
    run the entry's ``main``; never returns."""
    try:
        stdin, proto, log = fds
        os.dup2(stdin, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(proto, PROTO_FD)
        os.closerange(PROTO_FD + 1, 1 << 16)  # the server's, the received originals, any other
        for which, soft, hard in spec["rlimits"]:  # limits.rlimits, as a fresh child's
            resource.setrlimit(which, (soft, hard))
        workdir = spec["workdir"]
        os.chdir(workdir)
        os.environ.update(HOME=workdir, TMPDIR=workdir)  # as a fresh child's (launcher._child_env)
        import tempfile

        tempfile.tempdir = workdir  # named, not probed: a probe unlinks a file (bench.sandbox.guard)
        landlock.restrict(spec["read"], [workdir], ["/dev/null"])
    except BaseException:  # noqa: BLE001 - nothing ran: say why in the boot log and stop
        try:
            os.write(2, traceback.format_exc().encode(errors="replace"))
        finally:
            os._exit(RESTRICT_FAILED)
    status = 0
    try:
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the child's own stdin
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.argv = [CHILD_ENTRY, str(PROTO_FD)]
        importlib.import_module(CHILD_ENTRY).main()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends Python: status 1
        traceback.print_exc()
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(status & 0xFF)


def _template(report: socket.socket, requests: socket.socket) -> None:
    """In the template, forked by the zygote before any request: on the zygote's ``FORK`` word
    fork a spare that takes the request waiting on ``requests``; reap every child and report its
    exit on ``report``; kill one on the zygote's word (a pid); never returns. Ends (and its
    children with it) when the zygote does."""
    try:
        _prctl_deathsig()
        if os.getppid() == 1:
            raise RuntimeError("the zygote ended before its template was ready")
        me = os.getpid()
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_w)
        children: set[int] = set()  # forked and not yet reaped
        while True:
            try:
                readable, _, _ = select.select([report.fileno(), wake_r], [], [])
            except InterruptedError:
                continue
            if wake_r in readable:  # first: an exit is reported before a fork that may reuse its pid
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    if pid in children:  # a process a child made its sibling (CLONE_PARENT) is no child of ours
                        children.discard(pid)
                        report.send(EXIT.pack(pid, os.waitstatus_to_exitcode(status)))
            if report.fileno() in readable:
                word = report.recv(64)
                if not word:
                    os._exit(0)  # the zygote is gone
                (pid,) = PID.unpack(word[: PID.size])
                if pid == FORK:  # the spare is forked now, for the request waiting: its start time is the request's
                    spare = os.fork()
                    if spare == 0:
                        _spare(me, requests, [report])
                    children.add(spare)
                elif pid in children:  # not reaped: its pid is no one else's
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
    except BaseException:  # noqa: BLE001 - the zygote sees its socket close and ends the server
        try:
            os.write(2, traceback.format_exc().encode(errors="replace"))
        finally:
            os._exit(1)


def _hand_on(spares: socket.socket, report: socket.socket, data: bytes, fds: list[int]) -> int:
    """Have the template fork a spare for a request and give it the request; the spare's pid once
    it took it (OSError: none did in time)."""
    socket.send_fds(spares, [data], fds)
    report.send(PID.pack(FORK))
    spares.settimeout(SPARE_WAIT_S)
    try:
        word = spares.recv(64)
    except TimeoutError as exc:
        raise OSError("no spare took the request in time") from exc
    if len(word) != PID.size:
        raise OSError("the spare socket closed")
    return int(PID.unpack(word)[0])


def _forward_exits(report: socket.socket, sock: socket.socket, children: set[int], *, wait: bool,
                   new: int | None = None) -> tuple[bool, int | None]:
    """Send the parent the exits the template reported of children it was told of (every report
    queued; with ``wait``, at least one). ``new``: the pid of a spare not yet announced, whose own
    exit may be queued behind that of an earlier child with the same pid; that exit is returned,
    to be sent after the spare's ``forked``. False once the template is gone (and every child with it)."""
    flags = 0 if wait else socket.MSG_DONTWAIT
    early = None
    while True:
        try:
            word = report.recv(64, flags)
        except BlockingIOError:
            return True, early
        if len(word) != EXIT.size:
            return False, early
        pid, returncode = EXIT.unpack(word)
        if pid in children:  # an earlier child's (reaped before the spare was forked, if its pid is new's)
            children.discard(pid)
            _send(sock, {"exited": pid, "returncode": returncode})
        elif pid == new:
            early = returncode
        flags = socket.MSG_DONTWAIT


def main() -> None:
    """Prepare, fork the template, then serve fork requests until the parent closes the socket."""
    fds = [int(fd) for fd in sys.argv[1].split(",")]  # the parent's, then two pairs (launcher._start)
    sock = socket.socket(fileno=fds[0])
    spares, spares_t, report, report_t = (socket.socket(fileno=fd) for fd in fds[1:5])
    try:
        entry = importlib.import_module(CHILD_ENTRY)
        entry.prepare()
        # every object made so far (torch's modules, the warm-up's caches) frozen: a forked
        # child's first full collection walked them all, about 0.25 CPU-s of a trainer's first
        # compute count (bench.child.started)
        entry.started()
        threads = _threads()
        if threads != 1:  # fork copies one thread: a second one's locks would stay held in the child
            raise RuntimeError(f"the server runs {threads} threads after prepare(); a fork needs one")
        if os.fork() == 0:  # the template: no request has been read yet
            for own in (sock, spares, report):
                own.close()
            _template(report_t, spares_t)
        spares_t.close()
        report_t.close()
        ready: dict[str, Any] = {"ready": True, "landlock_abi": landlock.abi()}
    except Exception as exc:  # noqa: BLE001 - reported: the parent starts children the usual way
        ready = {"error": f"{type(exc).__name__}: {exc}"}
    _send(sock, ready)
    if "error" in ready:
        return
    children: set[int] = set()  # handed a request, and not yet reported ended
    while True:
        try:
            readable, _, _ = select.select([sock.fileno(), report.fileno()], [], [])
        except InterruptedError:
            continue
        if report.fileno() in readable and not _forward_exits(report, sock, children, wait=True)[0]:
            return  # the template is gone, and every child with it: so is the server
        if sock.fileno() not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, 3)
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            return
        if not data:
            return  # the parent closed its end: the job is over
        request: Any = None
        try:
            request = json.loads(data)
            if "kill" in request:  # the template kills only a child it has not reaped
                for fd in fds:
                    os.close(fd)
                pid = int(request["kill"])
                if pid in children:
                    report.send(PID.pack(pid))
                continue
            nonce = request["nonce"]
            if not isinstance(request["fork"], dict) or len(fds) != 3:
                raise ValueError(f"a fork needs a spec and 3 descriptors, got {len(fds)}")
        except Exception as exc:  # noqa: BLE001 - answered; the parent starts it the usual way
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": f"{type(exc).__name__}: {exc}", "nonce": request.get("nonce") if isinstance(request, dict) else None})
            continue
        try:
            pid = _hand_on(spares, report, data, fds)
        except OSError as exc:
            # a spare that took it late would answer the next request's: serve no more
            _send(sock, {"error": f"{type(exc).__name__}: {exc}", "nonce": nonce})
            return
        finally:
            for fd in fds:
                os.close(fd)
        # the exits the template reported before it forked this spare first: one of them may be
        # of an earlier child whose pid the spare reuses (red team, session 38)
        alive, early = _forward_exits(report, sock, children, wait=False, new=pid)
        if not alive:
            return
        _send(sock, {"forked": pid, "nonce": nonce})
        if early is None:
            children.add(pid)
        else:  # it ended already (a restriction that failed)
            _send(sock, {"exited": pid, "returncode": early})
