"""The child's side of the sandbox: no_new_privs and seccomp, then ``bench.child``.

``python -m bench.sandbox PROTO_FD STATUS_FD WORKDIR ENTRY`` runs ``bootstrap``; it
reports the layers it set on STATUS_FD for the parent to check, then runs the module ``ENTRY``'s
``main`` (the launcher's caller names it: the sandbox imports nothing of the program it runs). ``violation``
tells the child which of its errors were the sandbox refusing something.
"""

from __future__ import annotations

import errno
import gc
import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

# The system calls a child may make: deny by default (issue 25). What CPython, numpy, torch (its
# CPU kernels, thread pools and torch.export) and ``bench.child`` / ``bench.sandbox.zygote`` call,
# measured on every track's examples and the test suite under a logging filter
# (docs/security.md, "The seccomp allowlist"), plus their glibc's fallbacks. Any other call fails
# with EPERM: a call nobody listed is refused, not one nobody thought to forbid. Calls allowed only
# with some arguments are in ``_install_seccomp``.
ALLOWED_SYSCALLS = (
    # memory
    "brk", "mmap", "munmap", "mprotect", "mremap", "msync", "membarrier",
    # files, in the views bubblewrap and Landlock give
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "close",
    "close_range", "lseek", "fstat", "stat", "lstat", "newfstatat", "statx", "fstatfs", "statfs",
    "getdents64", "readlink", "readlinkat", "access", "faccessat", "faccessat2", "dup", "dup2",
    "dup3", "pipe", "pipe2", "ftruncate", "fsync", "fdatasync", "getcwd", "chdir", "fchdir",
    "sendfile", "copy_file_range",
    # waiting
    "poll", "ppoll", "select", "pselect6", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd2",
    # NUMA placement (torch's allocator)
    "mbind", "get_mempolicy", "set_mempolicy",
    # the fork server's socket pair, which the parent made: a child makes no socket (glibc's
    # lookup of the user through nscd tries one and falls back to /etc/passwd)
    "sendmsg", "recvmsg", "sendto", "recvfrom", "shutdown", "getsockopt", "getsockname",
    # processes and threads (clone: without namespace flags, ``_install_seccomp``)
    "exit", "exit_group", "wait4", "waitid", "kill", "tgkill", "tkill", "getpid", "getppid",
    "gettid", "getpgrp", "getpgid", "getsid", "setsid", "getuid", "geteuid", "getgid",
    "getegid", "getgroups", "getresuid", "getresgid", "capget", "rt_sigaction", "rt_sigprocmask",
    "rt_sigreturn", "rt_sigtimedwait", "rt_sigsuspend", "sigaltstack", "set_robust_list", "rseq",
    "set_tid_address", "sched_getaffinity", "sched_yield", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "getpriority", "getrlimit", "setrlimit",
    "getrusage", "times", "restart_syscall", "pause", "alarm", "setitimer", "getitimer",
    # time, randomness, the machine
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    "getrandom", "uname", "sysinfo", "arch_prctl", "getcpu",
    # the sandbox's own narrowing: a filter may be stacked; a fork server's children restrict themselves
    "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
)
# madvise advice: not MADV_COLD / PAGEOUT (they evict a file's pages from the host's page cache,
# whose state another job's child read back: a channel across jobs, red team 4), MERGEABLE, REMOVE
ALLOWED_MADVISE = (0, 1, 2, 3, 4, 8, 10, 11, 14, 15, 16, 17, 18, 19)
O_TMPFILE_FLAG = 0o20000000  # __O_TMPFILE: a file with no name, which no walk of the directory counts
# fcntl commands: F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC, F_GETPIPE_SZ. Not
# locks, leases, F_NOTIFY or F_SETOWN / F_SETSIG: on a file every sibling may read (the standard
# library) a lock or a directory notice was a channel between siblings (red team 3)
ALLOWED_FCNTL = (0, 1, 2, 3, 4, 1030, 1032)
# prctl options a child uses (PR_SET_NAME, PR_GET_NAME, PR_SET_PDEATHSIG, PR_GET_PDEATHSIG,
# PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_GET_SECCOMP, PR_GET_DUMPABLE,
# PR_CAPBSET_READ)
ALLOWED_PRCTL = (15, 16, 1, 2, 38, 39, 22, 21, 3, 23)
# ioctl requests: a terminal's attributes (isatty), FIONREAD, FIONBIO, FIOCLEX / FIONCLEX
ALLOWED_IOCTL = (0x5401, 0x541B, 0x5421, 0x5451, 0x5450)
FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_PRIVATE, FUTEX_CMD_MASK = 0, 9, 128, 0x7F
CLONE_PARENT = 0x00008000
_CLONE_NEW_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
    | 0x00000080  # CLONE_NEWTIME
)


