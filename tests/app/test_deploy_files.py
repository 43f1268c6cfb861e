"""docker-compose.yml and the Dockerfile: the compose file parses (``docker compose config``, or
the Debian ``docker-compose`` 1.29) and has the properties a deployment needs (issue 28.6): the
workers' sandbox privileges, limits, drain, shared secrets, the GPU profile; the image's data
directory is the worker's. deploy/entrypoint.sh is run here for real against a fake cgroup tree."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import Settings
from tests.conftest import CI

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"
# What `docker compose config` needs to interpolate: the stack refuses to start without them.
SECRETS = {"IDEABENCH_DB_PASSWORD": "db-pw", "IDEABENCH_REDIS_PASSWORD": "redis-pw",
           "IDEABENCH_SESSION_SECRET": "session-secret"}
# Keys of the Compose Specification that the Debian docker-compose 1.29 does not know; Compose v2
# (`docker compose`) reads the file as it is.
NEWER_KEYS = ("cgroup",)
WORKERS = ("worker", "gpu-worker")


def _tool() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def compose(*args: str, env: dict[str, str] | None = None) -> str:
    tool = _tool()
    if tool is None:
        if CI:
            pytest.fail("docker-compose is not installed (apt-get install docker-compose); required when CI=true")
        pytest.skip("docker-compose not installed; `apt-get install docker-compose` (scripts/system_deps.sh)")
    path = COMPOSE_FILE
    if tool[-1].endswith("docker-compose"):  # 1.29: the same file less the keys it does not know
        data = yaml.safe_load(COMPOSE_FILE.read_text())
        for service in data["services"].values():
            for key in NEWER_KEYS:
                service.pop(key, None)
        handle, name = tempfile.mkstemp(suffix=".yml", prefix="compose-legacy-")
        os.close(handle)
        path = Path(name)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        result = subprocess.run([*tool, "-f", str(path), "--project-directory", str(ROOT), *args], cwd=ROOT,
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, **SECRETS, **(env or {})})
    finally:
        if path != COMPOSE_FILE:
            path.unlink(missing_ok=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def config(*profiles: str) -> dict[str, Any]:
    args = [a for p in profiles for a in ("--profile", p)]
    return yaml.safe_load(compose(*args, "config"))


def raw() -> dict[str, Any]:
    """The file as written (YAML merge keys resolved), with what the older tool drops."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def seconds(duration: str | int | float) -> float:
    if isinstance(duration, int | float):
        return float(duration)
    total = 0.0
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us)", duration):
        total += float(value) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}[unit]
    return total


def test_compose_file_parses() -> None:
    compose("config", "-q")


def test_compose_services_and_health_checks() -> None:
    services = set(compose("config", "--services").split())
    assert {"api", "worker", "postgres", "redis", "migrate"} <= services
    text = compose("config")
    assert text.count("healthcheck:") >= 4
    assert "service_completed_successfully" in text
    assert (ROOT / "Dockerfile").read_text().count("torch==2.13.0") == 1


def test_the_api_processes_count_their_metrics_together() -> None:
    """Two uvicorn workers on one port: the shared, emptied-at-start PROMETHEUS_MULTIPROC_DIR
    (app/metrics.py) makes /metrics the same whichever process answers."""
    api = config()["services"]["api"]
    shared = api["environment"]["PROMETHEUS_MULTIPROC_DIR"]
    command = " ".join(api["command"])
    assert "--workers 2" in command
    assert command.index("rm -rf") < command.index("mkdir -p") < command.index("exec uvicorn")
    assert shared.startswith("/tmp/") and "PROMETHEUS_MULTIPROC_DIR" in command


