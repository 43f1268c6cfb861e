"""Log lines as JSON carry the request id the API answered with (X-Request-ID)."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

from fastapi.testclient import TestClient

from app.logs import handler


def test_a_request_s_log_lines_carry_its_id(app: Any) -> None:
    out = io.StringIO()
    line = handler("json")
    line.stream = out  # type: ignore[attr-defined]
    logger = logging.getLogger("ideabench.test.api")
    logger.addHandler(line)
    logger.setLevel(logging.INFO)

    async def noisy() -> dict[str, str]:
        logger.warning("something worth a line")
        return {"ok": "yes"}

    app.add_api_route("/test-noisy", noisy)
    try:
        with TestClient(app) as client:
            given = client.get("/test-noisy", headers={"X-Request-ID": "agent-7.call-42"})
            made = client.get("/test-noisy")
    finally:
        logger.removeHandler(line)
    first, second = (json.loads(text) for text in out.getvalue().splitlines())
    assert first["request_id"] == "agent-7.call-42" == given.headers["X-Request-ID"]
    assert second["request_id"] == made.headers["X-Request-ID"] and second["request_id"].startswith("req_")
    assert first["message"] == "something worth a line" and first["level"] == "WARNING"
