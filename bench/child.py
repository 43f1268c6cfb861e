"""A sandboxed child process: ``python -m bench.child PROTO_FD``.

It reads JSON commands on stdin and answers JSON lines on the protocol fd; its
stdout/stderr go to ``child.log`` in its working directory. A child serves one side
for its whole life, set by its first command:

- a *capture* child (``bench.capture``) executes one submitted file and exports its
  model as graphs; it holds no data;
- a *trainer* child (``ArmRunner``) never executes submitted code: it rebuilds the
  captured graphs (``bench.graph``), trains them with the engine's trainer and writes
  predictions; it never sees validation or test labels (the parent scores);
- a *track data* child runs a custom track's ``make_splits`` (``make_data``).
"""

from __future__ import annotations

import errno
import json
import math
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import wire_names as wire
from bench.errors import BenchError, ErrorCode, remember_source, user_frame
from bench.sandbox import LOG_NAME, violation

MAX_DATA_DIRS = 40


def _user_frame_hint(exc: BaseException, filename: str) -> str:
    """' (idea.py line N: its text)' for the innermost frame of the submitted file, if any."""
    found = user_frame(exc, filename)
    return f" ({filename} line {found[0]}: {found[1]})" if found else ""


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
    remember_source(TRACK_FILE, source)
    try:
        exec(compile(source, TRACK_FILE, "exec"), module.__dict__)
    except Exception as exc:
        raise classify(exc, TRACK_FILE, ErrorCode.INVALID_TRACK) from None
    for name in ("make_splits", "build_baseline"):
        if not callable(getattr(module, name, None)):
            raise BenchError(ErrorCode.INVALID_TRACK, f"The track file defines no callable {name}.")
    return module


def warm(cmd: dict[str, Any]) -> dict[str, Any]:
    """Do the first-use work of training early (bench.warm): import ``torch.func`` and
    ``torch._dynamo``, which the first functional gradient of a recurrent model would
    import (1-7 s). Nothing is trained: once these are imported, a child's first
    batched group costs no more than its later ones (measured on the built-in tracks).
    ``export``: a capture child also exports a tiny model once (torch.export's first call
    loads its tracing machinery); no submitted code is involved."""
    import torch
    import torch._dynamo  # noqa: F401 - imported for its side effect: the module is loaded
    import torch.func  # noqa: F401

    if cmd.get("export"):
        from bench.graph import export_graph

        export_graph(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()), torch.zeros(4, 2))
    return {}


def warm_count() -> None:
    """The compute count's first use (``bench.cost``) on a tiny graph, as the trainer counts a
    captured model: fake tensors' first dispatch of the common ops (a product, a transpose, an
    activation) through the graph's interpreter fills caches a forked child inherits; without it
    a trainer's first count of the smoke baseline took 270 ms of CPU, 55 ms with it (session 33)."""
    import numpy as np
    import torch

    from bench.cost import forward_costs
    from bench.graph import rebuild

    def call(name: str, op: str, *args: str) -> dict[str, Any]:
        return {"name": name, "op": "call_function", "target": op, "args": [{"$node": a} for a in args],
                "kwargs": {}}

    doc = {"format": 1, "inputs": [{"kind": "parameter", "name": "w", "target": "w"},
                                   {"kind": "user", "name": "x", "target": ""}],
           "outputs": [{"kind": "user", "target": "r"}],
           "nodes": [{"name": "w", "op": "placeholder"}, {"name": "x", "op": "placeholder"},
                     call("t", "aten.t.default", "w"), call("m", "aten.mm.default", "x", "t"),
                     call("r", "aten.relu.default", "m"), {"name": "output", "op": "output", "args": [[{"$node": "r"}]]}]}
    model = rebuild({"train": doc, "eval": doc}, {"w": np.ones((4, 3), np.float32)}, torch.device("cpu"))
    forward_costs(model, torch.zeros(16, 3), {2, 5}, {1, 3})


def torch_settings() -> None:
    """How every child computes, for its whole life: one torch thread, and denormal floats
    (below about 1.2e-38 in float32) read and written as zero (the CPU's FTZ/DAZ flags,
    ``torch.set_flush_denormal``: per thread, and a child computes on its one thread).

    A CPU computes with denormals up to a hundred times slower, and they appear where a model's
    values underflow, as at a high learning rate (GELU of a large negative input, gradients
    dying out under a cosine schedule): dynamics' example at the sweep's top rate (0.09) took
    1.97 CPU-s a run, 0.80 flushed, as at its best rate (docs/performance.md, "Session 31").
    What changes lies below every metric's resolution, the same on both arms and on every
    rerun. Set for the process, not around training: a graph can tell the two modes apart
    (``1e-30 * 1e-9 > 0``), so the rows predicted alone after training, the probes and the
    capture's checks must run in the mode the evaluation ran in
    (``tests/security/hostile/denormal_mode.py``)."""
    import torch

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)


