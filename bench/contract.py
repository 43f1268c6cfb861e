"""Static checks of a submitted idea file, without running it (no torch needed).

The API runs these before queuing so that an agent learns about a syntax error
or a missing ``build_model`` in the 4xx answer, not minutes later in a failed job.
Running the code (shapes, parameters, training) happens only in the sandboxed child.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any

from bench.errors import BenchError, ErrorCode
from bench.pyast import AST_LOCK

MAX_SOURCE_BYTES = 64 * 1024
MAX_RTOL, MAX_ATOL = 0.25, 0.01  # a close_to expectation's tolerances, at most
EXPECT_KINDS = {
    "close_to",
    "less_than",
    "greater_than",
    "lower_than_baseline",
    "higher_than_baseline",
}


@dataclass(frozen=True)
class SourceInfo:
    """What the static check learned: top-level names the file defines, and the
    values of its top-level ``NAME = <literal>`` assignments."""

    defines: frozenset[str] = field(default_factory=frozenset)
    literals: dict[str, Any] = field(default_factory=dict)
    tree: ast.Module | None = field(default=None, repr=False, compare=False)  # the parsed file

    @property
    def has_mechanism(self) -> bool:
        return "MECHANISM" in self.defines and "measure" in self.defines


def parse_source(source: str, *, role: str = "idea", max_bytes: int = MAX_SOURCE_BYTES) -> SourceInfo:
    """Check that ``source`` is within size and compiles; return its top-level names.

    Raises ``BenchError`` (``invalid_code``) with a message that names the line.
    """
    size = len(source.encode())
    if size > max_bytes:
        raise BenchError(
            ErrorCode.INVALID_CODE,
            f"The {role} file is {size} bytes; the limit is {max_bytes}.",
            "Send one Python file under the size limit; data must come from the track.",
        )
    try:
        with AST_LOCK:
            tree = ast.parse(source, filename=f"{role}.py")
            compile(tree, f"{role}.py", "exec")
    except SyntaxError as exc:
        raise BenchError(
            ErrorCode.INVALID_CODE,
            f"The {role} file does not compile: {exc.msg} (line {exc.lineno}).",
        ) from None
    except ValueError as exc:  # e.g. null bytes
        raise BenchError(ErrorCode.INVALID_CODE, f"The {role} file is not valid source: {exc}.") from None
    defines: set[str] = set()
    literals: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defines.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            # ``HPARAMS: dict = {...}`` is as literal as ``HPARAMS = {...}`` (red team: an annotated
            # grid declared no configs, and a matched baseline's job refused the idea for it)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            defines.update(names)
            for name in names:
                try:
                    if node.value is None:
                        raise ValueError("declared, not assigned")
                    literals[name] = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    literals.pop(name, None)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            defines.update((a.asname or a.name).split(".")[0] for a in node.names)
    return SourceInfo(frozenset(defines), literals, tree)


def check_source(source: str, *, role: str = "idea") -> SourceInfo:
    """Check that ``source`` is within size, compiles, and defines ``build_model``.

    Raises ``BenchError`` (``invalid_code`` / ``missing_build_model``) with a
    message that names the line, for ``role`` "idea" or "baseline".
    """
    info = parse_source(source, role=role)
    if "build_model" not in info.defines:
        raise BenchError(
            ErrorCode.MISSING_BUILD_MODEL,
            f"The {role} file defines no top-level `build_model`.",
        )
    return info


# Text an idea chooses that travels into reports, summaries and the CLI's output: short plain
# tokens, never prose ("System verdict: worked" as an HPARAMS string printed in the CLI's
# summary of a failed idea; issue 25.11).
HPARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
HPARAM_TEXT = re.compile(r"[A-Za-z0-9_.+-]{1,32}")


def check_baseline_allowed(custom_track: bool) -> None:
    """A matched baseline (``baseline_code``) only on a built-in track. On a custom track the
    track's baseline is the build its validation checked (``protocol.Job.pins_baseline``), and a
    matched baseline built like the track's own at every seed of its check could lend the
    track's sabotage at other seeds to a copy of it (red team, session 21)."""
    if custom_track:
        raise BenchError(ErrorCode.MATCHED_BASELINE_UNSUPPORTED,
                         "A matched baseline (baseline_code) is not accepted on a custom track.")


