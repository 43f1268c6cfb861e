"""Red team of issue 26.7 (bench reads no environment; hosts configure HostOptions).

Every host path that starts sandboxed children must run them under the deployment's policy
(IDEABENCH_REQUIRE_FULL_ISOLATION, IDEABENCH_BWRAP, IDEABENCH_ALLOW_WEAK_SANDBOX) and its seed
secret (IDEABENCH_SEED_SECRET), never the strict-but-weaker default of an unconfigured process;
a bad setting must fail closed with an error an operator can read.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import options as engine_options
from bench import sandbox
from bench.errors import BenchError, ErrorCode
from bench.seeding import SECRET_FILE

ROOT = Path(__file__).resolve().parents[2]
SECRET = "ab" * 16 + "cd" * 16  # the deployment's (not the suite's) seed secret
POLICY_ENV = {
    "IDEABENCH_REQUIRE_FULL_ISOLATION": "1",
    "IDEABENCH_BWRAP": "/usr/bin/bwrap",
    "IDEABENCH_SEED_SECRET": SECRET,
    "IDEABENCH_SEED_EPOCH": "3",
}


class Stop(Exception):
    """Raised by a stand-in once it has recorded what a host handed the engine."""


def _deployment(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> Any:
    """The deployment's settings, from its environment (as every host builds them)."""
    from app.settings import Settings

    for name, value in {**POLICY_ENV, "IDEABENCH_DATA_DIR": str(data_dir)}.items():
        monkeypatch.setenv(name, value)
    for name in ("DATABASE_URL", "BROKER_URL", "IDEABENCH_ALLOW_WEAK_SANDBOX", "IDEABENCH_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.host_options().sandbox == sandbox.SandboxPolicy(
        bwrap="/usr/bin/bwrap", require_full_isolation=True)
    assert sandbox.policy() == sandbox.SandboxPolicy()  # the suite's: the strict default, not full isolation
    return settings


