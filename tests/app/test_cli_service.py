"""The service commands: migrate from any directory, keys create/list/revoke, serve's first key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect

ROOT = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("IDEABENCH_") and k not in {"DATABASE_URL", "BROKER_URL"}}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def ideabench(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=cwd, env=clean_env(**env),
                          capture_output=True, text=True, timeout=120)


def test_migrate_embedded_default_from_any_directory(tmp_path: Path) -> None:
    result = ideabench("migrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    db = tmp_path / "var" / "ideabench.db"
    assert db.exists()
    tables = set(inspect(create_engine(f"sqlite:///{db}")).get_table_names())
    assert {"jobs", "reports", "api_keys", "worker_beats", "alembic_version"} <= tables


def test_keys_create_prints_the_key_alone_on_the_last_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/keys.db"
    assert ideabench("migrate", cwd=tmp_path, DATABASE_URL=url).returncode == 0
    created = ideabench("keys", "create", "--role", "agent", "--name", "bot", cwd=tmp_path, DATABASE_URL=url)
    assert created.returncode == 0, created.stderr
    token = created.stdout.rstrip("\n").splitlines()[-1]
    assert token.startswith("ib_") and " " not in token

    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    app = create_app(Settings(database_url=url, broker_url="memory://"))
    with TestClient(app) as client:
        assert client.get("/v1/jobs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    app.state.engine.dispose()

    listed = ideabench("keys", "list", cwd=tmp_path, DATABASE_URL=url)
    key_id = "key_" + token.split("_")[1]
    assert key_id in listed.stdout and "agent" in listed.stdout and token not in listed.stdout
    revoked = ideabench("keys", "revoke", key_id, cwd=tmp_path, DATABASE_URL=url)
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert ideabench("keys", "revoke", "key_nope", cwd=tmp_path, DATABASE_URL=url).returncode == 1
    bad_role = ideabench("keys", "create", "--role", "admin", cwd=tmp_path, DATABASE_URL=url)
    assert bad_role.returncode == 2


def test_serve_creates_a_first_operator_key_only_once(tmp_path: Path, monkeypatch: Any) -> None:
    from app.migrate import upgrade_head
    from app.settings import Settings
    from cli.service import _example_body, _first_operator_key

    settings = Settings(data_dir=tmp_path / "var")
    upgrade_head(settings)
    token = _first_operator_key(settings)
    assert token is not None and token.startswith("ib_")
    assert _first_operator_key(settings) is None
    body = _example_body(settings)
    assert body is not None and body.exists() and '"track": "smoke"' in body.read_text()


@pytest.mark.slow
def test_track_register_validates_in_the_sandbox_then_deprecate(tmp_path: Path) -> None:
    import json

    track_file = ROOT / "tests" / "data" / "tracks" / "tiny_quadratic.py"
    registered = ideabench("track", "register", str(track_file), "--author", "lab-7", cwd=tmp_path)
    assert registered.returncode == 0, registered.stderr
    view = json.loads(registered.stdout)
    assert view["id"] == "tiny_quadratic@1" and view["status"] == "active" and view["author"] == "lab-7"
    assert view["validation"]["sizes"] == {"train": 256, "val": 64, "test": 64}
    assert view["vouched"] is False  # registered is not vouched for: its verdicts count nowhere yet
    vouched = ideabench("track", "vouch", "tiny_quadratic@1", cwd=tmp_path)
    assert vouched.returncode == 0, vouched.stderr
    assert json.loads(vouched.stdout)["vouched"] is True and json.loads(vouched.stdout)["vouched_by"].startswith("cli:")
    unvouched = ideabench("track", "unvouch", "tiny_quadratic@1", cwd=tmp_path)
    assert unvouched.returncode == 0 and json.loads(unvouched.stdout)["vouched"] is False
    deprecated = ideabench("track", "deprecate", "tiny_quadratic@1", cwd=tmp_path)
    assert deprecated.returncode == 0, deprecated.stderr
    assert json.loads(deprecated.stdout)["deprecated"] is True
    bad = tmp_path / "bad.py"
    bad.write_text(track_file.read_text().replace("default_rng(seed)", "default_rng()"))
    rejected = ideabench("track", "register", str(bad), cwd=tmp_path)
    assert rejected.returncode == 2
    assert json.loads(rejected.stdout)["error"]["code"] == "invalid_track"
