"""Landlock: a forked child's own view of the file system, deny by default (``restrict``).

A child forked by the fork server (``bench.sandbox.zygote``) shares its server's bubblewrap
sandbox, whose view is the union of a job's children's views. Before it runs anything, each
child restricts itself to its own: read the directories it lists, write only its working
directory, nothing else; signals and abstract unix sockets scoped to itself (a sibling or the
server cannot be signalled or reached), ptrace of any process outside its domain refused (the
kernel's rule for Landlock domains), and TCP bind and connect refused where the kernel can
restrict them. A restriction cannot be lifted, and it holds for everything the child starts.

Called through ``ctypes`` (three system calls, the same numbers on every architecture): the
``landlock`` package on PyPI is a development release (1.0.0.dev5), and a pre-release dependency
at the sandbox's core would be a weaker choice than these few lines checked against the kernel's
``uapi/linux/landlock.h``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK = (1 << n for n in range(4, 10))
MAKE_FIFO, MAKE_BLOCK, MAKE_SYM, REFER, TRUNCATE, IOCTL_DEV = (1 << n for n in range(10, 16))
ALL_FS = (1 << 16) - 1  # every file-system right of ABI 5 (execute .. ioctl_dev)
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # those a rule on a file may hold
READ = EXECUTE | READ_FILE | READ_DIR
# a working directory: files, directories, links, renames; no device nodes, and no socket or FIFO
# files (Landlock does not mediate connect(): a socket file would be a channel to any sibling
# that knows its path; red team, session 25)
WRITE = ALL_FS & ~(MAKE_CHAR | MAKE_BLOCK | MAKE_SOCK | MAKE_FIFO | IOCTL_DEV)
NET_ALL = (1 << 0) | (1 << 1)  # bind_tcp, connect_tcp (ABI 4)
SCOPE_ALL = (1 << 0) | (1 << 1)  # abstract unix sockets, signals (ABI 6)
MIN_ABI = 6  # the scopes: without them a child could signal its siblings and its server


class _Ruleset(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is absent or disabled."""
    version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def restrict(read: Iterable[str], write: Iterable[str], read_write_files: Iterable[str] = ()) -> None:
    """Restrict this process (and all it starts) to reading ``read`` and everything under them,
    writing everything under ``write``, and reading and writing the files ``read_write_files``
    (``/dev/null``). A path that does not exist is skipped (it grants nothing). Raises
    ``OSError`` if any step fails: the caller must not run anything then (fail closed)."""
    if abi() < MIN_ABI:
        raise OSError(0, f"Landlock ABI {MIN_ABI} or later is required (this kernel: {abi()})")
    libc = _libc()
    attr = _Ruleset(ALL_FS, NET_ALL, SCOPE_ALL)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for paths, rights in ((read, READ), (write, WRITE), (read_write_files, READ_FILE | WRITE_FILE)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    allowed = rights if os.path.isdir(path) else rights & FILE_RIGHTS
                    rule = _PathBeneath(allowed, fd)
                    if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule {path} failed")
                finally:
                    os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS (the bootstrap set it already)
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)

