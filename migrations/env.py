"""Alembic environment: targets app's metadata; batch mode on SQLite."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from app.db import make_engine
from app.models import metadata
from app.settings import Settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    """The URL given by the caller, else the settings' (DATABASE_URL)."""
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    return url or Settings().database_url


def run_migrations_offline() -> None:
    """Emit SQL without a connection."""
    url = database_url()
    context.configure(
        url=url,
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through a live connection."""
    engine = make_engine(database_url())
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
