"""Starts the child process that runs submitted code inside a sandbox, and kills it.

Layers (``isolation_layers()`` lists those that actually ran for the last child):

- ``namespaces``: bubblewrap (``bwrap``) gives the child private mount, PID, IPC,
  UTS and network namespaces (no network, loopback included). Its file system is
  read-only: Python's prefix and the virtualenv, the bench and track packages,
  the job's data directory (read-only) and its own working directory (writable),
  a fresh ``/proc``, a minimal ``/dev`` with a private writable ``/dev/shm``.
  Nothing else of the host (no checkout, no ``/etc``, no other users' data).
- ``empty_env``: bwrap itself starts with an empty environment (its PID 1 keeps
  its parent's, visible in ``/proc/1/environ``); the child gets a fixed minimal one.
- ``cgroup_memory``, ``cgroup_pids``, ``cgroup_kill``: a per-child cgroup (v2, or
  v1 controllers on hybrid hosts) with a memory and a process-count limit, and a
  kill that reaches every process in it, ``setsid()`` daemons included.
- ``rlimits``: CPU time, core dumps, file size (the output cap), open files; and
  address space (``rlimit_as``) only where no memory cgroup is available.
- ``no_new_privs`` and ``seccomp``: set by the bootstrap (``python -m
  bench.sandbox``) before ``bench.child`` runs: non-UNIX sockets and namespace,
  mount, ptrace, bpf, keyctl-style calls fail with EPERM.
- ``output_cap``: the child's stdout/stderr go to a file capped by RLIMIT_FSIZE.
- ``process_group_kill``: the child runs in its own session; the kill reaches
  its process group (the only kill left where neither bwrap nor cgroups exist).

The sandbox fails closed: without a judging layer (``JUDGE_LAYERS``: namespaces,
no_network, empty_env, no_new_privs, seccomp) ``launch`` refuses with a ``BenchError``
(code ``sandbox_unavailable``) naming the missing layers, and a worker whose ``check()``
finds one missing judges nothing. Only a development setting
(``IDEABENCH_ALLOW_WEAK_SANDBOX=1``) runs children without them; their reports then say so
and count in no totals. Where full isolation is required (``require_full_isolation=True``
or the policy's, ``IDEABENCH_REQUIRE_FULL_ISOLATION=1`` in production) every layer of
``FULL_ISOLATION`` must run; otherwise a missing cgroup layer is logged and its fallback used.
The policy (``SandboxPolicy``: which bubblewrap, weak allowed, full isolation required) is the
process's, set by its host with ``configure``; the sandbox reads no environment.

A job may fork its children from one sandbox (``forkserver``, ``zygote``): each forked child
keeps every layer above, in a cgroup of its own, and restricts itself with Landlock
(``landlock``) to the view a fresh child would have had; its layers then include ``landlock``.

Modules: ``launcher`` (launch, exit_info, kill), ``policy``, ``cgroups``, ``bwrap``, ``limits``,
``guard`` (the child's side: no_new_privs, seccomp, ``violation``), ``forkserver`` (the
parent's side of a job's fork server), ``zygote`` (its side in the sandbox), ``landlock``.
"""

from bench.sandbox.cgroups import CGROUP_PREFIX
from bench.sandbox.forkserver import ForkServer
from bench.sandbox.guard import violation
from bench.sandbox.launcher import (
    ALLOW_WEAK_ENV,
    FULL_ISOLATION,
    JUDGE_LAYERS,
    REQUIRE_ENV,
    ChildProcess,
    SandboxCheck,
    check,
    exit_info,
    isolation_layers,
    kill,
    launch,
    layers_of,
    missing_judge_layers,
    probe_layers,
    weak_allowed,
)
from bench.sandbox.limits import LOG_NAME, ExitInfo, Limits
from bench.sandbox.policy import SandboxPolicy, configure, policy

__all__ = [
    "ALLOW_WEAK_ENV", "CGROUP_PREFIX", "LOG_NAME", "FULL_ISOLATION", "JUDGE_LAYERS", "REQUIRE_ENV",
    "ChildProcess", "ExitInfo", "ForkServer", "Limits", "SandboxCheck", "SandboxPolicy", "check", "configure", "exit_info", "isolation_layers",
    "kill", "launch", "layers_of", "missing_judge_layers", "policy", "probe_layers", "violation", "weak_allowed",
]
