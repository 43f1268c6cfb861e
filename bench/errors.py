"""The fixed taxonomy of errors an idea (or the bench) can end with."""

from __future__ import annotations

import linecache
import traceback
from enum import StrEnum


class ErrorCode(StrEnum):
    """Machine-readable error codes; stable across releases."""

    INVALID_CODE = "invalid_code"
    MISSING_BUILD_MODEL = "missing_build_model"
    BAD_OUTPUT_SHAPE = "bad_output_shape"
    NOT_A_MODULE = "not_a_module"
    NOT_CAPTURABLE = "not_capturable"
    PARAMETER_PARITY = "parameter_parity"
    COMPUTE_PARITY = "compute_parity"
    BASELINE_INFERIOR = "baseline_inferior"
    INCONSISTENT_BUILD = "inconsistent_build"
    MATCHED_BASELINE_UNSUPPORTED = "matched_baseline_unsupported"
    TOO_MANY_PARAMETERS = "too_many_parameters"
    INVALID_HPARAMS = "invalid_hparams"
    HPARAM_NO_EFFECT = "hparam_no_effect"
    INVALID_MECHANISM = "invalid_mechanism"
    MECHANISM_ERROR = "mechanism_error"
    ROW_DEPENDENT = "row_dependent"
    TRAINING_ERROR = "training_error"
    DIVERGED = "diverged"
    TIMEOUT = "timeout"
    CAPTURE_TIMEOUT = "capture_timeout"
    OUT_OF_MEMORY = "out_of_memory"
    CRASHED = "crashed"
    OUTPUT_LIMIT = "output_limit"
    SANDBOX_VIOLATION = "sandbox_violation"
    UNKNOWN_TRACK = "unknown_track"
    INVALID_TRACK = "invalid_track"
    TRACK_NOT_READY = "track_not_ready"
    TRACK_DEPRECATED = "track_deprecated"
    TRACK_UNAVAILABLE = "track_unavailable"
    TRACK_NAME_TAKEN = "track_name_taken"
    CANCELLED = "cancelled"
    NO_SPACE = "no_space"
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"
    INTERNAL = "internal"


