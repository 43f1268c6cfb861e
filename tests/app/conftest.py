"""Fixtures shared by the API's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.keys.service import create_key


@pytest.fixture(params=["sqlite", "postgres"])
def env(request: pytest.FixtureRequest) -> Iterator[tuple[Any, TestClient, dict[str, str]]]:
    """(app, client, tokens) on each database backend; tokens of agent, agent2, viewer, operator."""
    app = request.getfixturevalue("app" if request.param == "sqlite" else "pg_app")
    with app.state.sessionmaker() as session:
        tokens = {r: create_key(session, r, r).token for r in ("agent", "viewer", "operator")}
        tokens["agent2"] = create_key(session, "agent", "agent2").token
        session.commit()
    with TestClient(app, raise_server_exceptions=False) as client:
        yield app, client, tokens
