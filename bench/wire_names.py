"""The child's side of the wire (``bench.wire``), in plain Python: each command's side and keys,
and every file name the two sides exchange.

A child checks each command line against ``OPS`` (its op known, its required keys present,
no other key) before any work. It does not import ``bench.wire``: pydantic's models bring
about 150 modules into the process, and every ``inspect.getmodule`` walks ``sys.modules`` (a
canonical baseline's load, and ``torch.export`` many times over), which cost 0.1 s per job on
the warm path of a smoke or tabular job (benchmarks/protocol_speed.py). The parent builds and
reads everything with ``bench.wire``'s models; ``tests/security/test_wire.py`` checks that
``OPS`` says exactly what those models say.
"""

from __future__ import annotations

import json
from typing import Any

from bench.errors import BenchError, ErrorCode

# A name a capture child may report (``wire.CaptureReply.changed``): an attribute path of the
# model or a global of the file, plain ASCII; the child leaves out any other.
STATE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$"

# op: (the side that serves it (None: either), required keys, optional keys)
OPS: dict[str, tuple[str | None, frozenset[str], frozenset[str]]] = {
    "capture_load": ("capture", frozenset({"role", "track", "spec", "param_cap"}), frozenset({"code", "track_source", "trains"})),
    "capture": ("capture", frozenset({"configs", "init_seeds"}), frozenset()),
    "rebuild": ("capture", frozenset({"hparams", "targets", "init_seeds"}), frozenset()),
    "measure": ("capture", frozenset({"runs"}), frozenset({"measure_code", "builds"})),
    "load": ("trainer", frozenset({"role", "spec", "param_cap", "captured"}), frozenset({"device"})),
    "more_inits": ("trainer", frozenset({"init_seeds"}), frozenset()),
    "check": ("trainer", frozenset({"data_dir", "configs", "batch_size"}), frozenset({"probe", "loss", "mechanism_probe"})),
    "train": ("trainer", frozenset({"runs"}), frozenset({"path"})),
    "probe": ("trainer", frozenset({"probe", "runs"}), frozenset()),
    "make_data": ("data", frozenset({"track_source", "items"}), frozenset()),
    "warm": (None, frozenset(), frozenset({"export"})),
    "exit": (None, frozenset(), frozenset()),
}


# A child whose first command loads a built-in track's own baseline with ``trains`` (the bench's
# code alone, never a submitted file) captures it and is then the arm's trusted trainer: one child
# start fewer per job. It serves these ops and no other: never ``measure`` (submitted code) and
# never a second load.
OWN_BASELINE = "own_baseline"
OWN_BASELINE_OPS = frozenset({"capture", "rebuild", "load", "more_inits", "check", "train", "probe"})


def side_after(side: str | None, op: str, command: dict[str, Any]) -> str | None:
    """The side a child serves once it takes ``command`` (its first command of a side decides);
    a command its side does not serve is the bench's own bug (``internal``)."""
    wanted = OPS[op][0]
    if op == "capture_load" and command.get("trains"):
        if side is not None or command.get("code") is not None or command.get("track_source") is not None:
            raise BenchError(ErrorCode.INTERNAL, "only a fresh child loading a built-in track's own baseline trains")
        return OWN_BASELINE
    if wanted is None:
        return side
    if side is None or side == wanted:
        return wanted
    if side == OWN_BASELINE and op in OWN_BASELINE_OPS:
        return side
    raise BenchError(ErrorCode.INTERNAL, f"a {side} child got the {op!r} command")


def parse_command_line(line: str | bytes) -> tuple[str, dict[str, Any]]:
    """(op, the command) of one line, checked against ``OPS``; anything else is the bench's own
    bug (``internal``)."""
    try:
        command = json.loads(line)
    except (ValueError, RecursionError):
        command = None
    if not isinstance(command, dict) or command.get("op") not in OPS:
        raise BenchError(ErrorCode.INTERNAL, "a malformed command reached the child")
    op = command["op"]
    _, required, optional = OPS[op]
    keys = set(command) - {"op"}
    if not required <= keys or keys - required - optional:
        raise BenchError(ErrorCode.INTERNAL, f"the child's {op!r} command has keys {sorted(keys)}")
    return op, command


def prediction_file(run_id: str) -> str:
    """A trainer's predictions of a run on its whole eval split."""
    return f"pred_{run_id}.npy"


def rows_file(run_id: str) -> str:
    """A trainer's predictions of the run's checked rows, each predicted alone."""
    return f"rows_{run_id}.npy"


def kept_file(run_id: str, j: int) -> str:
    """Trained tensor ``j`` of a kept (final) run."""
    return f"kept_{run_id}_{j}.npy"


def measure_prefix(run_id: str) -> str:
    """The parent's copies of a kept run's tensors for a capture child's ``measure``
    (``{prefix}{j}.npy``)."""
    return f"measure_{run_id}_"


def probe_file(run_id: str) -> str:
    """The probe batch a ``measure`` runs on."""
    return f"probe_{run_id}.npy"


SMOKE_RUN = "smoke"  # the one run of a custom track's validation
SMOKE_PREDICTIONS = prediction_file(SMOKE_RUN)
