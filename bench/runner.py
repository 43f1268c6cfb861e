"""The parent's side of one child process: send commands, read answers, enforce limits."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import select
import signal
import stat
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from bench import sandbox, wire
from bench.errors import BenchError, ErrorCode
from bench.npy import NPY_MAX_HEADER, parse_npy_header
from bench.sandbox import LOG_NAME
from bench.tempdirs import DIR_FLAGS

log = logging.getLogger("ideabench.runner")
POLL_S = 0.2
LOG_TAIL_CHARS = 600
MAX_MESSAGE_BYTES = 1 << 20  # one line from a child; ours are a few hundred bytes
DISK_CHECK_S = 1.0  # how often the parent measures a child's working directory


MAX_DEPTH = 32  # directories below a child's own: the bench makes a few; deeper is past the quota


def open_under(root_fd: int, parts: tuple[str, ...]) -> int:
    """A descriptor of the directory ``parts`` below the one ``root_fd`` holds, opened one name at
    a time following no link (no path is ever longer than one name: a child's tree may be)."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            below = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def directory_usage(root: Path, max_entries: int) -> tuple[int, int]:
    """(bytes, entries) under ``root``, not following links; stops counting past
    ``max_entries`` (a child that made millions of files must not make the parent walk them).

    Walked by descriptors, one name at a time. What cannot be counted counts as past
    ``max_entries``: a directory the parent may not list (mode 0o300 hid 3 MiB from a worker not
    run as root), one deeper than ``MAX_DEPTH`` (a path past PATH_MAX hid 2.4 GiB from a walk by
    paths), any error but a name gone since it was listed (red teams 3 and 4)."""
    over = max_entries + 1
    try:
        root_fd = os.open(root, DIR_FLAGS)
    except FileNotFoundError:
        return 0, 0
    except OSError:
        return 0, over
    total, entries = 0, 0
    try:
        stack: list[tuple[str, ...]] = [()]
        while stack and entries <= max_entries:
            parts = stack.pop()
            if len(parts) > MAX_DEPTH:
                return total, over
            try:
                fd = open_under(root_fd, parts)
            except FileNotFoundError:
                continue
            except OSError:
                return total, over
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        entries += 1
                        if entries > max_entries:
                            break
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((*parts, entry.name))
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
            except FileNotFoundError:
                continue
            except OSError:
                return total, over
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    return total, entries


def open_output(root: Path, relative: str, role: str) -> BinaryIO:
    """Open a file a child wrote under its directory ``root``, following no link it made.

    The parent reads what a child writes (predictions, a state_dict, a custom track's
    arrays) only by names it chose itself, opened relative to ``root`` with
    ``O_NOFOLLOW`` at every step: a symlink or anything but a plain file is a
    ``sandbox_violation``, so a child cannot point the parent at another file (say,
    a cached split's labels).
    """
    parts = Path(relative).parts
    refused = BenchError(
        ErrorCode.SANDBOX_VIOLATION,
        f"The {role} process left {relative!r} as something other than a plain file in its own directory.",
    )
    if not parts or Path(relative).is_absolute() or any(p in (".", "..") for p in parts):
        raise refused
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise BenchError(ErrorCode.CRASHED, f"The {role} process did not write {relative!r}.") from None
        raise refused from None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise refused
    return os.fdopen(file_fd, "rb")


def write_new_file(root: Path, name: str, data: bytes) -> None:
    """Write ``data`` as a new file ``name`` in a child's directory ``root``.

    The child owns ``root``: it may have planted a link there under the name the parent
    is about to use. ``O_EXCL | O_NOFOLLOW`` refuses anything already there, so the parent
    never writes through a child's link to a path of the child's choosing.
    """
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        raise BenchError(
            ErrorCode.SANDBOX_VIOLATION, f"Something already stood at {name!r}, a name the bench writes."
        ) from None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


SPARSE_MIN_BYTES = 1 << 20  # files this large must hold most of their size in blocks


def npy_header(fh: BinaryIO, role: str, what: str,
               code: ErrorCode = ErrorCode.TRAINING_ERROR) -> tuple[tuple[int, ...], Any]:
    """(shape, dtype) of a child's ``.npy`` file, read from its header alone (``parse_npy_header``),
    refusing (with ``code``) what the parent must never load: a header that promises more data
    than the file holds (a small file must not make the parent allocate gigabytes), objects, a
    byte order that is not this machine's (big-endian float32 passed as float32 and ended
    ``internal``); and, as a ``sandbox_violation``, a sparse file (a hole of 255 MB on 4 KB of
    disk: the child's disk check counts blocks, so only the parent's reading would pay for it).
    Leaves ``fh`` at the start of the array's data."""
    stat_ = os.fstat(fh.fileno())
    if stat_.st_size > SPARSE_MIN_BYTES and stat_.st_blocks * 512 < stat_.st_size // 2:
        raise BenchError(ErrorCode.SANDBOX_VIOLATION, f"The {role} process wrote its {what} as a sparse file "
                         f"({stat_.st_size} bytes on {stat_.st_blocks * 512} of disk).")
    try:
        fh.seek(0)
        shape, dtype, offset = parse_npy_header(fh.read(NPY_MAX_HEADER + 12))
    except (ValueError, OSError):
        raise BenchError(code, f"The {role} process wrote an unusable {what}.",
                         "The bench reads only what np.save writes for a C-ordered array of a number "
                         "or bool dtype in native byte order.") from None
    if math.prod(shape) * dtype.itemsize > stat_.st_size - offset:
        raise BenchError(code, f"The {role} process wrote an unusable {what}.")
    if dtype.byteorder not in ("=", "|"):
        raise BenchError(code, f"The {role} process wrote its {what} in a byte order that is not this "
                         f"machine's ({dtype.str}).", "Keep tensors in torch's native byte order.")
    fh.seek(offset)
    return tuple(shape), dtype


def load_npy(fh: BinaryIO, role: str, what: str, code: ErrorCode = ErrorCode.TRAINING_ERROR) -> Any:
    """A child's ``.npy`` file as an array, once its header passed ``npy_header`` (no ``np.load``:
    see ``parse_npy_header``)."""
    import numpy as np

    shape, dtype = npy_header(fh, role, what, code)
    array = np.empty(shape, dtype)
    if fh.readinto(array.reshape(-1).view(np.uint8)) != array.nbytes:  # type: ignore[attr-defined]
        raise BenchError(code, f"The {role} process wrote an unusable {what}.")
    return array



# The codes a child may end a command with: its side's (the submitted file's faults). Never the
# parent's (cancelled, no_space, internal, sandbox_unavailable, diverged, track states): a child
# that sends one of those is taken at its word only as far as "the arm's process failed".
CHILD_CODES = frozenset({
    ErrorCode.INVALID_CODE, ErrorCode.MISSING_BUILD_MODEL, ErrorCode.BAD_OUTPUT_SHAPE, ErrorCode.NOT_A_MODULE,
    ErrorCode.NOT_CAPTURABLE, ErrorCode.TOO_MANY_PARAMETERS, ErrorCode.PARAMETER_PARITY, ErrorCode.COMPUTE_PARITY,
    ErrorCode.INVALID_HPARAMS, ErrorCode.INVALID_MECHANISM, ErrorCode.MECHANISM_ERROR, ErrorCode.ROW_DEPENDENT,
    ErrorCode.TRAINING_ERROR, ErrorCode.OUT_OF_MEMORY, ErrorCode.OUTPUT_LIMIT, ErrorCode.SANDBOX_VIOLATION,
    ErrorCode.INVALID_TRACK, ErrorCode.CRASHED,
})
CHILD_MESSAGE_CHARS = 1000
CHILD_HINT_CHARS = 500


def _child_text(value: Any, limit: int) -> str:
    """Text a child sent, as plain printable text of at most ``limit`` characters."""
    text = value if isinstance(value, str) else ""
    text = "".join(c if c.isprintable() or c == "\n" else " " for c in text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"


def child_error(role: str, payload: Any, allowed: frozenset[ErrorCode] = CHILD_CODES) -> BenchError:
    """The error of a child's ``{"error": {...}}`` answer, deny by default: only a code of the
    child's side (``allowed``: ``CHILD_CODES``) passes as sent; any other (``internal``, ``cancelled``,
    ``no_space``: the bench's own words) or none becomes ``crashed``; message and hint are
    bounded plain text (a child chose them: it may be the submitted code speaking)."""
    fields = payload if isinstance(payload, dict) else {}
    message = _child_text(fields.get("message"), CHILD_MESSAGE_CHARS)
    try:
        code = ErrorCode(str(fields.get("code")))
    except ValueError:
        code = None
    if code not in allowed:
        return BenchError(ErrorCode.CRASHED, f"The {role} process failed: {message or 'no message'}")
    hint = fields.get("hint")
    return BenchError(code, message, _child_text(hint, CHILD_HINT_CHARS) if isinstance(hint, str) else None)


def _has_cgroup(proc: sandbox.ChildProcess) -> bool:
    """Whether a memory cgroup watched ``proc`` (then only its OOM counter means out of memory)."""
    return "cgroup_memory" in sandbox.layers_of(proc)


# Every live session, so that reading any child of a job also measures its idle siblings' directories:
# a child the parent does not talk to (the idea's capture child during the screening) wrote 2.6 GiB
# past its quota unchecked for the whole stage (red team 5)
_live: weakref.WeakSet[ArmSession] = weakref.WeakSet()
_live_lock = threading.Lock()


class ArmSession:
    """One sandboxed child that holds one arm's code for the whole job."""

    def __init__(
        self,
        role: str,
        workdir: Path,
        limits: sandbox.Limits,
        deadline: float,
        cancel: threading.Event,
        timeout_s: float,
        *,
        launched: tuple[sandbox.ChildProcess, int] | None = None,
        pending: int = 0,
        wait_ready: bool = True,
        hide_tracks: bool = True,
        read_only: list[Path] | None = None,
        server: sandbox.ForkServer | None = None,
    ) -> None:
        """Start the child (or adopt ``launched``, a child started earlier with ``pending``
        commands whose answers are still to be read); ``wait_ready=False`` returns before the
        child has imported torch: call ``wait_ready()`` before the first request.
        ``hide_tracks=False`` only for the child that builds a built-in track's own baseline;
        ``read_only`` as for ``sandbox.launch`` (``[]``: no data directory at all); ``server``:
        the job's fork server, if it has one (``sandbox.launch``)."""
        self.role = role
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.limits = limits
        self.deadline = deadline
        self._step: tuple[float, str] | None = None  # a command's own deadline and its message (request)
        self.cancel = cancel
        self.timeout_s = timeout_s
        self._buffer = b""
        self.proc, self._fd = launched if launched is not None else sandbox.launch(
            workdir, limits, hide_tracks=hide_tracks, read_only=read_only, server=server
        )
        self.layers = sandbox.layers_of(self.proc)
        self._killed_for: ErrorCode | None = None
        self._disk_checked = time.monotonic()
        self._disk_lock = threading.Lock()
        with _live_lock:
            _live.add(self)
        self._ready = False
        self._pending = pending
        if wait_ready:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Read the child's ``ready`` line (it has imported torch)."""
        if self._ready:
            return
        ready = self._read_message()
        if "error" in ready:  # before any command: no submitted code has run in it yet
            raise child_error(self.role, ready["error"], CHILD_CODES | {ErrorCode.INTERNAL})
        self._ready = True

    # -- reading -------------------------------------------------------------
    def _read_message(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            self._check_limits()
            readable, _, _ = select.select([self._fd], [], [], POLL_S)
            if not readable:
                continue
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                raise self._death_error()
            self._buffer += chunk
            if len(self._buffer) > MAX_MESSAGE_BYTES and b"\n" not in self._buffer:
                self._kill(ErrorCode.SANDBOX_VIOLATION)
                raise BenchError(
                    ErrorCode.SANDBOX_VIOLATION,
                    f"The {self.role} process wrote a message of more than {MAX_MESSAGE_BYTES} bytes "
                    "on the protocol pipe.",
                )
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # a line nested 100,000 deep overflowed the decoder (red team)
            message = None
        if not isinstance(message, dict):
            self._kill(ErrorCode.SANDBOX_VIOLATION)
            raise BenchError(
                ErrorCode.SANDBOX_VIOLATION,
                f"The {self.role} process wrote something other than a JSON object on the protocol pipe.",
            )
        return message

    def _check_disks(self) -> None:
        """``_check_disk`` of this child and of every other live child of its job (they share
        the job's cancel event), whichever the parent is waiting on."""
        with _live_lock:
            job = [session for session in _live if session.cancel is self.cancel and session is not self]
        self._check_disk()
        for session in job:
            session._check_disk()

    def _check_disk(self) -> None:
        """The child's working directory holds at most ``disk_mb`` and ``disk_entries`` (each
        file is capped by RLIMIT_FSIZE; this caps their sum and their number). At most once per
        ``DISK_CHECK_S``, by one thread at a time; a closed child's directory is its job's to remove."""
        now = time.monotonic()
        if now - self._disk_checked < DISK_CHECK_S or self._fd < 0 or not self._disk_lock.acquire(blocking=False):
            return
        try:
            self._disk_checked = now
            self._measure_disk()
        finally:
            self._disk_lock.release()

    def _measure_disk(self) -> None:
        used, entries = directory_usage(self.workdir, self.limits.disk_entries)
        if used > self.limits.disk_mb * 1024 * 1024 or entries > self.limits.disk_entries:
            self._kill(ErrorCode.OUTPUT_LIMIT)
            raise BenchError(
                ErrorCode.OUTPUT_LIMIT,
                f"The {self.role} process filled its directory past its quota "
                f"({self.limits.disk_mb} MB, {self.limits.disk_entries} files), or made a directory "
                "the bench may not read.",
                "Write no files: the bench needs none from submitted code.",
            )

    def _check_limits(self) -> None:
        """Raise (killing the child) when the job was cancelled, ran past its deadline, or
        its child (or an idle one of its job) filled its directory past the quota."""
        self._check_disks()
        if self.cancel.is_set():
            self._kill(ErrorCode.CANCELLED)
            raise BenchError(ErrorCode.CANCELLED, "The job was cancelled; its child was killed.")
        if self._step is not None and time.monotonic() > self._step[0]:
            self._kill(ErrorCode.CAPTURE_TIMEOUT)
            raise BenchError(ErrorCode.CAPTURE_TIMEOUT, self._step[1])
        if time.monotonic() > self.deadline:
            self._kill(ErrorCode.TIMEOUT)
            raise BenchError(
                ErrorCode.TIMEOUT,
                f"The protocol ran past its limit of {self.timeout_s:.0f} s (in the {self.role} arm).",
            )

    def _write(self, data: bytes) -> None:
        """Write a command to the child without ever blocking past the deadline: a child that
        stops reading its stdin cannot hang the worker."""
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        os.set_blocking(fd, False)
        view = memoryview(data)
        while view:
            self._check_limits()
            try:
                _, writable, _ = select.select([], [fd], [], POLL_S)
                if not writable:
                    continue
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise self._death_error() from None

    def request(
        self, command: wire.Command, on_event: Callable[[dict[str, Any]], None] | None = None,
        *, within: tuple[float, str] | None = None,
    ) -> Any:
        """Send ``command``; pass streamed events to ``on_event``; return the final answer as
        the command's reply model (``bench.wire.REPLIES``; anything else is a
        ``sandbox_violation``). ``within``: (seconds, message): a command that takes longer
        kills the child with ``capture_timeout`` and that message (a ``build_model`` that sleeps)."""
        self._step = None if within is None else (time.monotonic() + within[0], within[1])
        try:
            answer = self._request(command, on_event)
        finally:
            self._step = None
        try:
            return wire.parse_reply(command, answer, self.role)
        except BenchError:
            self._kill(ErrorCode.SANDBOX_VIOLATION)
            raise

    def _request(
        self, command: wire.Command, on_event: Callable[[dict[str, Any]], None] | None
    ) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.wait_ready()
        while self._pending:  # answers of commands sent before this session (a warm-up): unused
            answer = self._read_message()
            if "event" not in answer:
                self._pending -= 1
                if "error" in answer:  # the job still runs; it only pays the first-use work itself
                    log.warning("a warm-up command of the %s child failed: %s", self.role, answer["error"])
        self._write(command.encode())
        while True:
            message = self._read_message()
            if "event" in message:
                if on_event is None:  # only a training command streams; nothing else may
                    self._kill(ErrorCode.SANDBOX_VIOLATION)
                    raise BenchError(
                        ErrorCode.SANDBOX_VIOLATION,
                        f"The {self.role} process sent an event outside a training command.",
                        "Do not write to the protocol pipe: the bench reports runs itself.",
                    )
                on_event(message)
                continue
            if "error" in message:
                raise child_error(self.role, message["error"])
            if self._buffer.strip():  # more than one answer to one command: the next would be read as the next's
                self._kill(ErrorCode.SANDBOX_VIOLATION)
                raise BenchError(ErrorCode.SANDBOX_VIOLATION,
                                 f"The {self.role} process answered one command more than once.")
            return message

    # -- ending --------------------------------------------------------------
    def log_tail(self) -> str:
        """The last characters the arm printed (stdout and stderr)."""
        # The child owns its log: it may have replaced it by a link (to /proc/self/environ of
        # whoever follows it) or a FIFO (which would block a reader forever).
        try:
            with open_output(self.workdir, LOG_NAME, self.role) as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(max(0, size - LOG_TAIL_CHARS))
                return fh.read(LOG_TAIL_CHARS).decode(errors="replace")
        except (BenchError, OSError):
            return ""

    def _death_error(self) -> BenchError:
        try:
            rc: int | None = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._kill(ErrorCode.CRASHED)
            rc = self.proc.returncode
        tail = self.log_tail().strip()
        where = f"; its last output: {tail[-300:]!r}" if tail else ""
        if self._killed_for == ErrorCode.CANCELLED:  # killed by us, e.g. after the other arm failed
            return BenchError(ErrorCode.CANCELLED, "The job was cancelled; its child was killed.")
        info = sandbox.exit_info(self.proc)
        if info.output_capped or info.signal == signal.SIGXFSZ:
            return BenchError(
                ErrorCode.OUTPUT_LIMIT,
                f"The {self.role} wrote more than {self.limits.file_size_mb} MB of output "
                f"(stdout/stderr are capped){where}.",
            )
        if info.oom_killed or (
            info.signal == signal.SIGKILL and self._killed_for is None and not _has_cgroup(self.proc)
        ):
            return BenchError(
                ErrorCode.OUT_OF_MEMORY,
                f"The {self.role} process was killed by the memory limit "
                f"({self.limits.memory_mb} MB){where}.",
            )
        if info.signal == signal.SIGXCPU:
            return BenchError(
                ErrorCode.TIMEOUT,
                f"The {self.role} process used more than its CPU-time limit of "
                f"{self.limits.cpu_s} s{where}.",
            )
        if info.signal is not None:
            try:
                name = signal.Signals(info.signal).name
            except ValueError:
                name = f"signal {info.signal}"
            return BenchError(
                ErrorCode.CRASHED, f"The {self.role} process died from {name}{where}."
            )
        return BenchError(
            ErrorCode.CRASHED,
            f"The {self.role} process exited with status {rc} before answering "
            f"(os._exit or sys.exit in the submitted code?){where}.",
        )

    def _kill(self, reason: ErrorCode) -> None:
        self._killed_for = reason
        sandbox.kill(self.proc)

    def close(self) -> None:
        """Kill the child's whole process group (it keeps nothing that needs a clean exit). A
        second call closes nothing more (its descriptor's number may be another file's by then)."""
        with _live_lock:
            _live.discard(self)
        sandbox.kill(self.proc)
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1
