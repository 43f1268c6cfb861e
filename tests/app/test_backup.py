"""Backup and restore, both backends: a backup taken while the service writes holds exactly
what it counted; a restore brings back reports, keys (they still authenticate) and custom
tracks, checks every table, refuses to overwrite unless forced; an older backup restored then
migrated forward works."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import text

from app import backup
from app.db import make_engine
from app.keys.service import create_key
from app.main import create_app
from app.migrate import alembic_config, upgrade_head
from app.settings import Settings
from tests.app.factories import insert_report
from tests.app.test_api_errors import EXAMPLE
from tests.conftest import bearer, scratch_postgres

ROOT = Path(__file__).resolve().parents[2]
TRACK = ROOT / "tests" / "data" / "tracks" / "tiny_quadratic.py"


@pytest.fixture(params=["sqlite", "postgres"])
def two_databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(source URL, empty target URL) of one backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'live.db'}", f"sqlite:///{tmp_path / 'restored' / 'ideabench.db'}"
    else:
        with scratch_postgres() as source, scratch_postgres() as target:
            yield source, target


def _settings(url: str, tmp_path: Path, name: str) -> Settings:
    return Settings(data_dir=tmp_path / name, database_url=url, broker_url="memory://")


def _fill(app: Any) -> dict[str, str]:
    """Keys and reports, through the app's own sessions."""
    with app.state.sessionmaker() as session:
        tokens = {role: create_key(session, role, role).token for role in ("agent", "operator")}
        session.flush()
        agent_id = session.execute(text("SELECT id FROM api_keys WHERE role = 'agent'")).scalar_one()
        for _ in range(3):
            insert_report(session, agent_id)
        session.commit()
    return tokens


def test_a_backup_restores_exactly_and_keys_still_work(two_databases: tuple[str, str], tmp_path: Path) -> None:
    source_url, target_url = two_databases
    live = _settings(source_url, tmp_path, "live")
    upgrade_head(live)
    app = create_app(live)
    tokens = _fill(app)
    with TestClient(app) as client:
        track = client.post("/v1/tracks", json={"source": TRACK.read_text(), "file_name": TRACK.name},
                            headers=bearer(tokens["agent"]))
        assert track.status_code == 202, track.text
        job = client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE}, headers=bearer(tokens["agent"]))
        assert job.status_code == 202
        manifest = backup.backup(live, tmp_path / "bk")  # online: the API is up
        after = client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE}, headers=bearer(tokens["agent"]))
        assert after.status_code == 202  # written after the backup: not in it
    assert manifest.counts["reports"] == 3 and manifest.counts["jobs"] == 4 and manifest.counts["api_keys"] == 2
    assert manifest.counts["custom_tracks"] == 1 and manifest.revision is not None
    target = _settings(target_url, tmp_path, "restored")
    restored = backup.restore(target, tmp_path / "bk")
    assert restored.counts == manifest.counts
    app2 = create_app(target)
    with TestClient(app2) as client:
        listed = client.get("/v1/reports", headers=bearer(tokens["agent"]))
        assert listed.status_code == 200 and len(listed.json()["items"]) == 3  # the key authenticates
        assert client.get(f"/v1/jobs/{job.json()['job_id']}", headers=bearer(tokens["agent"])).status_code == 200
        assert client.get(f"/v1/jobs/{after.json()['job_id']}", headers=bearer(tokens["agent"])).status_code == 404
        restored_track = client.get(f"/v1/tracks/{track.json()['id']}", headers=bearer(tokens["agent"])).json()
        assert restored_track["status"] == "validating" and restored_track["id"] == track.json()["id"]
    with pytest.raises(backup.BackupError, match="--force"):  # never over a database that holds tables
        backup.restore(target, tmp_path / "bk")
    assert backup.restore(target, tmp_path / "bk", force=True).counts == manifest.counts


def test_an_older_backup_restores_and_migrates_forward(two_databases: tuple[str, str], tmp_path: Path) -> None:
    source_url, target_url = two_databases
    command.upgrade(alembic_config(source_url), "0006")  # before webhooks and per-key limits
    engine = make_engine(source_url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO api_keys (id, name, role, token_sha256, created_at) "
                          "VALUES ('key_old', 'old', 'agent', :h, CURRENT_TIMESTAMP)"), {"h": "a" * 64})
    engine.dispose()
    manifest = backup.backup(_settings(source_url, tmp_path, "old"), tmp_path / "bk")
    assert manifest.revision == "0006"
    target = _settings(target_url, tmp_path, "new")
    backup.restore(target, tmp_path / "bk")
    upgrade_head(target)
    engine = make_engine(target_url)
    with engine.connect() as conn:
        secret = conn.execute(text("SELECT webhook_secret FROM api_keys WHERE id = 'key_old'")).scalar_one()
        revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    engine.dispose()
    assert secret.startswith("whsec_") and revision != "0006"


def test_the_cli_backs_up_and_refuses_a_non_empty_target(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade_head(_settings(url, tmp_path, "x"))
    env = {"DATABASE_URL": url, "IDEABENCH_DATA_DIR": str(tmp_path / "x"), "PYTHONPATH": str(ROOT),
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "cli.main", "backup", str(tmp_path / "b")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "sqlite"
    again = subprocess.run([sys.executable, "-m", "cli.main", "restore", str(tmp_path / "b")], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "--force" in again.stderr
