"""The parent/child boundary as types (issue 26.4): every command a model with its ``op``, every
answer a model (``REPLIES``), and the file names the two sides exchange (``bench.wire_names``).

The parent builds a command as a model (a misspelt key or a missing one fails where it is
written, not in the child); ``bench.runner.ArmSession.request`` sends it as JSON and reads the
answer into the command's ``Reply`` model, deny by default: an answer with a key the command
does not answer with, a value of another type, or a list longer than it asked for is a
``sandbox_violation`` (a capture child runs submitted code, and that code may write anything
on its pipe). The child (``bench.child``) checks each line against ``bench.wire_names.OPS``
(plain Python, what these models say, tested so; an unknown op or key is refused before any
work), serves one ``side`` for its whole life, the side fixed by its first command, and hands
its handler the command's JSON data. It imports no pydantic: its ~150 modules slowed every
``inspect.getmodule`` in the child.

Nested run descriptions stay JSON objects (the trainer passes them down to ``bench.trainer``
and ``bench.vectorized``): their shape is the parent's, which is trusted; every answer is the
child's, which may not be.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from bench.errors import BenchError, ErrorCode
from bench.wire_names import (
    SMOKE_PREDICTIONS,
    SMOKE_RUN,
    STATE_NAME_PATTERN,
    kept_file,
    measure_prefix,
    prediction_file,
    probe_file,
    rows_file,
)

Side = Literal["capture", "trainer", "data"]
Role = Annotated[str, Field(pattern=r"^(baseline|idea)$")]
ExecutionPath = Annotated[str, Field(pattern=r"^(sequential|vectorized)$")]
JsonObject = dict[str, Any]
MAX_ANSWER_ITEMS = 4096  # configs, runs or values in one answer: far above any job's


class Command(BaseModel):
    """A command of the parent to a child. ``side``: the one kind of child that serves it
    (None: either)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    side: ClassVar[Side | None] = None

    def encode(self) -> bytes:
        """The command as one line of JSON."""
        return (self.model_dump_json() + "\n").encode()


class Reply(BaseModel):
    """A child's answer; ``ok`` is its envelope. Unknown keys are refused, and so is a value
    of another JSON type (strict: no string read as a number, no bool as a count)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    ok: Literal[True] = True


class Empty(Reply):
    """An answer that carries nothing (the parent reads the child's files by its own names)."""


# -- the capture side: runs submitted code, never trains ------------------------------------------
class LoadedReply(Reply):
    """What a file declares (``HPARAMS``, ``MECHANISM``, ``measure``); checked by the parent
    (``bench.contract``) before use."""

    hparams: Any
    mechanism: Any
    has_measure: bool


class CaptureLoad(Command):
    """Execute the arm's file (``code``), a custom track's baseline (``track_source``) or a
    built-in track's baseline (``track``)."""

    side = "capture"
    op: Literal["capture_load"] = "capture_load"
    role: Role
    track: str
    spec: JsonObject
    param_cap: int
    code: str | None = None
    track_source: str | None = None
    # A built-in track's own baseline only (no ``code``, no ``track_source``): the child that
    # captures it is also the arm's trusted trainer (``bench.child``'s ``own_baseline`` side).
    trains: bool = False


class Capture(Command):
    """Build and export every config with every init seed."""

    side = "capture"
    op: Literal["capture"] = "capture"
    configs: list[JsonObject]
    init_seeds: list[int]


# What a capture child saw its file do besides building its model (issue 27.8). Advisory: a file
# can only add warnings about itself, chosen from these codes; the parent words them.
CaptureNote = Literal["forward_state", "build_processes"]
StateName = Annotated[str, StringConstraints(pattern=STATE_NAME_PATTERN)]


class CaptureReply(Reply):
    """``forward_state``: the model's forward changed Python-side state (a non-tensor attribute,
    a global of the file) while it was captured, and ``changed`` names up to 3 of them;
    ``build_processes``: ``build_model`` started a process or a thread."""

    notes: list[CaptureNote] = Field(default_factory=list, max_length=2)
    changed: list[StateName] = Field(default_factory=list, max_length=3)


class Rebuild(Command):
    """One captured config built again for more init seeds, no export (a confirmation's fresh
    child): its parameters and buffers named in ``targets``, in the graph's input order."""

    side = "capture"
    op: Literal["rebuild"] = "rebuild"
    hparams: JsonObject
    targets: list[str]
    init_seeds: list[int]


class ValuesReply(Reply):
    """One number per run asked for (the parent checks each is finite)."""

    values: list[float] = Field(max_length=MAX_ANSWER_ITEMS)


class Builds(BaseModel):
    """What a capture gave a child that did not capture (``Measure.builds``): the configs and
    init seeds it was asked for, and each config's parameter and buffer names in graph order."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    configs: list[JsonObject]
    init_seeds: list[int]
    targets: list[list[str]]


class Measure(Command):
    """The idea's own ``measure`` (``measure_code``: on the baseline's models) on trained models;
    ``builds`` for a child that captured nothing (the one a built-in track's own baseline is
    measured in: its capture child trains, and submitted code never runs there)."""

    side = "capture"
    op: Literal["measure"] = "measure"
    runs: list[JsonObject]
    measure_code: str | None = None
    builds: Builds | None = None


# -- the trainer side: bench code on captured graphs, never submitted code --------------------------
class CapturedRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    dir: str
    configs: list[JsonObject]
    init_seeds: list[int]


class DeviceReply(Reply):
    device: str


class Load(Command):
    """Take the arm's checked capture."""

    side = "trainer"
    op: Literal["load"] = "load"
    role: Role
    spec: JsonObject
    param_cap: int
    device: str | None = None
    captured: CapturedRef


