"""The child process that runs one arm's code: ``python -m bench.child PROTO_FD``.

It reads JSON commands on stdin and answers JSON lines on the protocol fd; the
arm's own stdout/stderr go to ``child.log`` in its working directory. It never
sees validation or test labels: the parent scores the predictions it returns.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from bench.errors import BenchError, ErrorCode
from bench.sandbox import violation

LOG_NAME = "child.log"
MAX_DATA_DIRS = 40


def _user_frame_hint(exc: BaseException, filename: str) -> str:
    """' (idea.py line N)' for the innermost frame of the submitted file, if any."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == filename:
            return f" ({filename} line {frame.lineno}: {frame.line})"
    return ""


def classify(exc: BaseException, filename: str, code: ErrorCode) -> BenchError:
    """Turn an exception raised by submitted code into a BenchError."""
    if isinstance(exc, BenchError):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return BenchError(
            ErrorCode.OUTPUT_LIMIT,
            f"output cap reached (stdout/stderr and files are capped by size): {text[:700]}",
        )
    refused = violation(exc)
    if refused is not None:
        return BenchError(
            ErrorCode.SANDBOX_VIOLATION, f"{refused}: {text[:700]}{_user_frame_hint(exc, filename)}"
        )
    if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or (
        "out of memory" in str(exc).lower()
    ):
        return BenchError(ErrorCode.OUT_OF_MEMORY, text[:500] + _user_frame_hint(exc, filename))
    return BenchError(code, text[:800] + _user_frame_hint(exc, filename))


TRACK_FILE = "track.py"
SPLIT_NAMES = ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test")


def track_module(source: str) -> types.ModuleType:
    """Execute a custom track file; it must define ``make_splits`` and ``build_baseline``."""
    module = types.ModuleType("submitted_track")
    module.__file__ = TRACK_FILE
    try:
        exec(compile(source, TRACK_FILE, "exec"), module.__dict__)
    except Exception as exc:
        raise classify(exc, TRACK_FILE, ErrorCode.INVALID_TRACK) from None
    for name in ("make_splits", "build_baseline"):
        if not callable(getattr(module, name, None)):
            raise BenchError(ErrorCode.INVALID_TRACK, f"The track file defines no callable {name}.")
    return module


def warm() -> dict[str, Any]:
    """Do the first-use work of training early (bench.warm): import ``torch.func`` and
    ``torch._dynamo``, which the first functional gradient of a recurrent model would
    import (1-7 s). Nothing is trained: once these are imported, a child's first
    batched group costs no more than its later ones (measured on the built-in tracks)."""
    import torch._dynamo  # noqa: F401 - imported for its side effect: the module is loaded
    import torch.func  # noqa: F401

    return {}


def make_data(cmd: dict[str, Any]) -> dict[str, Any]:
    """Run a custom track's ``make_splits(seed)`` for each item; save the six arrays as .npy.

    Runs in its own short-lived sandboxed child: it writes labels of every split,
    which no arm's child may read. The parent checks shapes, types and sizes.
    """
    import time

    import numpy as np
    import torch

    module = track_module(cmd["track_source"])
    seconds = []
    for item in cmd["items"]:
        started = time.perf_counter()
        try:
            splits = module.make_splits(int(item["seed"]))
            if isinstance(splits, dict):
                arrays = [splits[name] for name in SPLIT_NAMES]
            elif isinstance(splits, tuple | list):
                arrays = list(splits)
            else:
                arrays = [getattr(splits, name) for name in SPLIT_NAMES]
            if len(arrays) != len(SPLIT_NAMES):
                raise ValueError(f"make_splits returned {len(arrays)} arrays, not 6")
            out = Path(item["dir"])
            out.mkdir(parents=True, exist_ok=True)
            for name, value in zip(SPLIT_NAMES, arrays, strict=True):
                if isinstance(value, torch.Tensor):
                    value = value.detach().cpu().numpy()
                np.save(out / f"{name}.npy", np.ascontiguousarray(np.asarray(value)), allow_pickle=False)
        except BenchError:
            raise
        except Exception as exc:
            raise classify(exc, TRACK_FILE, ErrorCode.INVALID_TRACK) from None
        seconds.append(time.perf_counter() - started)
    return {"seconds": seconds}


