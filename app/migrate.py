"""Run the Alembic migrations from code (``ideabench migrate``), from any working directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.settings import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent


def alembic_config(database_url: str) -> Any:
    """An Alembic ``Config`` pointing at the repo's migrations and ``database_url``."""
    from alembic.config import Config

    ini = REPO_ROOT / "alembic.ini"
    migrations = REPO_ROOT / "migrations"
    if not migrations.is_dir():
        raise RuntimeError(
            f"Alembic migrations not found at {migrations}; install ideabench from its source "
            "tree (pip install -e .) so the migrations ship with it."
        )
    config = Config(str(ini)) if ini.exists() else Config()
    config.set_main_option("script_location", str(migrations))
    config.attributes["database_url"] = database_url
    config.attributes["configure_logging"] = False
    return config


def upgrade_head(settings: Settings) -> None:
    """``alembic upgrade head`` on the settings' database."""
    from alembic import command

    command.upgrade(alembic_config(settings.database_url), "head")
