"""Declarative base, engine and session factories, and the session dependency.

Nothing is created at import time: ``create_app`` builds the engine from the
settings and keeps the session factory on ``app.state``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import DateTime, Engine, MetaData, create_engine, event, text
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Base of every table; stable constraint names for migrations."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored as UTC and always read back timezone-aware.

    SQLite has no time zones; storing naive UTC keeps string order equal to time
    order, which keyset pagination relies on.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    """Now, timezone-aware UTC, by this host's clock: for what only this host compares."""
    return datetime.now(UTC)


def db_now(session: Session) -> datetime:
    """Now by the database's clock (Postgres ``clock_timestamp()``), timezone-aware UTC: the
    one clock every host's leases, expiries and queue stamps are written and judged by
    (issue 28.2: a reconciler ~58 s ahead of a worker requeued its healthy jobs). SQLite is
    embedded, one host's file: its clock is this host's."""
    if session.get_bind().dialect.name != "postgresql":
        return utcnow()
    value = session.execute(text("SELECT clock_timestamp()")).scalar_one()
    return value.astimezone(UTC)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def normalize_database_url(url: str) -> str:
    """Plain ``postgresql://`` (or ``postgres://``) means psycopg2, the driver we ship."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg2://" + url[len(prefix):]
    return url


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and its directory created."""
    url = normalize_database_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        connect_args = {"check_same_thread": False, "timeout": 30.0}
        engine = create_engine(url, connect_args=connect_args, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    # No pre-ping: it costs a round trip per request. After a database restart the
    # first failing statement invalidates the whole pool, so one request errors.
    kwargs.setdefault("pool_recycle", 1800)
    return create_engine(url, **kwargs)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded objects usable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False)


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request; the route commits, this only closes (rolling back leftovers).

    Async so that opening it costs no thread hop (a Session connects lazily). Closing a
    session that holds no transaction (the route committed, or never queried) talks to no
    database, so it runs here; a rollback of a transaction left open runs in the thread pool.
    """
    factory: sessionmaker[Session] = request.app.state.sessionmaker
    session = factory()
    try:
        yield session
    finally:
        if session.in_transaction():
            await run_in_threadpool(session.close)
        else:
            session.close()


SessionDep = Annotated[Session, Depends(get_session)]