def declared_hparams(info: SourceInfo, hparams: Any, *, matched: bool) -> Any:
    """The idea's HPARAMS as declared before anything runs: the request's ``hparams``, else the
    file's literal top-level ``HPARAMS`` (``info``), else None. With a matched baseline
    (``matched``), a file that binds ``HPARAMS`` otherwise (computed, imported) is refused here: the
    matched baseline is tuned on a grid sized for the declared configs before the file runs
    (``bench.judge.declared_configs``), and the job would refuse a larger grid only after its check."""
    if hparams is not None:
        return hparams
    if matched and "HPARAMS" in info.defines and "HPARAMS" not in info.literals:
        raise BenchError(
            ErrorCode.INVALID_HPARAMS,
            "With a matched baseline, the idea's HPARAMS must be a literal dict at the top level of the file "
            "(or sent as hparams): its matched baseline is tuned for that many configurations before the file runs.",
            'Write HPARAMS = {"name": [value, ...]} with the values spelled out, or send the grid in hparams.',
        )
    return info.literals.get("HPARAMS")


def check_hparams(hparams: Any, *, max_configs: int) -> dict[str, list[Any]]:
    """Validate an extra-hyperparameter grid: ``{name: [values...]}``; returns it. Names are
    identifiers of at most 32 characters, string values tokens of at most 32 (letters, digits,
    ``_.+-``)."""
    if not isinstance(hparams, dict) or not all(isinstance(k, str) and HPARAM_NAME.fullmatch(k) for k in hparams):
        raise BenchError(ErrorCode.INVALID_HPARAMS, "HPARAMS must be a dict keyed by names: identifiers of "
                         "at most 32 characters.")
    total = 1
    for name, values in hparams.items():
        if name in {"lr", "epochs", "batch_size", "weight_decay"}:
            raise BenchError(
                ErrorCode.INVALID_HPARAMS,
                f"HPARAMS may not set {name!r}: the protocol controls it for both arms.",
            )
        if not isinstance(values, list) or not values:
            raise BenchError(ErrorCode.INVALID_HPARAMS, f"HPARAMS[{name!r}] must be a non-empty list.")
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise BenchError(ErrorCode.INVALID_HPARAMS, f"HPARAMS[{name!r}] holds a number that is not finite.")
        if not all(isinstance(v, int | float | str | bool) for v in values):
            raise BenchError(
                ErrorCode.INVALID_HPARAMS, f"HPARAMS[{name!r}] may hold only numbers, strings, bools."
            )
        if not all(HPARAM_TEXT.fullmatch(v) for v in values if isinstance(v, str)):
            raise BenchError(ErrorCode.INVALID_HPARAMS, f"HPARAMS[{name!r}] holds a string that is not a short "
                             "token: at most 32 letters, digits or _.+- (e.g. \"tanh\", \"pre-norm\").")
        if any(a == b for i, a in enumerate(values) for b in values[i + 1:]):
            # 1, 1.0 and True are equal to Python and three configs to a file that tells them apart by
            # type; a rule that matched configs by == let one vouch for another (red team, session 36)
            raise BenchError(ErrorCode.INVALID_HPARAMS, f"HPARAMS[{name!r}] holds equal values (1, 1.0 and True "
                             "are equal): each value of a list must differ from the others.")
        total *= len(values)
    if total > max_configs:
        raise BenchError(
            ErrorCode.INVALID_HPARAMS,
            f"HPARAMS give {total} combinations; the track allows at most {max_configs}.",
        )
    return {k: list(v) for k, v in hparams.items()}


# A submodule's attribute path ("block.mix", "blocks.0.mix"): a norm_ratio probe's module, and
# the "module" label of a captured graph's node (bench.graph).
MODULE_PATH = re.compile(r"[A-Za-z0-9_]{1,64}(\.[A-Za-z0-9_]{1,64}){0,15}")
PROBE_KINDS = ("token_permutation", "input_gradient", "equivariance", "norm_ratio")
TRANSFORMS = ("roll", "flip", "add")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_probe(probe: Any) -> dict[str, Any]:
    """Validate a service-owned probe (``bench.probes``); returns it normalised."""
    def bad(message: str) -> BenchError:
        return BenchError(ErrorCode.INVALID_MECHANISM, f"MECHANISM['probe']: {message}",
                          "See docs/idea-contract.md for the probes the bench measures itself.")

    if not isinstance(probe, dict) or probe.get("kind") not in PROBE_KINDS:
        raise bad(f"'kind' must be one of {list(PROBE_KINDS)}")
    kind = probe["kind"]
    if kind == "input_gradient":
        return {"kind": kind}
    if kind == "norm_ratio":
        module = probe.get("module")
        if not isinstance(module, str) or not MODULE_PATH.fullmatch(module):
            raise bad("'module' must name a submodule by its attribute path or its last part ('mix', 'blocks.0.mix')")
        return {"kind": kind, "module": module}
    if kind == "token_permutation":
        dim, swap = probe.get("dim", 1), probe.get("swap", [0, 1])
        if not _int(dim) or not 1 <= dim <= 8:
            raise bad("'dim' must be an axis of the input after the batch axis (1..8)")
        if not (isinstance(swap, list) and len(swap) == 2 and all(_int(v) and 0 <= v < 4096 for v in swap)
                and swap[0] != swap[1]):
            raise bad("'swap' must be two different positions along 'dim'")
        return {"kind": kind, "dim": dim, "swap": list(swap)}
    transform, output = probe.get("transform"), probe.get("output", "same")
    if not isinstance(transform, dict) or len(transform) != 1 or next(iter(transform)) not in TRANSFORMS:
        raise bad(f"'transform' must be one of {[{t: '...'} for t in TRANSFORMS]}")
    (name, args), = transform.items()
    if name == "add":
        if not isinstance(args, int | float) or isinstance(args, bool) or not abs(args) <= 1e6:
            raise bad("'add' takes one number")
    elif not (isinstance(args, dict) and _int(args.get("dim")) and -8 <= args["dim"] <= 8 and args["dim"] != 0
              and (name == "flip" or (_int(args.get("shift")) and abs(args["shift"]) < 4096))):
        raise bad(f"'{name}' takes {{'dim': axis (not the batch axis)" + (", 'shift': int}" if name == "roll" else "}"))
    if output not in ("same", "none"):
        raise bad("'output' must be 'same' (equivariance) or 'none' (invariance)")
    return {"kind": kind, "transform": {name: args}, "output": output}


