"""The sandbox's policy: which bubblewrap, and which layers a launch must have or refuse.

Set once per process by its host (``bench.sandbox.configure``, from ``bench.options.configure``
with the host's settings); nothing here reads the environment. Unconfigured, the policy is the
strict one: bubblewrap from ``PATH``, the judging layers required, no weak sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxPolicy:
    """``bwrap``: bubblewrap's path, ``""`` to find it on ``PATH``, ``"0"`` for none (the
    setting ``IDEABENCH_BWRAP``). ``allow_weak``: a development setting that runs children
    without the judging layers (``IDEABENCH_ALLOW_WEAK_SANDBOX``); their reports say so and
    count nowhere. ``require_full_isolation``: every layer or refuse (production,
    ``IDEABENCH_REQUIRE_FULL_ISOLATION``); it overrides ``allow_weak``. ``fork_server``: a job
    forks its children from one sandbox that imported torch once (``bench.sandbox.forkserver``),
    where the host allows it (``IDEABENCH_FORK_SERVER``; off: every child starts fresh)."""

    bwrap: str = ""
    allow_weak: bool = False
    require_full_isolation: bool = False
    fork_server: bool = True


_policy = SandboxPolicy()


def configure(policy: SandboxPolicy) -> None:
    """Make ``policy`` this process's, for every child started from now on."""
    global _policy
    _policy = policy


def policy() -> SandboxPolicy:
    """This process's policy (``SandboxPolicy()`` until a host configures one)."""
    return _policy
