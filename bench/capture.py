"""The capture child: the only process where submitted Python runs during a job.

It holds no data at all: no split, no label, no input of the track (the sandbox binds
no data directory into it, and the built-in ``tracks`` packages and bundled data sets
are hidden from every child but those that build a built-in track's own baseline). One
exception runs no submitted code: a built-in track's own baseline is captured in the child
that then trains it, which sees the job's data as a trainer does (``bench.execution``).
It executes the arm's file, builds its model for every configuration and init seed of
the job, and exports each as a graph (``bench.graph``) on random inputs of the spec's
shape. Everything that decides a verdict (training, counting, predictions, scores)
happens elsewhere, in trusted code, on what it wrote.

After the final runs it may be asked to ``measure``: the idea's own ``measure`` on the
trained models (weights trained by the trusted trainer, loaded into models this child
builds again). The report marks those values ``self_measured``.

Files it writes in its working directory, by names the parent chooses:
``capture/{config}/train.json``, ``capture/{config}/eval.json`` and
``capture/{config}/{seed}_{tensor}.npy`` (tensor ``j`` in the graph's input order).
"""

from __future__ import annotations

import functools
import json
import math
import re
import types
from pathlib import Path
from typing import Any

from bench.errors import BenchError, ErrorCode
from bench.wire_names import STATE_NAME_PATTERN

EXAMPLE_BATCH = 4
CAPTURE_DIR = "capture"
_SIMPLE = (int, float, complex, bool, str, bytes, type(None), list, tuple, dict, set, frozenset)
_MAX_ITEMS = 1000  # a larger container is compared by its type and length


def _fingerprint(value: Any) -> str:
    if isinstance(value, list | tuple | dict | set | frozenset) and len(value) > _MAX_ITEMS:
        return f"{type(value).__name__}:{len(value)}"
    return repr(value)[:400]


def python_state(model: Any, module: types.ModuleType | None) -> dict[str, str]:
    """The Python-side state a forward could change (issue 27.8): every plain attribute of the
    model's modules (not tensors, not torch's own ``_`` fields, not ``training``), the plain
    class attributes of the file's own classes, and the file's plain globals; by name."""
    state: dict[str, str] = {}
    own = module.__name__ if module is not None else None
    for path, sub in model.named_modules():
        for key, value in vars(sub).items():
            if not key.startswith("_") and key != "training" and isinstance(value, _SIMPLE):
                state[f"{path}.{key}" if path else key] = _fingerprint(value)
        if own is not None and type(sub).__module__ == own:
            for key, value in vars(type(sub)).items():
                if not key.startswith("_") and isinstance(value, _SIMPLE):
                    state[f"{type(sub).__name__}.{key}"] = _fingerprint(value)
    if module is not None:
        for key, value in vars(module).items():
            if not key.startswith("_") and isinstance(value, _SIMPLE) and key not in ("HPARAMS", "MECHANISM"):
                state[key] = _fingerprint(value)
    return state


def graph_path(config: int, mode: str) -> str:
    """Where a config's graph of ``mode`` (train / eval) lies, relative to the child's directory."""
    return f"{CAPTURE_DIR}/{config}/{mode}.json"


def tensor_path(config: int, seed: int, index: int) -> str:
    """Where tensor ``index`` (graph input order) of init seed number ``seed`` lies."""
    return f"{CAPTURE_DIR}/{config}/{seed}_{index}.npy"