class MoreInits(Command):
    side = "trainer"
    op: Literal["more_inits"] = "more_inits"
    init_seeds: list[int]


class CheckReply(Reply):
    """Counts per config, as the trusted trainer made them; whether the configs batch."""

    n_params: list[int] = Field(max_length=MAX_ANSWER_ITEMS)
    n_buffers: list[int] = Field(max_length=MAX_ANSWER_ITEMS)
    flops: list[float] = Field(max_length=MAX_ANSWER_ITEMS)  # forward cost per example (bench.cost)
    # per config, each forward counted (bench.cost.forward_sizes): its rows and its operations
    forward_rows: list[Annotated[list[int], Field(max_length=64)]] = Field(max_length=MAX_ANSWER_ITEMS)
    forward_cost: list[Annotated[list[float], Field(max_length=64)]] = Field(max_length=MAX_ANSWER_ITEMS)
    n_tensors: list[int] = Field(max_length=MAX_ANSWER_ITEMS)
    vectorizable: bool | None = None
    why: str | None = None


class Check(Command):
    """Rebuild one model per config; check its output; count what it holds."""

    side = "trainer"
    op: Literal["check"] = "check"
    data_dir: str
    configs: list[JsonObject]
    batch_size: int = Field(ge=1)  # the training batch: the row counts counted (bench.cost.forward_sizes)
    probe: bool = False
    loss: str = "mse"
    mechanism_probe: JsonObject | None = None


class Train(Command):
    """Train the runs; one ``run`` event per finished run, then an empty answer."""

    side = "trainer"
    op: Literal["train"] = "train"
    runs: list[JsonObject]
    path: ExecutionPath = "sequential"


class Probe(Command):
    """A service-owned probe (``bench.probes``) on trained models."""

    side = "trainer"
    op: Literal["probe"] = "probe"
    probe: JsonObject
    runs: list[JsonObject]


# -- a custom track's data: its own short-lived child ---------------------------------------------
class DataItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    seed: int
    dir: str


class MakeData(Command):
    side = "data"
    op: Literal["make_data"] = "make_data"
    track_source: str
    items: list[DataItem]


# -- any side ---------------------------------------------------------------------------------------
class Warm(Command):
    """The first-use work of training (and, ``export``, of the exporter), before a job."""

    op: Literal["warm"] = "warm"
    export: bool = False


class Exit(Command):
    op: Literal["exit"] = "exit"


# What each command is answered with.
REPLIES: dict[type[Command], type[Reply]] = {
    CaptureLoad: LoadedReply, Capture: CaptureReply, Rebuild: Empty, Measure: ValuesReply,
    Load: DeviceReply, MoreInits: Empty, Check: CheckReply, Train: Empty, Probe: ValuesReply,
    MakeData: Empty, Warm: Empty, Exit: Empty,
}


def parse_reply(command: Command, message: dict[str, Any], role: str) -> Reply:
    """The child's answer to ``command`` as its model, deny by default."""
    try:
        return REPLIES[type(command)].model_validate(message)
    except ValidationError:
        raise BenchError(
            ErrorCode.SANDBOX_VIOLATION,
            f"The {role} process answered {getattr(command, 'op', '?')!r} with something other than its answer.",
            "Do not write to the protocol pipe: the bench reads its children's answers itself.",
        ) from None


# -- the files of the boundary, each written by one side and read by the other (bench.wire_names) ----
__all__ = ["SMOKE_PREDICTIONS", "SMOKE_RUN", "kept_file", "measure_prefix", "prediction_file", "probe_file",
           "rows_file"]