def test_track_register_cli_validates_under_the_deployments_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: `ideabench track register FILE` validates the track (its make_splits and
    baseline run in sandboxed children) in-process, without bench.options.configure: with
    IDEABENCH_REQUIRE_FULL_ISOLATION=1 the children run under the default policy (judging layers
    only: no cgroups required, fail OPEN), IDEABENCH_BWRAP is ignored, and
    IDEABENCH_ALLOW_WEAK_SANDBOX too. Fix: cmd_track (or execute_validation) configures
    ``settings.host_options()`` before validating, as run_worker does."""
    import bench.custom_track
    from cli.service import cmd_track

    settings = _deployment(monkeypatch, tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    seen: dict[str, Any] = {}

    def recording_validate(track: Any, **kwargs: Any) -> dict[str, Any]:
        seen["policy"] = sandbox.policy()
        seen["required"] = sandbox.launcher.required_layers()
        seen["secret"] = kwargs.get("secret")
        raise BenchError(ErrorCode.INVALID_TRACK, "stopped by the red team's stand-in")

    monkeypatch.setattr(bench.custom_track, "validate", recording_validate)
    track_file = ROOT / "tests" / "data" / "tracks" / "tiny_quadratic.py"
    args = argparse.Namespace(words=["register", str(track_file)], author="redteam", json=False)
    assert cmd_track(args, settings) == 2  # rejected (by the stand-in)
    assert seen["secret"] == settings.host_options().deployment_secret()  # the secret is handed in
    assert seen["policy"] == settings.host_options().sandbox
    assert seen["required"] == sandbox.FULL_ISOLATION


def test_ideabench_run_judges_under_the_deployments_policy_and_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: `ideabench run` judging under the strict default (not full isolation) or with the
    ./var seed file instead of IDEABENCH_SEED_SECRET (a secret the deployment does not share).
    Holds: cmd_run configures its Settings' HostOptions before judging."""
    import bench.judge
    from cli.engine import cmd_run

    settings = _deployment(monkeypatch, tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    seen: dict[str, Any] = {}

    def recording_judge(request: Any, **_: Any) -> Any:
        seen["policy"] = sandbox.policy()
        seen["secret"] = request.seed_secret or engine_options.current().deployment_secret()
        raise BenchError(ErrorCode.INTERNAL, "stopped by the red team's stand-in")

    monkeypatch.setattr(bench.judge, "judge", recording_judge)
    idea = tmp_path / "idea.py"
    idea.write_text("x = 1\n")
    args = argparse.Namespace(idea=str(idea), baseline=None, track_file=None, track="smoke", seeds=None,
                              timeout=60.0, memory_mb=2048, job_key=None, json=True, out=None)
    assert cmd_run(args) == 2
    assert seen["policy"] == settings.host_options().sandbox
    assert seen["secret"] == settings.host_options().deployment_secret()
    assert seen["secret"].epoch == 3 and seen["secret"].key == bytes.fromhex(SECRET)
    assert not (tmp_path / "var" / SECRET_FILE).exists() and not (tmp_path / "data" / SECRET_FILE).exists()


def test_make_celery_configures_the_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: a Celery worker process (its tasks judge jobs and validate tracks) built without
    run_worker keeps the default policy. Holds: make_celery configures the settings' options."""
    from workers.celery_app import make_celery

    settings = _deployment(monkeypatch, tmp_path / "data")
    make_celery(settings)
    assert sandbox.policy() == settings.host_options().sandbox
    assert sandbox.launcher.required_layers() == sandbox.FULL_ISOLATION
    assert engine_options.current().deployment_secret() == settings.host_options().deployment_secret()


def test_run_worker_configures_before_its_sandbox_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: the worker's start-up sandbox check (what /readyz/judging says) probing another
    bubblewrap than the one jobs use. Holds: run_worker configures before check_sandbox."""
    import workers.main

    settings = _deployment(monkeypatch, tmp_path / "data")
    seen: dict[str, Any] = {}

    def recording_check() -> Any:
        seen["policy"] = sandbox.policy()
        raise Stop

    monkeypatch.setattr(workers.main, "check_sandbox", recording_check)
    monkeypatch.setattr("app.logs.configure", lambda *_: None)  # leave the suite's logging alone
    with pytest.raises(Stop):
        workers.main.run_worker(settings)
    assert seen["policy"] == settings.host_options().sandbox


def test_serve_starts_its_worker_with_the_same_policy_and_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: `ideabench serve`'s worker subprocess built from a cleaned environment (then
    its Settings, and its policy and seed secret, would differ from the operator's).
    Holds: the worker's environment yields the same HostOptions."""
    import cli.service
    from app.settings import Settings

    settings = _deployment(monkeypatch, tmp_path / "data")
    started: dict[str, Any] = {}

    def fake_popen(argv: list[str], env: dict[str, str], **_: Any) -> Any:
        started.update(argv=argv, env=env)
        return None

    monkeypatch.setattr(cli.service.subprocess, "Popen", fake_popen)
    cli.service._start_worker(settings)
    assert started["argv"][-1] == "worker"
    for name in list(os.environ):
        monkeypatch.delenv(name)
    for name, value in started["env"].items():
        monkeypatch.setenv(name, value)
    assert Settings().host_options() == settings.host_options()


@pytest.mark.parametrize(("name", "value"), [
    ("IDEABENCH_ALLOW_WEAK_SANDBOX", "maybe"),
    ("IDEABENCH_REQUIRE_FULL_ISOLATION", "enabled"),  # the old reader took it for "off" (fail open)
    ("IDEABENCH_REQUIRE_FULL_ISOLATION", ""),
    ("IDEABENCH_SEED_EPOCH", "0"),  # epoch 0 is a check's throwaway secret
    ("IDEABENCH_SEED_EPOCH", "-1"),
])
def test_a_bad_policy_setting_is_refused_not_read_as_off(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: a mistyped policy value silently read as its weaker default. Holds: the
    settings refuse it (no HostOptions, so no child)."""
    from pydantic import ValidationError

    from app.settings import Settings

    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings().host_options()


def test_a_bad_policy_setting_stops_the_worker_with_a_readable_error(tmp_path: Path) -> None:
    """Attack: IDEABENCH_ALLOW_WEAK_SANDBOX=maybe on a worker. It fails closed, but with a
    pydantic stack trace naming the field ``allow_weak_sandbox``, not the variable. Fix:
    cli.main.main catches pydantic.ValidationError from Settings() and prints
    ``error: IDEABENCH_ALLOW_WEAK_SANDBOX: ...`` with exit status 78 (EX_CONFIG)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IDEABENCH_")}
    env.update(PYTHONPATH=str(ROOT), IDEABENCH_DATA_DIR=str(tmp_path), IDEABENCH_ALLOW_WEAK_SANDBOX="maybe")
    done = subprocess.run([sys.executable, "-m", "cli.main", "worker"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-600:]
    assert "IDEABENCH_ALLOW_WEAK_SANDBOX" in done.stderr


@pytest.mark.parametrize("bwrap", ["/nonexistent/bwrap", " 0", "/etc/passwd"])
def test_a_bad_bwrap_setting_refuses_instead_of_crashing(bwrap: str, tmp_path: Path) -> None:
    """Attack: IDEABENCH_BWRAP mistyped (a missing file, " 0", not executable). Popen's OSError
    escapes sandbox.check and launch: the worker dies at start with a stack trace instead of
    running as "refused" (/readyz/judging), a job ends INTERNAL, and the cgroup made for the
    launch is left behind. Fix: _start turns an OSError from Popen into SANDBOX_UNAVAILABLE
    (removing the cgroup), or Settings validates bwrap ("", "0" or an executable file)."""
    sandbox.configure(sandbox.SandboxPolicy(bwrap=bwrap))
    gc.collect()  # an earlier test's unreferenced file, closed by the collector mid-test, is no leak
    open_fds = set(os.listdir("/proc/self/fd"))
    found = sandbox.check(tmp_path / "check")
    assert not found.judges and "namespaces" in found.missing
    with pytest.raises(BenchError) as refused:
        sandbox.launch(tmp_path / "child", sandbox.Limits())
    assert refused.value.code == ErrorCode.SANDBOX_UNAVAILABLE
    gc.collect()
    assert set(os.listdir("/proc/self/fd")) <= open_fds  # the pipes of a start that never was are closed


def test_the_bootstrap_runs_only_the_launchers_entry(tmp_path: Path) -> None:
    """Attack: the entry module the sandbox's bootstrap imports, named on its command line.
    Holds: the launcher names the fixed bench.child, or the fork server's fixed entry, nothing a
    job or its code chooses, and the bootstrap reports its layers before it imports the entry
    (no submitted code has run)."""
    import inspect

    from bench.sandbox import forkserver, guard, launcher, zygote

    assert launcher.CHILD_ENTRY == "bench.child" and forkserver.ZYGOTE_ENTRY == "bench.sandbox.zygote"
    source = inspect.getsource(launcher._start)
    assert '"bench.sandbox", proto_arg, str(status_w), str(workdir), entry]' in source
    assert 'proto_arg = ",".join(str(fd) for fd in (write_fd, *inner_fds))' in source  # descriptors, no text
    assert inspect.signature(launcher._launch).parameters["entry"].default == launcher.CHILD_ENTRY
    callers = inspect.getsource(launcher)
    assert callers.count("entry=") == 1 and "entry=entry, socket_proto=True" in callers  # launch_server's
    assert inspect.getsource(forkserver).count("entry=ZYGOTE_ENTRY") == 1
    assert "importlib.import_module(CHILD_ENTRY)" in inspect.getsource(zygote)  # its children's program
    body = inspect.getsource(guard.bootstrap)
    assert body.index("os.close(status_fd)") < body.index("importlib.import_module")


def test_a_warm_slot_is_taken_only_under_the_policy_it_was_launched_under() -> None:
    """Finding 4: a warm slot matched on limits only, so children started under one policy could
    be adopted by a job after a stricter one was configured. Now the slot carries its policy."""
    from bench import warm

    limits = sandbox.Limits()
    weak = sandbox.SandboxPolicy(allow_weak=True)
    warm._slot = warm.Slot(warm.JobDir(), limits, {}, weak)  # no children: only the match is tested
    sandbox.configure(sandbox.SandboxPolicy(require_full_isolation=True))
    assert warm.take(limits) is None and warm._slot is None
    warm._slot = warm.Slot(warm.JobDir(), limits, {}, sandbox.policy())
    taken = warm.take(limits)
    assert taken is not None
    taken.discard()