def prepare() -> None:
    """What a fork server (``bench.sandbox.zygote``) does once, before it forks this module's
    children: the imports ``main`` would do and a capture child's warm-up (``warm`` with an
    export), and a count of a tiny captured model's compute (``warm_count``). No submitted code
    is involved; each forked child then starts with it done."""
    torch_settings()
    import bench.capture  # noqa: F401 - imported for its modules (the child's first command needs them)

    warm({"export": True})
    warm_count()


def make_data(cmd: dict[str, Any]) -> dict[str, Any]:
    """Run a custom track's ``make_splits(seed)`` for each item; save the six arrays as .npy.

    Runs in its own short-lived sandboxed child: it writes labels of every split,
    which no arm's child may read. The parent checks shapes, types and sizes.
    """
    import numpy as np
    import torch

    module = track_module(cmd["track_source"])
    for item in cmd["items"]:
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
    return {}  # the parent times the command itself


class ArmRunner:
    """The trusted trainer's state in its child: the arm's captured graphs, data, kept models.

    It imports no submitted code: each model is rebuilt from the capture (``bench.graph``)
    that the parent checked and copied into the job's data directory.
    """

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.spec: dict[str, Any] = {}
        self.param_cap = 0
        self.role = "idea"
        self.filename = "idea.py"
        self.capture_dir = Path()
        self.configs: list[str] = []  # canonical JSON of each config's hparams
        self.init_seeds: list[int] = []
        self.graphs: dict[int, Any] = {}
        self.data: dict[str, dict[str, Any]] = {}
        self.device = torch.device("cpu")

    # -- commands -------------------------------------------------------------
    def load(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Take the arm's capture: where it lies, its configs and the init seeds it was built for."""
        torch = self.torch
        self.role = cmd["role"]
        self.filename = f"{self.role}.py"
        self.spec = cmd["spec"]
        self.param_cap = int(cmd["param_cap"])
        wanted = cmd.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(wanted)
        captured = cmd["captured"]
        self.capture_dir = Path(captured["dir"])
        self.configs = [json.dumps(c, sort_keys=True) for c in captured["configs"]]
        self.init_seeds = [int(s) for s in captured["init_seeds"]]
        return {"device": str(self.device)}

    def more_inits(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """More init seeds whose tensors the parent has checked into the capture directory."""
        self.init_seeds += [int(s) for s in cmd["init_seeds"]]
        return {}

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

    def _build(self, hparams: dict[str, Any], init_seed: int, build_init: int | None = None) -> Any:
        """The captured model of config ``hparams`` with the init of ``init_seed``: the build
        captured for it, or for ``build_init`` (a seed's repeat run: that seed's build, its own
        initial values)."""
        import numpy as np

        from bench.capture import graph_path, tensor_path
        from bench.graph import CapturedModel, build_graph
        from bench.redraw import redraw

        config = self.configs.index(json.dumps(hparams, sort_keys=True))
        seed = self.init_seeds.index(init_seed if build_init is None else build_init)
        if config not in self.graphs:
            self.graphs[config] = {
                mode: build_graph(json.loads((self.capture_dir / graph_path(config, mode)).read_text()), self.device)
                for mode in ("train", "eval")
            }
        graphs = self.graphs[config]
        targets = [t for kind, t in graphs["train"][1].inputs if kind != "user"]
        tensors = {
            target: self.torch.from_numpy(
                np.load(self.capture_dir / tensor_path(config, seed, j), allow_pickle=False)
            )
            for j, target in enumerate(targets)
        }
        # The initial values are the bench's (bench.redraw): what a file ships is a scheme.
        parameters = [t for kind, t in graphs["train"][1].inputs if kind == "parameter"]
        tensors = redraw(tensors, parameters, init_seed)
        model = CapturedModel(graphs, tensors, self.device)
        n_params = model.param_words()
        if n_params > self.param_cap:
            raise BenchError(
                ErrorCode.TOO_MANY_PARAMETERS,
                f"The {self.role} holds {n_params} parameters (counted by the bench); this track's cap "
                f"is {self.param_cap}.",
            )
        return model

    def check(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Rebuild one model per config; check its output shape; count what it holds."""
        from bench.cost import CountBudget, forward_costs, forward_sizes
        from bench.trainer import check_output_shape

        arrays = self._arrays(cmd["data_dir"])
        x = arrays["x_train"]
        sizes = forward_sizes(len(x), int(cmd["batch_size"]), [len(arrays["x_val"]), len(arrays["x_test"])],
                              probed=bool(cmd.get("mechanism_probe")))
        counts, buffers, flops, tensors, forward_rows, forward_cost = [], [], [], [], [], []
        budget = CountBudget()  # the count's own time, bounded over all the arm's configs
        for hparams in cmd["configs"]:
            model = self._build(hparams, init_seed=self.init_seeds[0])
            # counted as built, before any forward: a train-mode forward rewrites running
            # statistics with data, which would count as what the model holds
            n_params, n_buffers = model.counts()
            counts.append(n_params)
            buffers.append(n_buffers)
            tensors.append(len(model._parameters))
            # counted on fake tensors first: a forward too dear to run is refused before one runs
            try:
                costs = forward_costs(model, x, *sizes, budget=budget)
            except Exception as exc:
                raise classify(exc, self.filename, ErrorCode.TRAINING_ERROR) from None
            flops.append(costs.per_example)
            forward_rows.append([rows for rows, _ in costs.forwards])
            forward_cost.append([cost for _, cost in costs.forwards])
            try:
                check_output_shape(model, x, self.spec["output_shape"], self.role)
            except BenchError:
                raise
            except Exception as exc:
                raise classify(exc, self.filename, ErrorCode.TRAINING_ERROR) from None
            if cmd.get("mechanism_probe"):  # a probe the arm cannot have measured fails now, not after training
                from bench.probes import check_applies

                try:
                    check_applies(cmd["mechanism_probe"], model, x[:7])
                except Exception as exc:  # the arm's graph or its claim, never the bench's
                    raise BenchError(ErrorCode.MECHANISM_ERROR, f"the {cmd['mechanism_probe']['kind']} probe "
                                     f"cannot be measured on the {self.role}'s model: {exc}"[:600],
                                     "The submodule must exist in both arms (the baseline's too), be called "
                                     "once with one activation in and one out, train a parameter and feed "
                                     "the model's output (docs/idea-contract.md).") from None
        answer: dict[str, Any] = {"n_params": counts, "n_buffers": buffers, "flops": flops, "n_tensors": tensors,
                                  "forward_rows": forward_rows, "forward_cost": forward_cost}
        if cmd.get("probe"):
            answer["vectorizable"], answer["why"] = self._probe(cmd)
        return answer

    def _probe(self, cmd: dict[str, Any]) -> tuple[bool, str]:
        """Whether every config's models can train batched (bench.vectorized), and why not."""
        from bench.vectorized import probe

        arrays = self._arrays(cmd["data_dir"])
        seeds = self.init_seeds[:2] if len(self.init_seeds) > 1 else self.init_seeds * 2
        for hparams in cmd["configs"]:
            try:
                models = [self._build(hparams, init_seed=s) for s in seeds]
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
        runs = cmd["runs"]
        needed = {run["data_dir"] for run in runs}
        for stale in [d for d in self.data if d not in needed]:  # free earlier stages' data
            del self.data[stale]
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

    def probe(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """A service-owned probe (``bench.probes``) on trained models: each rebuilt from the
        capture, given the trained tensors the parent wrote, measured on its probe batch."""
        import numpy as np

        from bench.probes import measure
        from bench.trainer import EVAL_CHUNK

        torch = self.torch
        values = []
        for item in cmd["runs"]:
            model = self._build(item["hparams"], int(item["init_seed"]))
            with torch.no_grad():
                for j, tensor in enumerate(model.tensors()):
                    trained = np.load(f"{item['prefix']}{j}.npy", allow_pickle=False)
                    tensor.copy_(torch.from_numpy(trained).to(tensor.device))
            x = torch.from_numpy(np.load(item["probe"], allow_pickle=False)).to(self.device)
            # The first batch the model predicted on, which begins with the probe rows.
            context = self._arrays(item["data_dir"])["x_test"][:EVAL_CHUNK] if item.get("data_dir") else None
            try:
                value = measure(cmd["probe"], model, x, context)
                if not math.isfinite(value):
                    raise ValueError(f"the measured value is {value}")
                values.append(value)
            except Exception as exc:
                raise BenchError(ErrorCode.MECHANISM_ERROR, f"the {cmd['probe']['kind']} probe failed on the "
                                 f"{self.role}'s model: {type(exc).__name__}: {exc}"[:600]) from None
        return {"values": values}

    @staticmethod
    def _config(run: dict[str, Any]) -> Any:
        from bench.trainer import RunConfig

        cfg = run["cfg"]
        return RunConfig(
            lr=float(cfg["lr"]), epochs=int(cfg["epochs"]), batch_size=int(cfg["batch_size"]),
            weight_decay=float(cfg.get("weight_decay", 0.0)), loss=run["loss"],
            schedule=str(run.get("schedule", "constant")),
        )

    def _finish(self, run: dict[str, Any], result: Any, path: str, send: Any, x_eval: Any) -> None:
        import numpy as np

        np.save(wire.prediction_file(run["run_id"]), result.predictions.numpy())
        rows = [int(i) for i in run.get("rows", [])]
        if rows:  # the rows the parent chose, each predicted alone (bench.protocol checks them)
            model = result.model
            model.eval()
            try:
                with self.torch.no_grad():
                    alone = [model(x_eval[i : i + 1]).float().cpu() for i in rows]
            except Exception as exc:
                raise BenchError(ErrorCode.ROW_DEPENDENT, f"The {self.role}'s model fails on a batch of one row: "
                                 f"{type(exc).__name__}: {exc}"[:600]) from None
            np.save(wire.rows_file(run["run_id"]), self.torch.cat(alone).numpy())
        if run.get("keep"):  # a final model the mechanism is measured on: its trained tensors
            for j, tensor in enumerate(result.model.tensors()):
                np.save(wire.kept_file(run["run_id"], j), tensor.detach().cpu().numpy(), allow_pickle=False)
        send({
            "event": "run", "run_id": run["run_id"], "diverged": result.diverged,
            "seconds": result.seconds, "n_params": result.model.param_words(), "path": path,
        })

    def _train_one(self, run: dict[str, Any], send: Any) -> None:
        from bench.trainer import train

        arrays = self._arrays(run["data_dir"])
        model = self._build(run["cfg"].get("hparams", {}), run["init_seed"], run.get("build_init"))
        x_eval = arrays["x_val" if run["eval"] == "val" else "x_test"]
        try:
            result = train(
                model, self._config(run), arrays["x_train"], arrays["y_train"], x_eval,
                order_seed=run["order_seed"],
            )
        except Exception as exc:
            raise classify(exc, self.filename, ErrorCode.TRAINING_ERROR) from None
        self._finish(run, result, "sequential", send, x_eval)

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
        models = [self._build(run["cfg"].get("hparams", {}), run["init_seed"], run.get("build_init")) for run in group]
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
        for run, result, i in zip(group, results, index, strict=True):
            self._finish(run, result, "vectorized", send, datasets[i][2])
        return True


def started() -> None:
    """The collector on again after a child's start-up imports (``bench.sandbox.guard.bootstrap``
    turned it off), with what they made frozen: out of every later collection, and, in a fork
    server, shared with its children, whose full collections would otherwise walk it all and
    copy each page they touch (docs/performance.md, "Session 34"). Garbage first, so none is
    kept for good."""
    import gc

    gc.collect()
    gc.freeze()
    gc.enable()


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

        torch_settings()
        # Attention through the math kernel only, as the vectorized trainer does (defence in
        # depth: the fused CPU kernels trust their callers' shapes; issue 25). The flags are
        # named for CUDA but hold for every device.
        for enable in (torch.backends.cuda.enable_flash_sdp, torch.backends.cuda.enable_mem_efficient_sdp,
                       torch.backends.cuda.enable_cudnn_sdp):
            enable(False)
        trainer = ArmRunner()
        from bench.capture import Capturer

        capturer = Capturer()
    except Exception as exc:  # torch itself failed to import: the environment, not the idea
        send({"error": BenchError(ErrorCode.INTERNAL, f"child start failed: {exc}").to_dict()})
        return
    started()
    send({"ready": True, "torch": torch.__version__})
    # One child serves one side for its whole life: the first command of a side decides which.
    # A trainer child never executes submitted code; a capture child never trains, but for the
    # one that captures a built-in track's own baseline and then trains it (wire.side_after);
    # a data child only makes a custom track's data.
    handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "capture_load": capturer.load, "capture": capturer.capture, "rebuild": capturer.rebuild,
        "measure": capturer.measure, "load": trainer.load, "more_inits": trainer.more_inits,
        "check": trainer.check, "train": lambda cmd: trainer.train(cmd, send), "probe": trainer.probe,
        "make_data": make_data, "warm": warm,
    }
    side: str | None = None
    for line in sys.stdin:
        try:
            op, command = wire.parse_command_line(line)
            if op == "exit":
                break
            side = wire.side_after(side, op, command)
            reply = handlers[op](command)
            send({"ok": True, **reply})
        except BenchError as exc:
            send({"error": exc.to_dict()})
        except MemoryError:
            send({"error": BenchError(ErrorCode.OUT_OF_MEMORY, "MemoryError").to_dict()})
        except Exception as exc:
            send({"error": BenchError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}").to_dict()})


if __name__ == "__main__":
    main()
