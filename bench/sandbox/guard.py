"""The child's side of the sandbox: no_new_privs and seccomp, then ``bench.child``.

``python -m bench.sandbox PROTO_FD STATUS_FD WORKDIR ENTRY`` runs ``bootstrap``; it
reports the layers it set on STATUS_FD for the parent to check, then runs the module ``ENTRY``'s
``main`` (the launcher's caller names it: the sandbox imports nothing of the program it runs). ``violation``
tells the child which of its errors were the sandbox refusing something.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

_DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount", "umount2", "pivot_root",
    "chroot", "bpf", "keyctl", "add_key", "request_key", "unshare", "setns", "perf_event_open",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "userfaultfd", "swapon", "swapoff", "reboot",
    "sethostname", "setdomainname", "acct", "syslog", "quotactl", "lookup_dcookie", "vhangup",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "fsopen", "fsmount", "fsconfig",
    "fspick", "move_mount", "open_tree", "mount_setattr", "iopl", "ioperm",
)
_CLONE_NEW_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)


def _set_no_new_privs() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _install_seccomp() -> None:
    import socket

    import pyseccomp as seccomp

    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    eperm = seccomp.ERRNO(errno.EPERM)
    for name in _DENIED_SYSCALLS:
        try:
            flt.add_rule(eperm, name)
        except (OSError, ValueError, RuntimeError):
            pass  # not a syscall on this architecture
    for name in ("socket", "socketpair"):
        flt.add_rule(eperm, name, seccomp.Arg(0, seccomp.NE, socket.AF_UNIX))
    for flag in _CLONE_NEW_FLAGS:
        flt.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    try:  # clone3 passes its flags in memory: make libc fall back to clone
        flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    except (OSError, ValueError, RuntimeError):
        pass
    flt.load()


# What one sandbox shared by a fork server's children (bench.sandbox.zygote) would open between
# siblings that a sandbox of their own closes: every socket (the pair the server was given is
# made already; a child needs none), System V and POSIX IPC (one IPC namespace: a segment
# outlived its child and told a later one the confirmation's decoys, red team), pidfds and
# kcmp (one PID namespace; Landlock refuses ptrace-like access, this refuses the calls), and
# clone(CLONE_PARENT) (a process the server would reap and report as a child it never forked).
CLONE_PARENT = 0x00008000
SIBLING_DENIED = (
    "socket", "socketpair", "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl",
    "semget", "semop", "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend",
    "mq_timedreceive", "mq_notify", "mq_getsetattr", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "kcmp", "process_madvise",
    # Landlock does not mediate metadata: a chmod of a sibling's directory crashed the track's own
    # baseline child; xattrs, times and inotify were a channel (red team 2). The fd-based calls
    # (fchmod, fchown, fsetxattr, futimens) stay: they need a file Landlock let the child open.
    "chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat", "utime", "utimes", "futimesat",
    "setxattr", "lsetxattr", "removexattr", "lremovexattr", "getxattr", "lgetxattr", "listxattr",
    "llistxattr", "setxattrat", "getxattrat", "listxattrat", "removexattrat",
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
)


def install_sibling_filter() -> None:
    """Stack a second seccomp filter on this process (a fork server, before it forks):
    ``SIBLING_DENIED`` fail with EPERM for it and every child it forks. Raises if it cannot."""
    import pyseccomp as seccomp

    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in SIBLING_DENIED:
        try:
            flt.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (OSError, ValueError, RuntimeError):
            pass  # not a system call on this architecture (socketcall-only ones are covered by "socket")
    flt.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_PARENT, CLONE_PARENT))
    # utimensat on a path (its second argument); on a descriptor (NULL path, futimens) it stays
    flt.add_rule(seccomp.ERRNO(errno.EPERM), "utimensat", seccomp.Arg(1, seccomp.NE, 0))
    flt.load()


def _status_field(name: str) -> str:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def violation(exc: BaseException) -> str | None:
    """What the sandbox refused, if ``exc`` is the sandbox refusing something; else None."""
    if not isinstance(exc, OSError):
        return None
    frames = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    in_socket = any(f.endswith(("socket.py", "ssl.py", "connection.py")) for f in frames)
    code = exc.errno
    filename = getattr(exc, "filename", None)
    if in_socket or isinstance(exc, ConnectionError) or code in (
        errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EAFNOSUPPORT
    ):
        return "network access refused (the sandbox has no network, loopback included)"
    if code == errno.EROFS:
        return f"writing {filename or 'a file'} outside the job's temp dir refused (read-only file system)"
    if code == errno.EAGAIN and isinstance(exc, BlockingIOError) and filename is None:
        return "process or thread creation refused (the sandbox's process limit was reached)"
    if code in (errno.EPERM, errno.EACCES):
        what = f"access to {filename}" if filename else "a system call"
        return f"{what} refused by the sandbox (seccomp or file permissions)"
    if isinstance(exc, FileNotFoundError) and filename and os.path.isabs(str(filename)):
        if not str(filename).startswith((os.getcwd(), "/dev/shm")):
            return f"reading {filename} refused: host files outside the sandbox are not visible"
    return None


def bootstrap(argv: list[str]) -> None:
    """``python -m bench.sandbox PROTO_FD STATUS_FD WORKDIR ENTRY``: lock down, then run ``ENTRY``."""
    proto_fd, status_fd = argv[0], int(argv[1])
    status: dict[str, Any] = {"errors": []}
    try:
        _set_no_new_privs()
    except OSError as exc:
        status["errors"].append(f"no_new_privs: {exc}")
    try:
        _install_seccomp()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        status["errors"].append(f"seccomp: {type(exc).__name__}: {exc}")
    try:
        status["no_new_privs"] = _status_field("NoNewPrivs") == "1"
        status["seccomp"] = _status_field("Seccomp") == "2"
    except OSError as exc:
        status["errors"].append(f"/proc/self/status: {exc}")
    os.write(status_fd, json.dumps(status).encode())
    os.close(status_fd)
    entry = importlib.import_module(argv[3])
    sys.argv = [argv[3], proto_fd]
    entry.main()