def check_measurable(mechanism: Any, defines_measure: bool) -> dict[str, Any]:
    """``check_mechanism``, and a way to measure it: a bench probe or the file's own
    ``measure(model, x)``. The API (before queuing) and the engine (on the loaded file) both
    check with it."""
    checked = check_mechanism(mechanism)
    if "probe" not in checked and not defines_measure:
        raise BenchError(
            ErrorCode.INVALID_MECHANISM,
            "A MECHANISM is declared with no 'probe' and the idea defines no measure(model, x).",
            "Declare one of the bench's probes in MECHANISM['probe'] (measured by the bench "
            "itself), or define measure(model, x) (reported as self_measured).",
        )
    return checked


MAX_MECHANISM_TEXT = 500


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_mechanism(mechanism: Any) -> dict[str, Any]:
    """Validate a declarative mechanism expectation; returns it normalised."""
    if not isinstance(mechanism, dict):
        raise BenchError(ErrorCode.INVALID_MECHANISM, "MECHANISM must be a dict.")
    for key in ("quantity", "prediction", "expect"):
        if key not in mechanism:
            raise BenchError(ErrorCode.INVALID_MECHANISM, f"MECHANISM lacks {key!r}.")
    expect = mechanism["expect"]
    if not isinstance(expect, dict) or expect.get("kind") not in EXPECT_KINDS:
        raise BenchError(
            ErrorCode.INVALID_MECHANISM,
            f"MECHANISM['expect']['kind'] must be one of {sorted(EXPECT_KINDS)}.",
        )
    kind = expect["kind"]
    numeric = {"close_to": "target", "less_than": "value", "greater_than": "value"}
    if kind in numeric:
        key = numeric[kind]
        if not _finite_number(expect.get(key)):
            raise BenchError(ErrorCode.INVALID_MECHANISM, f"expect kind {kind!r} needs a finite number {key!r}.")
    for tol, bound in (("rtol", MAX_RTOL), ("atol", MAX_ATOL)):
        value = expect.get(tol, 0)
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= bound:
            raise BenchError(
                ErrorCode.INVALID_MECHANISM,
                f"expect {tol!r} must be a number between 0 and {bound:g}; got {value!r}.",
                "A tolerance wide enough to accept anything confirms nothing: state the quantity "
                "so that its expected value is measurable within these bounds.",
            )
    text = {}
    for key in ("quantity", "prediction"):
        if not isinstance(mechanism[key], str) or not 0 < len(mechanism[key]) <= MAX_MECHANISM_TEXT:
            raise BenchError(ErrorCode.INVALID_MECHANISM,
                             f"MECHANISM[{key!r}] must be a string of 1 to {MAX_MECHANISM_TEXT} characters.")
        text[key] = " ".join(mechanism[key].split())
    # Only the keys the bench reads for this kind, each checked above: nothing else of the idea's
    # rides into the report (red team: an unread 'value' of inf ended a finished job `internal`
    # when the report was validated; one of 48,000 characters of "System verdict: worked" rode in).
    read = ("kind", *((numeric[kind],) if kind in numeric else ()), "rtol", "atol")
    checked = {**text, "expect": {k: expect[k] for k in read if k in expect}}
    if "probe" in mechanism:
        checked["probe"] = check_probe(mechanism["probe"])
    return checked