class Capturer:
    """Holds the arm's builder (a submitted file, or a track's baseline) in the capture child."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.build: Any = None
        self.module: types.ModuleType | None = None
        self.filename = "baseline (track)"
        self.role = "idea"
        self.spec: dict[str, Any] = {}
        self.param_cap = 0
        self.targets: dict[int, list[str]] = {}  # per config: tensor targets in graph order
        self.exported: dict[int, dict[str, Any]] = {}  # per config: the tensors its export found
        self.configs: list[dict[str, Any]] = []
        self.init_seeds: list[int] = []
        self.source = ""  # the text that defines the builder (for ``_mode_dependent``)
        self.notes: set[str] = set()  # wire.CaptureReply: what the file did besides its model
        self.changed: list[str] = []
        self.starts = 0  # processes and threads the file started (``_count_starts``)

    def load(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Execute the arm's code (or load the track's baseline); report its declared data."""
        from bench.child import classify, track_module
        from bench.errors import remember_source

        self.role = cmd["role"]
        self.spec = cmd["spec"]
        self.param_cap = int(cmd["param_cap"])
        answer: dict[str, Any] = {"hparams": {}, "mechanism": None, "has_measure": False}
        self._count_starts()
        if cmd.get("code") is None:
            if cmd.get("track_source") is not None:  # a custom track's canonical baseline
                self.filename = "track.py"
                self.source = cmd["track_source"]
                self.build = track_module(cmd["track_source"]).build_baseline
            else:
                import inspect

                from bench.registry import load_track

                self.build = load_track(cmd["track"]).build_baseline
                self.source = inspect.getsource(inspect.getmodule(self.build))  # type: ignore[arg-type]
            return answer
        self.source = cmd["code"]
        self.filename = f"{self.role}.py"
        module = types.ModuleType(f"submitted_{self.role}")
        module.__file__ = self.filename
        remember_source(self.filename, cmd["code"])
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
            raise BenchError(ErrorCode.INVALID_HPARAMS, "HPARAMS and MECHANISM must be plain JSON data.") from None
        answer.update(hparams=hparams, mechanism=mechanism, has_measure=callable(getattr(module, "measure", None)))
        return answer

    def _count_starts(self) -> None:
        """Count every process or thread started in this child from here on (``os.fork``,
        ``os.system``, ``os.posix_spawn*``, subprocess's ``fork_exec``, ``Thread.start``): a
        build that starts one gets the ``build_processes`` note. Advisory, for an honest file
        (nothing such a process computes reaches the captured model); a file that undoes the
        count only loses its own warning."""
        import _posixsubprocess
        import os
        import threading

        def counted(fn: Any) -> Any:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                self.starts += 1
                return fn(*args, **kwargs)
            return wrapper

        for owner, name in ((os, "fork"), (os, "system"), (os, "posix_spawn"), (os, "posix_spawnp"),
                            (_posixsubprocess, "fork_exec"), (threading.Thread, "start")):
            if hasattr(owner, name):
                setattr(owner, name, counted(getattr(owner, name)))

    def _model(self, config: int, init_seed: int) -> Any:
        from bench.child import classify
        from bench.trainer import build_checked

        spec = dict(self.spec, hparams=dict(self.configs[config]))
        started = self.starts
        try:
            model = build_checked(self.build, spec, init_seed=init_seed, param_cap=self.param_cap,
                                  device=self.torch.device("cpu"), role=self.role)
        except BenchError:
            raise
        except Exception as exc:
            raise classify(exc, self.filename, ErrorCode.TRAINING_ERROR) from None
        if self.starts != started:
            self.notes.add("build_processes")
        return model

    def _watch_state(self, model: Any) -> list[Any]:
        """Hooks on the model's outermost forward that note the Python-side state it changed
        (``forward_state``): the graph torch.export captures holds that state as it was, and
        torch.export puts the model's attributes back afterwards, so only a look from inside the
        call sees the change. The hooks run no tensor op: the graph is the same with them."""
        seen: dict[str, dict[str, str]] = {}

        def before(mod: Any, args: Any) -> None:
            seen["before"] = python_state(mod, self.module)

        def after(mod: Any, args: Any, output: Any) -> None:
            now = python_state(mod, self.module)
            then = seen.get("before", {})
            changed = sorted(k for k in now.keys() | then.keys() if now.get(k) != then.get(k))
            if changed:
                self.notes.add("forward_state")
                for name in changed:
                    if len(self.changed) < 3 and name not in self.changed and re.fullmatch(STATE_NAME_PATTERN, name):
                        self.changed.append(name)

        return [model.register_forward_pre_hook(before), model.register_forward_hook(after)]

    def _mode_dependent(self, model: Any) -> bool:
        """Whether the model may compute otherwise in eval mode, so that it needs an eval-mode
        capture of its own: a torch module that does (dropout, normalisation with running
        statistics, recurrent or attention layers with dropout), or a source that reads
        ``training``. A model claimed mode-independent is judged on its train-mode graph in
        both modes, which can only take power from the file, never give it any."""
        nn = self.torch.nn
        for m in model.modules():
            if isinstance(m, nn.modules.dropout._DropoutNd | nn.MultiheadAttention | nn.RNNBase):
                if float(getattr(m, "p", getattr(m, "dropout", 0.0)) or 0.0) > 0:
                    return True
            elif isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats:
                return True
        # A torch layer that only takes a fused inference path in eval mode (a transformer
        # layer) computes the same function: its train-mode graph serves both modes.
        return "training" in self.source or "train(" in self.source or ".eval" in self.source

    def capture(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Build and export every config; write its graphs and every init seed's tensors."""

        from bench.child import classify
        from bench.graph import export_graph, not_capturable

        torch = self.torch
        self.configs = list(cmd["configs"])
        self.init_seeds = [int(s) for s in cmd["init_seeds"]]
        gen = torch.Generator().manual_seed(0)  # random inputs of the spec's shape: no data here
        example = torch.randn(EXAMPLE_BATCH, *self.spec["input_shape"], generator=gen)
        for config in range(len(self.configs)):
            Path(CAPTURE_DIR, str(config)).mkdir(parents=True, exist_ok=True)
            model = self._model(config, self.init_seeds[0])
            docs = {}
            tensors: dict[str, Any] = {}
            modes = ("train", "eval") if self._mode_dependent(model) else ("train",)
            for mode in modes:
                model.train(mode == "train")
                hooks = self._watch_state(model)
                try:
                    docs[mode], found = export_graph(model, example, filename=self.filename)
                except BenchError as exc:
                    raise BenchError(exc.code, f"{self.role}: {exc.message}", exc.hint) from None
                except Exception as exc:  # the model's forward raised while being traced
                    raise classify(exc, self.filename, ErrorCode.TRAINING_ERROR) from None
                finally:
                    for hook in hooks:
                        hook.remove()
                tensors.update(found)
            docs.setdefault("eval", docs["train"])
            targets = [i["target"] for i in docs["train"]["inputs"] if i["kind"] != "user"]
            if [i["target"] for i in docs["eval"]["inputs"] if i["kind"] != "user"] != targets:
                raise not_capturable(f"the {self.role}'s train-mode and eval-mode graphs hold other tensors")
            self.targets[config] = targets
            self.exported[config] = tensors
            for mode, doc in docs.items():
                Path(graph_path(config, mode)).write_text(json.dumps(doc))
            for index, seed in enumerate(self.init_seeds):
                self._write_inits(config, index, seed, model if index == 0 else None)
        # the parent reads the files by its own names and believes nothing else; these two only
        # ever add warnings about the file itself (wire.CaptureReply)
        return {"notes": sorted(self.notes), "changed": self.changed}

    def rebuild(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Build one config again for each init seed and write its parameters and buffers named
        in ``targets`` (tensor ``j`` of init seed number ``k`` at ``tensor_path(0, k, j)``): a
        confirmation's fresh child, which exports nothing (the parent holds the graph and its
        constants from the first capture, and compares the decoys' bytes with it)."""
        import numpy as np

        self.configs = [dict(cmd["hparams"])]
        self.init_seeds = [int(s) for s in cmd["init_seeds"]]
        Path(CAPTURE_DIR, "0").mkdir(parents=True, exist_ok=True)
        for index, seed in enumerate(self.init_seeds):
            model = self._model(0, seed)
            state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
            for j, target in enumerate(cmd["targets"]):
                if target in state:
                    np.save(tensor_path(0, index, j), state[target].detach().cpu().numpy(), allow_pickle=False)
        return {}

    def _write_inits(self, config: int, index: int, seed: int, exported_model: Any) -> None:
        """Write init seed number ``index``'s tensors of ``config`` (the exported model's own
        for the first seed; a fresh build of the config for any other)."""
        import numpy as np

        from bench.graph import not_capturable

        tensors = self.exported[config]
        model = exported_model if exported_model is not None else self._model(config, seed)
        state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        for j, target in enumerate(self.targets[config]):
            value = tensors[target] if exported_model is not None else state.get(target, tensors[target])
            if exported_model is None and target in tensors and tuple(value.shape) != tuple(tensors[target].shape):
                raise not_capturable(f"the {self.role}'s tensor {target!r} changes shape with the seed")
            np.save(tensor_path(config, index, j), value.detach().cpu().numpy(), allow_pickle=False)

    def measure(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """The idea's ``measure(model, x)`` on trained models: each is built again here (same
        config and init seed) and given the weights the trusted trainer trained. ``builds``:
        the configs, init seeds and tensor names of a capture made in another child."""
        import numpy as np

        from bench.child import classify

        torch = self.torch
        if cmd.get("builds") is not None:  # this child captured nothing: what the capture gave
            builds = cmd["builds"]
            self.configs = list(builds["configs"])
            self.init_seeds = [int(s) for s in builds["init_seeds"]]
            self.targets = dict(enumerate(builds["targets"]))
        measure = getattr(self.module, "measure", None)
        if cmd.get("measure_code") is not None:  # the idea's measurement, on this arm's models
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
            config = int(item["config"])
            model = self._model(config, self.init_seeds[int(item["seed_index"])])
            state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
            with torch.no_grad():
                for j, target in enumerate(self.targets[config]):
                    if target in state:
                        trained = torch.from_numpy(np.load(f"{item['prefix']}{j}.npy", allow_pickle=False))
                        state[target].copy_(trained.reshape(state[target].shape))
            model.eval()
            probe = torch.from_numpy(np.load(item["probe"], allow_pickle=False))
            try:
                value = float(measure(model, probe))
            except Exception as exc:
                raise classify(exc, "idea.py", ErrorCode.MECHANISM_ERROR) from None
            if not math.isfinite(value):
                raise BenchError(ErrorCode.MECHANISM_ERROR, f"measure() returned {value}.")
            values.append(value)
        return {"values": values}