def _set_no_new_privs() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _install_seccomp() -> None:
    """Load the allowlist: ``ALLOWED_SYSCALLS``; ``fcntl``, ``prctl``, ``madvise`` and ``ioctl``
    with the listed commands, options, advice and requests; ``open``/``openat`` without
    ``O_TMPFILE``, ``preadv2``/``pwritev2`` without flags; ``futex`` on private futexes (and waits
    on shared ones); ``mkdir`` and ``umask`` that keep the owner's rights; ``prlimit64`` and
    ``sched_setaffinity`` on the caller itself; ``clone`` without namespace flags or
    ``CLONE_PARENT``. ``clone3`` fails with ENOSYS (its flags are in memory a filter cannot read,
    and libc falls back to ``clone``); everything else with EPERM."""
    import pyseccomp as seccomp

    flt = seccomp.SyscallFilter(seccomp.ERRNO(errno.EPERM))
    for name in ALLOWED_SYSCALLS:
        try:
            flt.add_rule(seccomp.ALLOW, name)
        except (OSError, ValueError, RuntimeError):
            pass  # not a system call on this architecture (aarch64 has no open, stat, poll...)
    for option in ALLOWED_PRCTL:
        flt.add_rule(seccomp.ALLOW, "prctl", seccomp.Arg(0, seccomp.EQ, option))
    # its own limits and CPUs only (torch's cpuinfo pins itself to each CPU in turn at import):
    # another process's (a sibling's, in a fork server's sandbox) are not its to change
    for name in ("prlimit64", "sched_setaffinity"):
        flt.add_rule(seccomp.ALLOW, name, seccomp.Arg(0, seccomp.EQ, 0))
    # Files: every byte a child holds has a name in its directory, where the parent counts it
    # (red team 4: an O_TMPFILE file, fallocate's KEEP_SIZE, which RLIMIT_FSIZE does not see, and
    # files unlinked while open held 5 GiB past a 2 GiB quota): no O_TMPFILE, no unlink, rmdir or
    # rename (a child needs none: the bench writes its outputs under names the parent chose, and
    # overwrites them in place); and each byte written, not allocated (no fallocate: 2.6 GiB in
    # 10 ms, red team 5), so a second between two checks holds what the disk can write in it
    flt.add_rule(seccomp.ALLOW, "open", seccomp.Arg(1, seccomp.MASKED_EQ, O_TMPFILE_FLAG, 0))
    flt.add_rule(seccomp.ALLOW, "openat", seccomp.Arg(2, seccomp.MASKED_EQ, O_TMPFILE_FLAG, 0))
    # reads and writes without flags (RWF_NOWAIT told a cached page from one that is not)
    for name in ("preadv2", "pwritev2"):
        flt.add_rule(seccomp.ALLOW, name, seccomp.Arg(5, seccomp.EQ, 0))
    for advice in ALLOWED_MADVISE:
        flt.add_rule(seccomp.ALLOW, "madvise", seccomp.Arg(2, seccomp.EQ, advice))
    for command in ALLOWED_FCNTL:
        flt.add_rule(seccomp.ALLOW, "fcntl", seccomp.Arg(1, seccomp.EQ, command))
    # futex: any operation on a process-private futex; on a shared one (a mapping of a file every
    # sibling may read: a channel, red team 3) only a wait, which glibc's pthread_join makes on a
    # thread's id and the kernel wakes itself
    flt.add_rule(seccomp.ALLOW, "futex", seccomp.Arg(1, seccomp.MASKED_EQ, FUTEX_PRIVATE, FUTEX_PRIVATE))
    for wait in (FUTEX_WAIT, FUTEX_WAIT_BITSET):
        flt.add_rule(seccomp.ALLOW, "futex", seccomp.Arg(1, seccomp.MASKED_EQ, FUTEX_CMD_MASK | FUTEX_PRIVATE, wait))
    # directories it makes stay its owner's to list and empty (a directory of mode 0o300 hid
    # what was written in it from the parent's quota walk and its removal, red team 3): mkdir's
    # mode and the umask keep the owner's bits
    flt.add_rule(seccomp.ALLOW, "mkdir", seccomp.Arg(1, seccomp.MASKED_EQ, 0o700, 0o700))
    flt.add_rule(seccomp.ALLOW, "mkdirat", seccomp.Arg(2, seccomp.MASKED_EQ, 0o700, 0o700))
    flt.add_rule(seccomp.ALLOW, "umask", seccomp.Arg(0, seccomp.MASKED_EQ, 0o700, 0))
    if any(Path("/dev").glob("nvidia*")):
        # a GPU child drives its device through the driver's ioctls: every request (not measured
        # on a GPU yet: docs/security.md, "The seccomp allowlist")
        flt.add_rule(seccomp.ALLOW, "ioctl")
    else:
        for request in ALLOWED_IOCTL:
            flt.add_rule(seccomp.ALLOW, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    # (nor CLONE_PARENT: a fork server's child would make a process its server reaps, red team 1)
    flt.add_rule(seccomp.ALLOW, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_NEW_FLAGS | CLONE_PARENT, 0))
    try:
        flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    except (OSError, ValueError, RuntimeError):
        pass
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
    """``python -m bench.sandbox PROTO_FD STATUS_FD WORKDIR ENTRY``: lock down, then run ``ENTRY``.

    The collector is off until the entry has made its start-up imports (``bench.child.main``,
    ``bench.sandbox.zygote.main`` turn it on again): importing torch runs several full
    collections of a growing heap for next to no garbage (docs/performance.md, "Session 34")."""
    gc.disable()
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
    import tempfile

    # the temporary directory named, not probed: gettempdir() finds one by making and unlinking a
    # file, and a child may unlink nothing (``_install_seccomp``)
    tempfile.tempdir = argv[2]
    entry = importlib.import_module(argv[3])
    sys.argv = [argv[3], proto_fd]
    entry.main()