def test_the_secrets_are_required_and_shared() -> None:
    """No stack without its secrets: one session secret for every API process, Redis with a
    password the broker URL and the rate-limit store both carry, rate limits kept in Redis."""
    tool = _tool()
    if tool is not None:
        env = {k: v for k, v in os.environ.items() if k not in SECRETS}
        result = subprocess.run([*tool, "-f", str(COMPOSE_FILE), "config", "-q"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode != 0 and "IDEABENCH_" in result.stderr
    services = config()["services"]
    for name in ("api", "worker", "migrate"):
        env = services[name]["environment"]
        assert env["IDEABENCH_SESSION_SECRET"] == SECRETS["IDEABENCH_SESSION_SECRET"]
        assert env["BROKER_URL"] == "redis://:redis-pw@redis:6379/0"
        assert env["IDEABENCH_RATE_LIMIT_STORAGE"].startswith("redis://:redis-pw@redis:6379/")
        # the API and the workers through PgBouncer; the migration straight to Postgres
        via = "postgres:5432" if name == "migrate" else "pgbouncer:6432"
        assert env["DATABASE_URL"] == f"postgresql://ideabench:db-pw@{via}/ideabench"
    assert services["pgbouncer"]["environment"]["PGBOUNCER_DB_PASSWORD"] == "db-pw"
    assert "rate_limit_storage" in Settings.model_fields  # IDEABENCH_RATE_LIMIT_STORAGE is its name
    assert "--requirepass" in " ".join(services["redis"]["command"])
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == "redis-pw"
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "db-pw"


def test_pgbouncer_stands_between_postgres_and_every_process_that_pools() -> None:
    """Issue 28.10: the API and the workers wait for a healthy PgBouncer in transaction pooling
    whose one database is the stack's Postgres; its password reaches only its tmpfs; it runs as
    the other services do (no capability, a read-only root, on the internal network)."""
    services = config()["services"]
    bouncer = services["pgbouncer"]
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["pgbouncer"]["condition"] == "service_healthy"
    assert bouncer["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert bouncer["read_only"] is True and bouncer["cap_drop"] == ["ALL"] and bouncer["networks"] == {"backend": None}
    assert "healthcheck" in bouncer and bouncer["user"] != "0:0"
    command = " ".join(bouncer["command"])
    assert "umask 077" in command and "> /tmp/userlist.txt" in command and "exec pgbouncer" in command
    ini = configparser.ConfigParser()
    ini.read(ROOT / "deploy" / "pgbouncer.ini")
    assert ini["databases"]["ideabench"] == "host=postgres port=5432 dbname=ideabench"
    settings = ini["pgbouncer"]
    assert settings["pool_mode"] == "transaction" and settings["listen_port"] == "6432"
    assert settings["auth_file"] == "/tmp/userlist.txt" and settings["auth_type"] == "scram-sha-256"


def test_workers_have_what_the_sandbox_needs_and_nothing_more() -> None:
    services = config("gpu")["services"]
    written = raw()["services"]
    for name in WORKERS:
        worker = services[name]
        assert worker["environment"]["IDEABENCH_REQUIRE_FULL_ISOLATION"] == "1"
        assert written[name]["cgroup"] == "private"  # dropped for the 1.29 check: see NEWER_KEYS
        opts = set(worker["security_opt"])
        assert {"writable-cgroups=true", "systempaths=unconfined", "seccomp=unconfined",
                "apparmor=unconfined", "no-new-privileges:true"} <= opts
        assert worker["cap_drop"] == ["ALL"]
        assert sorted(worker["cap_add"]) == ["CHOWN", "SETGID", "SETUID"]
        assert not worker.get("privileged")
        assert worker["read_only"] is True
        assert any(t.startswith("/tmp:") for t in worker["tmpfs"])
        assert worker["environment"]["IDEABENCH_DATA_DIR"] == "/srv/ideabench-data"
        targets = [v["target"] if isinstance(v, dict) else v.split(":")[1] for v in worker["volumes"]]
        assert "/srv/ideabench-data" in targets
        assert "workers.healthcheck" in " ".join(worker["healthcheck"]["test"])
        # Only the backend network, which has no route out.
        assert set(worker["networks"]) == {"backend"}
    assert config()["networks"]["backend"]["internal"] is True
    assert set(services["api"]["networks"]) == {"backend", "edge"}


def test_every_service_is_limited_and_locked_down() -> None:
    services = config("gpu")["services"]
    for name, service in services.items():
        assert service.get("cap_drop") == ["ALL"], name
        assert service.get("read_only") is True, name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        assert int(service["pids_limit"]) > 0, name
        limits = service["deploy"]["resources"]["limits"]
        assert float(limits["cpus"]) > 0 and limits["memory"], name
        if name not in WORKERS:
            assert not service.get("cap_add"), name
            assert service.get("user") != "0:0", name


def test_workers_get_the_job_timeout_to_drain() -> None:
    """SIGTERM: the worker stops claiming and finishes its job; Docker waits stop_grace_period."""
    services = config("gpu")["services"]
    timeout = Settings().job_timeout_s
    for name in WORKERS:
        worker = services[name]
        assert float(worker["environment"]["IDEABENCH_JOB_TIMEOUT_S"]) == timeout
        assert seconds(worker["stop_grace_period"]) >= timeout + 60


def test_the_gpu_worker_is_a_profile_with_one_gpu_and_the_cuda_wheels() -> None:
    services = config("gpu")["services"]
    gpu = services["gpu-worker"]
    assert raw()["services"]["gpu-worker"]["profiles"] == ["gpu"]
    assert gpu["environment"]["IDEABENCH_DEVICE"] == "cuda:0"
    assert gpu["command"][-2:] == ["--queues", "gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert len(devices) == 1 and devices[0]["count"] == 1 and devices[0]["capabilities"] == ["gpu"]
    assert "/whl/cu" in gpu["build"]["args"]["TORCH_INDEX"]
    assert gpu["image"] != services["worker"]["image"]
    assert services["worker"]["command"][-2:] == ["--queues", "cpu"]
    assert "TORCH_INDEX" not in (services["worker"]["build"].get("args") or {})


def test_the_image_owns_the_data_dir_and_picks_its_torch_build() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in dockerfile
    assert 'pip install torch==2.13.0 --index-url "${TORCH_INDEX}"' in dockerfile
    run = dockerfile[dockerfile.index("RUN pip install -e"):]
    assert "mkdir -p /srv/ideabench/var /srv/ideabench-data" in run
    assert "chown ideabench:ideabench /srv/ideabench/var /srv/ideabench-data" in run
    assert "useradd --uid 10001" in run
    assert "USER 10001:10001" in dockerfile
    assert 'ENTRYPOINT ["/usr/local/bin/ideabench-entrypoint"]' in dockerfile
    assert "COPY deploy/entrypoint.sh /usr/local/bin/ideabench-entrypoint" in dockerfile
    assert "util-linux" in dockerfile  # setpriv


def _entrypoint(tmp_path: Path, *command: str, env: dict[str, str] | None = None,
                as_root: bool = True) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "IDEABENCH_CGROUP_ROOT": str(tmp_path / "cg")}
    argv = ["sh", str(ENTRYPOINT), *command]
    if not as_root:
        argv = ["setpriv", "--reuid=10001", "--regid=10001", "--clear-groups", *argv]
    return subprocess.run(argv, env={**base, **(env or {})}, capture_output=True, text=True, timeout=30)


def test_entrypoint_reads_file_secrets(tmp_path: Path) -> None:
    secret = tmp_path / "db"
    secret.write_text("postgresql://u:p@h/d")
    secret.chmod(0o644)
    out = _entrypoint(tmp_path, "sh", "-c", 'echo "$DATABASE_URL|$IDEABENCH_SESSION_SECRET"',
                      env={"DATABASE_URL_FILE": str(secret), "IDEABENCH_SESSION_SECRET": "kept"},
                      as_root=os.geteuid() == 0)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "postgresql://u:p@h/d|kept"
    missing = _entrypoint(tmp_path, "true", env={"BROKER_URL_FILE": str(tmp_path / "nope")})
    assert missing.returncode == 78 and "BROKER_URL_FILE" in missing.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv (CI runs as root)")
def test_entrypoint_delegates_the_cgroup_and_drops_root(tmp_path: Path) -> None:
    """Started as root (the worker), it moves the root cgroup's processes into the leaf `worker`,
    enables memory and pids for the children's cgroups, hands the root cgroup to uid 10001, and
    runs the command as 10001 with no capability (and no_new_privs)."""
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("cpu memory pids\n")
    (cg / "cgroup.procs").write_text("1\n")
    out = _entrypoint(tmp_path, "sh", "-c", "id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[:2] == ["10001", "10001"]
    status = dict(zip(lines[2::2], lines[3::2], strict=True))
    assert status == {"CapPrm:": "0000000000000000", "CapEff:": "0000000000000000", "NoNewPrivs:": "1"}
    assert (cg / "worker" / "cgroup.procs").read_text().split() == ["1"]
    assert (cg / "cgroup.subtree_control").read_text().split() == ["+memory", "+pids"]
    assert (cg.stat().st_uid, (cg / "cgroup.procs").stat().st_uid) == (10001, 10001)
    assert (cg / "cgroup.subtree_control").stat().st_uid == 0  # the limits stay root's
    # Again (a health check through the entrypoint): the leaf exists, nothing is redone.
    (cg / "cgroup.subtree_control").write_text("")
    again = _entrypoint(tmp_path, "id", "-u")
    assert again.stdout.strip() == "10001" and (cg / "cgroup.subtree_control").read_text() == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")
def test_entrypoint_without_a_writable_cgroup_says_so_and_still_drops_root(tmp_path: Path) -> None:
    out = _entrypoint(tmp_path, "id", "-u")  # no cgroup v2 there
    assert out.returncode == 0 and out.stdout.strip() == "10001"
    assert "cgroup layers will be missing" in out.stderr


def test_the_env_example_names_every_required_variable() -> None:
    example = (ROOT / "deploy" / "compose.env.example").read_text()
    text = "\n".join(line.split(" #")[0] for line in COMPOSE_FILE.read_text().splitlines()
                     if not line.lstrip().startswith("#"))
    required = set(re.findall(r"\$\{(\w+):\?", text))
    assert required == set(SECRETS)
    for name in required:
        assert re.search(rf"^{name}=$", example, re.M), name