DEFAULT_HINTS: dict[ErrorCode, str] = {
    ErrorCode.NO_SPACE: "Not your idea's fault: the worker's disk for temporary files is full. Submit it "
    "again later (an operator frees space or gives the workers a larger TMPDIR).",
    ErrorCode.INVALID_CODE: "Fix the Python error shown in the message; the file must import with "
    "only torch, numpy, math and the standard library.",
    ErrorCode.MISSING_BUILD_MODEL: "Define a top-level function `build_model(spec)` that returns a "
    "torch.nn.Module; see GET /v1/tracks/{name} for the spec and an example idea.",
    ErrorCode.BAD_OUTPUT_SHAPE: "The model must map a batch of shape (B, *spec['input_shape']) to "
    "(B, *spec['output_shape']); read the track's spec.",
    ErrorCode.NOT_A_MODULE: "`build_model(spec)` must return an instance of torch.nn.Module.",
    ErrorCode.NOT_CAPTURABLE: "The model must export with torch.export as a fixed graph of tensor ops "
    "for a batch of any size: no control flow on tensor values (use torch.where), no Python-side "
    "state changed in forward, no .item()/numpy in forward; see docs/idea-contract.md.",
    ErrorCode.ROW_DEPENDENT: "In eval mode each row's output must depend on that row alone: no "
    "mixing across the batch (attention or pooling over the batch dimension, batch statistics, "
    "matching rows against each other). BatchNorm is fine: in eval mode it uses running statistics.",
    ErrorCode.PARAMETER_PARITY: "Shrink the model to at most the track's param_parity_ratio times the "
    "baseline's parameters (and its buffers to the track's buffer_cap), or send a matched baseline "
    "of the same size.",
    ErrorCode.COMPUTE_PARITY: "Spend at most the track's compute_ratio times the baseline's forward "
    "FLOPs per example (GET /v1/tracks/{name}: compute_ratio): fewer repeated applications of a "
    "block, narrower layers, or a matched baseline of the same cost.",
    ErrorCode.BASELINE_INFERIOR: "A matched baseline must be as good as the track's canonical baseline "
    "(within its smallest effect) on the same seeds: fix the matched baseline (train every input, keep "
    "its weights as the canonical one does), or submit without one to be judged against the track's.",
    ErrorCode.INCONSISTENT_BUILD: "build_model must depend only on spec and the seed the bench sets: not "
    "on its file name, its directory, the call stack, a call counter or anything else of the process "
    "it runs in.",
    ErrorCode.TOO_MANY_PARAMETERS: "Shrink the model below the track's param_cap (trainable "
    "parameters), e.g. fewer hidden units.",
    ErrorCode.INVALID_HPARAMS: "HPARAMS must be a dict mapping a name to a non-empty list of "
    "JSON numbers/strings/bools; at most the track's max_configs combinations.",
    ErrorCode.HPARAM_NO_EFFECT: "Two configurations of the HPARAMS grid built the same model (the same "
    "graph and weights): a key the model does not read only multiplies the sweep. Remove it, or read "
    "it in build_model (spec['hparams'][name]).",
    ErrorCode.INVALID_MECHANISM: "MECHANISM must be a dict with 'quantity', 'prediction' and "
    "'expect' (kind close_to/less_than/greater_than/lower_than_baseline/higher_than_baseline), "
    "and the file must define `measure(model, x)` returning a float.",
    ErrorCode.MECHANISM_ERROR: "`measure(model, x)` raised or returned a non-finite value; make it "
    "return one finite float for any trained model of either arm.",
    ErrorCode.TRAINING_ERROR: "The model raised during training or evaluation; run it on a batch of "
    "the track's input shape locally (ideabench run IDEA.py --track NAME).",
    ErrorCode.DIVERGED: "More than a quarter of an arm's final runs diverged (NaN/inf): no verdict "
    "is given. Make the model numerically stable at the track's learning rates (normalisation, "
    "smaller init, bounded activations).",
    ErrorCode.TIMEOUT: "Make the model smaller or faster; the whole protocol must finish within the "
    "time limit.",
    ErrorCode.CAPTURE_TIMEOUT: "build_model must return quickly: it builds a model, it does not train "
    "or wait (no sleeps, downloads or loops over data); every config and init seed is built in the "
    "track's capture limit (capture_timeout_s in GET /v1/tracks/{name}).",
    ErrorCode.OUT_OF_MEMORY: "Use fewer parameters or smaller activations; the run exceeded its "
    "memory limit.",
    ErrorCode.CRASHED: "The process running the idea died without an answer (segfault or os._exit); "
    "remove native calls and process exits from the idea.",
    ErrorCode.OUTPUT_LIMIT: "Print less: stdout/stderr of an idea are capped.",
    ErrorCode.SANDBOX_VIOLATION: "Ideas may not use the network, spawn processes or touch files "
    "outside their temp dir.",
    ErrorCode.UNKNOWN_TRACK: "List the tracks with GET /v1/tracks (or `ideabench tracks`).",
    ErrorCode.INVALID_TRACK: "Fix the track file as the message says: it must define a literal "
    "CARD dict, make_splits(seed) and build_baseline(spec); see docs/custom-tracks.md or "
    "examples/tracks/so3_spectral.py.",
    ErrorCode.TRACK_NOT_READY: "The track is still being validated (or was rejected); poll "
    "GET /v1/tracks/{name@version} until its status is active.",
    ErrorCode.TRACK_UNAVAILABLE: "This deployment cannot run the track (its card's unavailable_reason "
    "says why): choose another from GET /v1/tracks (those with available: true), or ask an operator.",
    ErrorCode.TRACK_DEPRECATED: "Submit to the track's newest version; GET /v1/tracks lists it.",
    ErrorCode.TRACK_NAME_TAKEN: "Choose another name: built-in track names and names registered by "
    "another author are taken.",
    ErrorCode.MATCHED_BASELINE_UNSUPPORTED: "Submit without baseline_code: a custom track's baseline is the "
    "build its validation checked. To judge against another baseline, register a version of the track "
    "whose build_baseline is that baseline.",
    ErrorCode.CANCELLED: "The job was cancelled; submit it again if that was a mistake.",
    ErrorCode.SANDBOX_UNAVAILABLE: "Not your idea's fault: this worker lacks a layer of the sandbox "
    "that submitted code must run in, so it judges nothing. Submit again later; an operator installs "
    "bubblewrap and libseccomp (scripts/system_deps.sh) or moves the worker (docs/deploy.md).",
    ErrorCode.INTERNAL: "This is a bug in ideabench, not in the idea; retry later.",
}


class BenchError(Exception):
    """An error with a stable code, a message for the agent and a hint on what to fix."""

    def __init__(self, code: ErrorCode | str, message: str, hint: str | None = None) -> None:
        self.code = ErrorCode(code)
        self.message = message
        self.hint = hint if hint is not None else DEFAULT_HINTS.get(self.code, "")
        super().__init__(f"{self.code.value}: {message}")

    def to_dict(self) -> dict[str, str]:
        """The JSON shape every API error uses: ``{"code", "message", "hint"}``."""
        return {"code": self.code.value, "message": self.message, "hint": self.hint}


def remember_source(filename: str, source: str) -> None:
    """Let tracebacks quote lines of ``source``, run from a string as ``filename`` (issue 27.8:
    messages said ``(idea.py line 4: )``, the line's text missing)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def user_frame(exc: BaseException, filename: str) -> tuple[int, str] | None:
    """The line number and text of the innermost frame of the submitted file in ``exc``'s
    traceback, if any."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == filename:
            return int(frame.lineno or 0), (frame.line or "").strip()[:200]
    return None
