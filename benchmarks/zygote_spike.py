"""Spike for issues 26.9 and 29.2: what a per-job fork server inside the sandbox would save, and
whether Landlock can give each forked child its own view. Not used by the engine.

A sandboxed child today is a fresh ``bwrap ... python`` that imports torch, ``torch._dynamo``
and warms torch.export before it does anything (a capture child needs all three). The test
suite starts about 650 of them (session 23, counted per test) and they use about three
quarters of its CPU; a cold tabular job is mostly this fixed cost (docs/performance.md).

This script measures, in one run, on this host:

- **cold**: ``N`` children, each its own bwrap sandbox (the launcher's real arguments and
  environment), each importing torch, dynamo and torch.func, exporting a tiny model (the warm-up
  a warm slot's capture child does) and then one small model (the work);
- **forked**: one bwrap sandbox (the same arguments) whose process does the imports and the
  warm-up once, then forks ``N`` children one after another; each child first restricts itself
  with Landlock (read: Python, the code and system directories; write: its own directory only;
  signals and abstract sockets scoped to itself), then exports the same small model.

Each forked child also tries what a hostile capture child would: read a sibling's directory,
write outside its own, signal the process it was forked from. The script prints CPU-seconds and
wall seconds per child on both paths, their ratio, and what each probe got. It answers "is a
fork server worth building here, and does the kernel give what its isolation would need";
the fork server itself (cgroups per forked child, pipes handed over a socket, exit statuses,
failing closed where Landlock is missing) is the work it sizes.

    .venv/bin/python benchmarks/zygote_spike.py --children 6

Landlock is called through ``ctypes`` here (three system calls): a spike should not add a
dependency; the engine's version would weigh the ``landlock`` package on PyPI.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.sandbox import launcher  # noqa: E402
from bench.sandbox.bwrap import bwrap_args, bwrap_path, code_dirs, python_dirs  # noqa: E402

WARM = """
import torch, torch._dynamo, torch.func
torch.set_num_threads(1)
from bench.graph import export_graph
export_graph(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()), torch.zeros(4, 2))
"""
WORK = """
export_graph(torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)), torch.zeros(5, 3))
"""
# The process's own CPU since it started (its imports included); bwrap's few milliseconds are not
# in it (bwrap's pid 1 does not pass its children's usage up), on both paths alike.
SELF_CPU = """
import resource as _r
_u = _r.getrusage(_r.RUSAGE_SELF)
print(f"SELF_CPU {_u.ru_utime + _u.ru_stime}")
"""

LANDLOCK = r'''
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_CREATE, _ADD, _RESTRICT = 444, 445, 446  # x86_64 system call numbers
READ = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read_file, read_dir
ALL_FS = (1 << 16) - 1  # every file system right of ABI 5 (execute .. ioctl_dev)
SCOPE = (1 << 0) | (1 << 1)  # abstract unix sockets, signals (ABI 6)


class _Ruleset(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi():
    return _libc.syscall(_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))


def restrict(read, write):
    """Allow reading ``read`` and everything under ``write``; nothing else (deny by default)."""
    attr = _Ruleset(ALL_FS, 0, SCOPE)
    fd = _libc.syscall(_CREATE, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    for paths, rights in ((read, READ), (write, ALL_FS)):
        for path in paths:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            rule = _Beneath(rights if os.path.isdir(path) else rights & ((1 << 0) | (1 << 1) | (1 << 2) | (1 << 14)), pfd)
            if _libc.syscall(_ADD, fd, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            os.close(pfd)
    if _libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if _libc.syscall(_RESTRICT, fd, ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(fd)
'''

ZYGOTE = LANDLOCK + WARM + r'''
import json, resource, sys, time
root, n, read = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
dirs = [os.path.join(root, f"c{i}") for i in range(n)]
for d in dirs:
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "secret"), "w") as f:
        f.write("a sibling's file")
rows = []
for i, d in enumerate(dirs):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        probes = {}
        try:
            restrict(read, [d])
''' + "\n".join("            " + line for line in WORK.strip().splitlines()) + r'''
            sibling = os.path.join(dirs[(i + 1) % n], "secret")
            for name, attempt in (("read_sibling", lambda: open(sibling).read()),
                                  ("write_outside", lambda: open(os.path.join(root, "outside"), "w")),
                                  ("signal_parent", lambda: os.kill(os.getppid(), 0)),
                                  ("write_own", lambda: open(os.path.join(d, "out"), "w").write("ok"))):
                try:
                    attempt()
                    probes[name] = "allowed"
                except OSError as exc:
                    probes[name] = f"denied ({exc.strerror})"
            with open(os.path.join(d, "probes.json"), "w") as f:
                json.dump(probes, f)
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            try:
                with open(os.path.join(d, "probes.json"), "w") as f:
                    json.dump({"error": repr(exc)}, f)
            finally:
                os._exit(1)
    _, status = os.waitpid(pid, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    rows.append({"status": status, "cpu_s": cpu, "wall_s": time.monotonic() - started,
                 "probes": json.load(open(os.path.join(d, "probes.json")))})
print(json.dumps({"abi": landlock_abi(), "rows": rows}))
'''


def _sandboxed(workdir: Path, code: str, *args: str) -> tuple[str, float, float]:
    """Run ``python -c code args`` in a bwrap sandbox made as the launcher makes one: its output,
    its process's own CPU-seconds (``SELF_CPU``) and the wall seconds of the whole start."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise SystemExit("bubblewrap is missing (scripts/system_deps.sh)")
    workdir.mkdir(parents=True, exist_ok=True)
    env = launcher._child_env(workdir)
    env["PYTHONPATH"] = str(ROOT)
    argv = bwrap_args(bwrap, workdir, [], env, []) + [sys.executable, "-s", "-P", "-c", code + SELF_CPU, *args]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"sandboxed run failed: {done.stderr[-2000:]}")
    cpu = float(done.stdout.rsplit("SELF_CPU ", 1)[1])
    return done.stdout.rsplit("SELF_CPU ", 1)[0], cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--children", type=int, default=6)
    n = parser.parse_args().children
    with tempfile.TemporaryDirectory(prefix="zygote-spike-") as tmp:
        cold = []
        for i in range(n):
            _, cpu, wall = _sandboxed(Path(tmp) / f"cold{i}", WARM + WORK)
            cold.append((cpu, wall))
        read = [str(p) for p in [*python_dirs(), *code_dirs(), Path(sys.executable).parent]] + [
            "/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "/dev", "/sys/devices/system/cpu"]
        workdir = Path(tmp) / "zygote"
        out, zygote_cpu, _ = _sandboxed(workdir, ZYGOTE, str(workdir), str(n), json.dumps(read))
        found = json.loads(out.strip().splitlines()[-1])
    forked = [(r["cpu_s"], r["wall_s"]) for r in found["rows"]]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    cold_cpu, cold_wall = mean([c for c, _ in cold]), mean([w for _, w in cold])
    fork_cpu, fork_wall = mean([c for c, _ in forked]), mean([w for _, w in forked])
    start_cpu = zygote_cpu  # its own imports and warm-up (its children's usage is theirs)
    print(f"landlock ABI here: {found['abi']}")
    print(f"cold child  (own sandbox, imports, warm-up, work): {cold_cpu:.2f} CPU-s, {cold_wall:.2f} s wall (mean of {n})")
    print(f"forked child (Landlock, then the same work):       {fork_cpu:.3f} CPU-s, {fork_wall:.3f} s wall (mean of {n})")
    print(f"the fork server's own start (once per job):        {start_cpu:.2f} CPU-s")
    print(f"per child: {cold_cpu / max(fork_cpu, 1e-9):.0f}x fewer CPU-s, {cold_wall / max(fork_wall, 1e-9):.0f}x less wall; "
          f"a job of 3 children: {3 * cold_cpu:.1f} -> {start_cpu + 3 * fork_cpu:.1f} CPU-s")
    statuses = {r["status"] for r in found["rows"]}
    probes = found["rows"][0]["probes"]
    print(f"forked children's exit statuses: {sorted(statuses)}; probes of the first: {json.dumps(probes)}")


if __name__ == "__main__":
    main()
