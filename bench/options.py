"""How the engine runs on this host: options the host builds and hands in.

Nothing in ``bench/`` reads the environment. A host (the worker, ``ideabench run``) builds its
``HostOptions`` from its settings (``app.settings.Settings.host_options``) and hands them in:
once per process with ``configure`` (the sandbox's policy for every child, the seed secret, and
the engine options a job without its own uses), and per job (``JudgeRequest.options``,
``validate(options=)``) the ``EngineOptions`` of its caches and execution. The sandbox's policy
and the seed secret are the process's on purpose: they must hold for every child and every
seed, whoever starts it (a warm slot, a check, a track's validation), so no path can forget
them. Unconfigured, a process uses ``HostOptions()``: caches and the seed secret file under
``./var``, and a sandbox that refuses to run children without its judging layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bench.sandbox import SandboxPolicy
from bench.sandbox import configure as configure_sandbox
from bench.seeding import SECRET_FILE, SecretStore, SeedSecret, parse_secret


@dataclass(frozen=True)
class EngineOptions:
    """A job's options. ``cache_dir``: per-worker caches (``baseline/``: canonical-baseline
    runs; ``tracks/``: custom tracks' generated data). ``baseline_cache``: reuse
    canonical-baseline runs. ``execution``: ``auto`` batches runs where both arms' models allow
    it, ``sequential`` trains one run at a time."""

    cache_dir: Path = Path("var/cache")
    baseline_cache: bool = True
    execution: Literal["auto", "sequential"] = "auto"

    @property
    def baseline_dir(self) -> Path:
        return self.cache_dir / "baseline"

    @property
    def tracks_dir(self) -> Path:
        return self.cache_dir / "tracks"


@dataclass(frozen=True)
class HostOptions:
    """A process's options. ``engine``: what a job without options uses. ``data_dir``: where the
    seed secret file lives (``seed_secret.json``) unless ``seed_secret`` (hex, shared by every
    worker of a deployment, with its ``seed_epoch``) is set. ``sandbox``: the sandbox's policy
    (``bench.sandbox.SandboxPolicy``)."""

    engine: EngineOptions = EngineOptions()
    data_dir: Path = Path("var")
    seed_secret: str = field(default="", repr=False)
    seed_epoch: int = 1
    sandbox: SandboxPolicy = SandboxPolicy()

    def deployment_secret(self) -> SeedSecret:
        """The secret this host judges with: ``seed_secret`` at ``seed_epoch`` when set (every
        worker of a deployment shares it), else the current epoch of
        ``data_dir/seed_secret.json`` (generated on first use)."""
        if self.seed_secret.strip():
            return parse_secret(self.seed_secret, self.seed_epoch)
        return SecretStore(self.data_dir / SECRET_FILE).current()


_current = HostOptions()


def configure(options: HostOptions) -> None:
    """Make ``options`` this process's: the sandbox's policy for every child started from now
    on, the seed secret and the engine options of a job without its own. A host calls it once
    at start."""
    global _current
    _current = options
    configure_sandbox(options.sandbox)


def current() -> HostOptions:
    """The options ``configure`` set (``HostOptions()`` until a host sets them)."""
    return _current