class ArmRunner:
    """State of the child: the arm's builder, its data and its kept models."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.build: Any = None
        self.filename = "baseline (track)"
        self.spec: dict[str, Any] = {}
        self.param_cap = 0
        self.role = "idea"
        self.module: types.ModuleType | None = None
        self.data: dict[str, dict[str, Any]] = {}
        self.kept: dict[str, Any] = {}
        self.device = torch.device("cpu")

    # -- commands -------------------------------------------------------------
    def load(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Import the arm's code (or the track's canonical baseline)."""
        torch = self.torch
        self.role = cmd["role"]
        self.spec = cmd["spec"]
        self.param_cap = int(cmd["param_cap"])
        wanted = cmd.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(wanted)
        answer: dict[str, Any] = {"device": str(self.device), "hparams": {}, "mechanism": None}
        if cmd.get("code") is None:
            if cmd.get("track_source") is not None:  # a custom track's canonical baseline
                self.filename = TRACK_FILE
                self.build = track_module(cmd["track_source"]).build_baseline
            else:
                from bench.registry import load_track

                self.build = load_track(cmd["track"]).build_baseline
            answer["has_measure"] = False
            return answer
        self.filename = f"{self.role}.py"
        module = types.ModuleType(f"submitted_{self.role}")
        module.__file__ = self.filename
        try:
            exec(compile(cmd["code"], self.filename, "exec"), module.__dict__)
        except Exception as exc:
            raise classify(exc, self.filename, ErrorCode.INVALID_CODE) from None
        self.module = module
        build = getattr(module, "build_model", None)
        if not callable(build):
            raise BenchError(
                ErrorCode.MISSING_BUILD_MODEL, f"The {self.role} file defines no callable build_model."
            )
        self.build = build
        hparams = getattr(module, "HPARAMS", {}) or {}
        mechanism = getattr(module, "MECHANISM", None)
        try:
            json.dumps([hparams, mechanism])
        except (TypeError, ValueError):
            raise BenchError(
                ErrorCode.INVALID_HPARAMS, "HPARAMS and MECHANISM must be plain JSON data."
            ) from None
        answer.update(
            hparams=hparams, mechanism=mechanism, has_measure=callable(getattr(module, "measure", None))
        )
        return answer

    def _arrays(self, data_dir: str) -> dict[str, Any]:
        if data_dir not in self.data:
            import numpy as np

            torch = self.torch
            arrays = {
                name: torch.from_numpy(np.load(Path(data_dir) / f"{name}.npy")).to(self.device)
                for name in ("x_train", "y_train", "x_val", "x_test")
            }
            while len(self.data) >= MAX_DATA_DIRS:  # runs come grouped by seed or by batch group
                self.data.pop(next(iter(self.data)))
            self.data[data_dir] = arrays
        return self.data[data_dir]

    def _build(self, hparams: dict[str, Any], init_seed: int) -> Any:
        from bench.trainer import build_checked

        spec = dict(self.spec, hparams=dict(hparams))
        try:
            return build_checked(
                self.build, spec, init_seed=init_seed, param_cap=self.param_cap,
                device=self.device, role=self.role,
            )
        except BenchError:
            raise
        except Exception as exc:
            raise classify(exc, self.filename, ErrorCode.TRAINING_ERROR) from None

    def check(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Build one model per hparams config; check output shape; count parameters."""
        from bench.trainer import check_output_shape, count_parameters

        x = self._arrays(cmd["data_dir"])["x_train"]
        counts = []
        for hparams in cmd["configs"]:
            model = self._build(hparams, init_seed=0)
            try:
                check_output_shape(model, x, self.spec["output_shape"], self.role)
            except BenchError:
                raise
            except Exception as exc:
                raise classify(exc, self.filename, ErrorCode.TRAINING_ERROR) from None
            counts.append(count_parameters(model))
        answer: dict[str, Any] = {"n_params": counts}
        if cmd.get("probe"):
            answer["vectorizable"], answer["why"] = self._probe(cmd)
        return answer

    def _probe(self, cmd: dict[str, Any]) -> tuple[bool, str]:
        """Whether every config's models can train batched (bench.vectorized), and why not."""
        from bench.vectorized import probe

        arrays = self._arrays(cmd["data_dir"])
        for hparams in cmd["configs"]:
            try:
                models = [self._build(hparams, init_seed=s) for s in (0, 1)]
            except BenchError as exc:
                return False, exc.message
            reason = probe(models, arrays["x_train"], arrays["y_train"], cmd.get("loss", "mse"))
            if reason is not None:
                return False, reason
        return True, ""

    def train(self, cmd: dict[str, Any], send: Any) -> dict[str, Any]:
        """Train the runs, sending one event per finished run.

        ``path == "vectorized"``: the runs of one ``group`` train as one batched model
        (bench.vectorized); a group that turns out not to batch falls back to one run
        at a time, and its events say so. Otherwise each run trains on its own.
        """
        runs = [run for run in cmd["runs"] if "restore" not in run]
        needed = {run["data_dir"] for run in runs}
        for stale in [d for d in self.data if d not in needed]:  # free earlier stages' data
            del self.data[stale]
        for run in cmd["runs"]:
            if "restore" in run:
                self._restore(run)
        if cmd.get("path") != "vectorized":
            for run in runs:
                self._train_one(run, send)
            return {}
        groups: dict[Any, list[dict[str, Any]]] = {}
        for run in runs:
            groups.setdefault(run.get("group", run["run_id"]), []).append(run)
        for group in groups.values():
            if not self._train_group(group, send):
                for run in group:
                    self._train_one(run, send)
        return {}

    def _restore(self, run: dict[str, Any]) -> None:
        """Keep a model rebuilt from a stored state_dict (a cached baseline run) for ``measure``."""
        model = self._build(run["cfg"].get("hparams", {}), run["init_seed"])
        state = self.torch.load(run["restore"], map_location=self.device, weights_only=True)
        model.load_state_dict(state)
        model.eval()
        self.kept[run["run_id"]] = model

    @staticmethod
    def _config(run: dict[str, Any]) -> Any:
        from bench.trainer import RunConfig

        cfg = run["cfg"]
        return RunConfig(
            lr=float(cfg["lr"]), epochs=int(cfg["epochs"]), batch_size=int(cfg["batch_size"]),
            weight_decay=float(cfg.get("weight_decay", 0.0)), loss=run["loss"],
        )

    def _finish(self, run: dict[str, Any], result: Any, path: str, send: Any) -> None:
        import numpy as np

        from bench.trainer import count_parameters

        pred_path = Path(f"pred_{run['run_id']}.npy")
        np.save(pred_path, result.predictions.numpy())
        if run.get("keep"):
            self.kept[run["run_id"]] = result.model
        event = {
            "event": "run", "run_id": run["run_id"], "pred_path": str(pred_path.resolve()),
            "diverged": result.diverged, "seconds": result.seconds,
            "n_params": count_parameters(result.model), "path": path,
        }
        if run.get("save_state"):  # for the baseline cache: measure() needs the trained model
            state_path = Path(f"state_{run['run_id']}.pt")
            self.torch.save(result.model.state_dict(), state_path)
            event["state_path"] = str(state_path.resolve())
        send(event)

    def _train_one(self, run: dict[str, Any], send: Any) -> None:
        from bench.trainer import train

        arrays = self._arrays(run["data_dir"])
        model = self._build(run["cfg"].get("hparams", {}), run["init_seed"])
        x_eval = arrays["x_val" if run["eval"] == "val" else "x_test"]
        try:
            result = train(
                model, self._config(run), arrays["x_train"], arrays["y_train"], x_eval,
                order_seed=run["order_seed"],
            )
        except Exception as exc:
            raise classify(exc, self.filename, ErrorCode.TRAINING_ERROR) from None
        self._finish(run, result, "sequential", send)

    def _train_group(self, group: list[dict[str, Any]], send: Any) -> bool:
        """Train ``group`` batched; False (nothing sent) when it cannot be batched."""
        from bench.vectorized import train_group

        dirs: dict[tuple[str, str], int] = {}
        datasets: list[tuple[Any, Any, Any]] = []
        index: list[int] = []
        for run in group:
            key = (run["data_dir"], run["eval"])
            if key not in dirs:
                arrays = self._arrays(run["data_dir"])
                dirs[key] = len(datasets)
                x_eval = arrays["x_val" if run["eval"] == "val" else "x_test"]
                datasets.append((arrays["x_train"], arrays["y_train"], x_eval))
            index.append(dirs[key])
        models = [self._build(run["cfg"].get("hparams", {}), run["init_seed"]) for run in group]
        try:
            results = train_group(
                models, [self._config(run) for run in group], datasets, index,
                [run["order_seed"] for run in group],
            )
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - the one-at-a-time path reports real errors
            print(f"vectorized group fell back to one run at a time: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            return False
        for run, result in zip(group, results, strict=True):
            self._finish(run, result, "vectorized", send)
        return True

    def measure(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Call the arm's ``measure(model, x)`` on kept models with the given probes."""
        import math

        import numpy as np

        measure = getattr(self.module, "measure", None) if cmd.get("measure_code") is None else None
        if cmd.get("measure_code") is not None:
            # The idea's measurement applied to the baseline's trained models.
            namespace: dict[str, Any] = {}
            try:
                exec(compile(cmd["measure_code"], "idea.py", "exec"), namespace)
            except Exception as exc:
                raise classify(exc, "idea.py", ErrorCode.INVALID_CODE) from None
            measure = namespace.get("measure")
        if not callable(measure):
            raise BenchError(ErrorCode.INVALID_MECHANISM, "The idea declares MECHANISM but no measure().")
        values = []
        for item in cmd["runs"]:
            model = self.kept[item["run_id"]]
            probe = self.torch.from_numpy(np.load(item["probe_path"])).to(self.device)
            model.eval()
            try:
                value = float(measure(model, probe))
            except Exception as exc:
                raise classify(exc, "idea.py", ErrorCode.MECHANISM_ERROR) from None
            if not math.isfinite(value):
                raise BenchError(ErrorCode.MECHANISM_ERROR, f"measure() returned {value}.")
            values.append(value)
        return {"values": values}


def main() -> None:
    """Serve commands until stdin closes or an ``exit`` command arrives."""
    proto = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    log = os.open(LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)

    def send(message: dict[str, Any]) -> None:
        proto.write(json.dumps(message) + "\n")

    try:
        import torch

        torch.set_num_threads(1)
        runner = ArmRunner()
    except Exception as exc:  # torch itself failed to import: the environment, not the idea
        send({"error": BenchError(ErrorCode.INTERNAL, f"child start failed: {exc}").to_dict()})
        return
    send({"ready": True, "torch": torch.__version__})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.get("op")
        if op == "exit":
            break
        try:
            if op == "load":
                reply = runner.load(cmd)
            elif op == "check":
                reply = runner.check(cmd)
            elif op == "train":
                reply = runner.train(cmd, send)
            elif op == "measure":
                reply = runner.measure(cmd)
            elif op == "make_data":
                reply = make_data(cmd)
            elif op == "warm":
                reply = warm()
            else:
                raise BenchError(ErrorCode.INTERNAL, f"unknown child op {op!r}")
            send({"ok": True, **reply})
        except BenchError as exc:
            send({"error": exc.to_dict()})
        except MemoryError:
            send({"error": BenchError(ErrorCode.OUT_OF_MEMORY, "MemoryError").to_dict()})
        except Exception as exc:
            send({"error": BenchError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}").to_dict()})


if __name__ == "__main__":
    main()
