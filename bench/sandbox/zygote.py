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
import sys
import traceback
from typing import Any

from bench.sandbox import landlock
from bench.sandbox.launcher import CHILD_ENTRY

MAX_PACKET = 1 << 16
RESTRICT_FAILED = 71  # the child's exit status when Landlock, rlimits or its descriptors failed
PROTO_FD = 3  # the child's protocol pipe, at a fixed number


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _become_child(sock: socket.socket, wake: tuple[int, int], fds: list[int], spec: dict[str, Any]) -> None:
    """In the forked process: drop the server's descriptors, take the child's, restrict, run the
    entry's ``main``; never returns."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), "PR_SET_PDEATHSIG failed")
        os.close(sock.detach())  # the object closes nothing later (its number is another file's then)
        for fd in wake:
            os.close(fd)
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


def _reap(sock: socket.socket, children: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:  # a process a child made its sibling (CLONE_PARENT) is no child of ours
            children.discard(pid)
            _send(sock, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _kill(pid: int, children: set[int]) -> None:
    if pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main() -> None:
    """Prepare, then serve fork requests until the parent closes the socket."""
    sock = socket.socket(fileno=int(sys.argv[1]))
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
        ready: dict[str, Any] = {"ready": True, "landlock_abi": landlock.abi()}
    except Exception as exc:  # noqa: BLE001 - reported: the parent starts children the usual way
        ready = {"error": f"{type(exc).__name__}: {exc}"}
    _send(sock, ready)
    if "error" in ready:
        return
    children: set[int] = set()  # forked and not yet reaped
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    while True:
        try:
            readable, _, _ = select.select([sock.fileno(), wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            _reap(sock, children)
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
        try:
            request = json.loads(data)
            if "kill" in request:  # only a child not yet reaped: its pid is no one else's
                for fd in fds:
                    os.close(fd)
                _kill(int(request["kill"]), children)
                continue
            spec, nonce = request["fork"], request["nonce"]
            if len(fds) != 3:
                raise ValueError(f"a fork needs 3 descriptors, got {len(fds)}")
            pid = os.fork()
        except Exception as exc:  # noqa: BLE001 - answered; the parent starts it the usual way
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": f"{type(exc).__name__}: {exc}", "nonce": request.get("nonce") if isinstance(request, dict) else None})
            continue
        if pid == 0:
            _become_child(sock, (wake_r, wake_w), fds, spec)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        _send(sock, {"forked": pid, "nonce": nonce})
