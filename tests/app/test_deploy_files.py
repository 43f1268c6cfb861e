"""docker-compose.yml parses and has the services, health checks and the one-shot migration."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import CI

ROOT = Path(__file__).resolve().parents[2]


def compose(*args: str) -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        if CI:
            pytest.fail("docker-compose is not installed (apt-get install docker-compose); required when CI=true")
        pytest.skip("docker-compose not installed; `apt-get install docker-compose` (scripts/system_deps.sh)")
    result = subprocess.run([binary, "-f", str(ROOT / "docker-compose.yml"), *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


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
    import yaml

    api = yaml.safe_load(compose("config"))["services"]["api"]
    shared = api["environment"]["PROMETHEUS_MULTIPROC_DIR"]
    command = " ".join(api["command"])
    assert "--workers 2" in command
    assert command.index("rm -rf") < command.index("mkdir -p") < command.index("exec uvicorn")
    assert shared.startswith("/tmp/") and "PROMETHEUS_MULTIPROC_DIR" in command
