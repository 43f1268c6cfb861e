"""Log lines as JSON carry the request id the API answered with (X-Request-ID)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import json_log_lines


def test_a_request_s_log_lines_carry_its_id(app: Any) -> None:
    logger = logging.getLogger("ideabench.test.api")

    async def noisy() -> dict[str, str]:
        logger.warning("something worth a line")
        return {"ok": "yes"}

    app.add_api_route("/test-noisy", noisy)
    with json_log_lines(logger.name) as lines, TestClient(app) as client:
        given = client.get("/test-noisy", headers={"X-Request-ID": "agent-7.call-42"})
        made = client.get("/test-noisy")
    first, second = lines
    assert first["request_id"] == "agent-7.call-42" == given.headers["X-Request-ID"]
    assert second["request_id"] == made.headers["X-Request-ID"] and second["request_id"].startswith("req_")
    assert first["message"] == "something worth a line" and first["level"] == "WARNING"
