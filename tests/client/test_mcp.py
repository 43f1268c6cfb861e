"""The MCP server through the MCP SDK's own client, over stdio (``ideabench mcp``) and over
streamable HTTP (``/mcp`` on the API, with the bearer key), against the real service."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from ideabench_client import Client as IdeabenchClient
from ideabench_client import verify_webhook
from tests.client.conftest import STREAM_MAX_S, slow_to_build
from tests.client.test_client import WIDE
from tests.workers.test_end_to_end import EXAMPLE, wait_for
from tests.workers.test_webhooks import Receiver

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"list_tracks", "describe_track", "submit_idea", "wait_for_job", "get_report", "search_reports",
         "compare_numbers", "cancel_job", "list_jobs", "get_job", "check_idea", "get_check"}


def _json(result: Any) -> Any:
    """A tool's answer: its structured content (issue 27.6: every tool has an output schema, and
    answers in it), the same as its text."""
    assert not result.is_error, result.content
    assert result.structured_content is not None, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def _error(result: Any) -> dict[str, Any]:
    """The tool error's {code, message, hint} (after the SDK's "Error executing tool ...: ")."""
    assert result.is_error
    text = result.content[0].text
    return dict(json.loads(text[text.index("{"):]))


def stdio(url: str, key: str) -> Client:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IDEABENCH_")}
    env.update(IDEABENCH_URL=url, IDEABENCH_KEY=key, PYTHONPATH=str(ROOT))
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "cli.main", "mcp"], env=env, cwd=ROOT))


def http(url: str, key: str | None) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client(streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=120)))


@pytest.mark.slow
def test_an_agents_session_over_stdio(service: tuple[str, str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    url, key, _log = service
    progress: list[Any] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    receiver = Receiver()

    async def session() -> dict[str, Any]:
        async with stdio(url, key) as client:
            assert {t.name for t in (await client.list_tools()).tools} >= TOOLS
            tracks = _json(await client.call_tool("list_tracks", {}))["tracks"]
            assert "smoke" in {t["name"] for t in tracks}
            card = _json(await client.call_tool("describe_track", {"name": "smoke"}))
            assert card["spec"]["input_shape"] == [8] and "build_model" in card["example_idea"]
            # the card's example, slow enough to build that the wait outlasts the stream's life
            job = _json(await client.call_tool("submit_idea", {"track": "smoke", "code": slow_to_build(card["example_idea"]),
                                                                "name": "mcp-stdio", "callback_url": receiver.url}))
            assert job["status"] == "queued" and "wait_for_job" in job["next"]
            began = time.monotonic()
            done = _json(await client.call_tool(
                "wait_for_job", {"job_id": job["job_id"]},
                progress_callback=on_progress))
            # one wait across the stream's rotation (STREAM_MAX_S) and its keep-alives
            assert time.monotonic() - began > STREAM_MAX_S, "the job was too short to test a rotated stream"
            assert done["status"] == "succeeded" and "get_report" in done["next"]
            listed = _json(await client.call_tool("list_jobs", {"status": "succeeded", "limit": 5}))["jobs"]
            assert job["job_id"] in {j["job_id"] for j in listed}
            one = _json(await client.call_tool("get_job", {"job_id": job["job_id"]}))
            assert one["status"] == "succeeded" and one["report_id"] == done["report_id"]
            compact = _json(await client.call_tool("get_report", {"job_id": job["job_id"]}))
            assert compact["system_verdict"] in ("worked", "partial", "failed") and compact["summary"]
            assert compact["counted"] is True  # a built-in track's verdict counts in its totals
            assert "screening" in compact and "report" not in compact and "\"per_seed\"" not in json.dumps(compact)
            # what decided, and how: one-sided, its level, the confirmation's looks (issue 27)
            decision, screening = compact["decision"], compact["screening"]
            assert decision["sided"].startswith("one-sided") and decision["decided_by"] in ("screening", "confirmation")
            assert 0 < screening["alpha"] < 1 and 0 <= screening["p_better"] <= 1, screening
            deciding = compact[decision["decided_by"]]
            assert decision["level"] == deciding["alpha"], (decision, deciding)
            if compact["confirmation"] is not None:
                assert decision["looks"] and all(0 < look["alpha"] < 1 for look in decision["looks"]), decision
            assert len(json.dumps(compact)) < len(json.dumps(
                _json(await client.call_tool("get_report", {"job_id": job["job_id"], "full": True})))) / 2
            report = _json(await client.call_tool("get_report", {"job_id": job["job_id"], "full": True}))
            late = _error(await client.call_tool("cancel_job", {"job_id": job["job_id"]}))
            assert late["code"] == "job_finished" and late["hint"], late
            other = _json(await client.call_tool("submit_idea", {"track": "smoke", "code": card["example_idea"],
                                                                  "name": "mcp-cancelled"}))
            cancelled = _json(await client.call_tool("cancel_job", {"job_id": other["job_id"]}))
            assert cancelled["job_id"] == other["job_id"], cancelled
            # queued: cancelled at once; running: the worker is asked to stop it
            assert cancelled["status"] == "cancelled" or cancelled["cancel_requested"], cancelled
            ended = _json(await client.call_tool("wait_for_job", {"job_id": other["job_id"]}))
            assert ended["status"] in ("cancelled", "succeeded"), ended  # a smoke job may end first
            bad = _error(await client.call_tool("submit_idea", {"track": "smoke", "code": "def build_model(:\n"}))
            assert bad["code"] == "invalid_code" and bad["hint"]
            # the engine's hints name this face's tools too (bench/errors.py names GET /v1/tracks/{name})
            unbuilt = _error(await client.call_tool("submit_idea", {"track": "smoke", "code": "import torch\n"}))
            assert unbuilt["code"] == "missing_build_model" and "describe_track" in unbuilt["hint"], unbuilt
            assert "/v1/" not in unbuilt["hint"]
            # hints name this face's tools, never a REST route (issue 27.4)
            missing = _error(await client.call_tool("get_report", {"job_id": "job_nope"}))
            assert missing["code"] == "job_not_found" and "list_jobs" in missing["hint"], missing
            assert "/v1/" not in missing["hint"]
            contract = await client.read_resource("ideabench://docs/idea-contract")
            assert "build_model" in contract.contents[0].text
            return dict(report)

    report = asyncio.run(session())
    # submit_idea's callback_url reached the service: the worker's sender POSTs the signed end event once
    with IdeabenchClient(url, key) as bench:
        wait_for(lambda: bench.job(report["job_id"]).raw["callback"]["state"] == "delivered", 30, "the webhook")
        receiver.close()
        (headers, body), = receiver.received
        message = verify_webhook(bench.me()["webhook_secret"], body, headers)
    assert message["type"] == "job.succeeded" and message["data"]["report_id"] == report["report_id"]
    # stdio logs at WARNING unless asked (`ideabench mcp --log-level`): no line per request on stderr
    assert "Processing request" not in capfd.readouterr().err
    assert report["report"]["system_judged"] is True and report["system_verdict"] in ("worked", "partial", "failed")
    assert progress and progress[-1][0] == progress[-1][1]  # the last notification: all runs done
    assert len(progress) > 3, progress  # one as each run ended, not one at the end
    # each with its denominator, the sweep's too (its first stage event came before the plan)
    assert all(total and 0 <= done <= total for done, total, _ in progress), progress
    assert any(message and message.startswith("sweep") for _, _, message in progress), progress
    assert [done for done, _, _ in progress] == sorted(done for done, _, _ in progress)  # never back


def test_every_tool_reads_well_for_an_llm(service: tuple[str, str, Path]) -> None:
    """Issue 27.6: every parameter described, enums for verdicts and statuses, annotations on
    every tool; and a server without a key says which variable to set."""
    url, key, _log = service

    async def session() -> list[Any]:
        async with stdio(url, key) as client:
            return list((await client.list_tools()).tools)

    tools = {t.name: t for t in asyncio.run(session())}
    for tool in tools.values():
        assert tool.description and tool.annotations is not None, tool.name
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), (tool.name, name)
    search = tools["search_reports"].input_schema["properties"]
    assert "worked" in json.dumps(search["system_verdict"]) and "helps" in json.dumps(search["practical_verdict"])
    assert "cancelled" in json.dumps(tools["list_jobs"].input_schema["properties"]["status"])
    assert {"hparams", "mechanism", "idempotency_key"} <= set(tools["submit_idea"].input_schema["properties"])
    assert tools["get_report"].annotations.read_only_hint and tools["cancel_job"].annotations.destructive_hint
    check = tools["check_idea"]
    assert check.annotations.idempotent_hint and not check.annotations.destructive_hint
    assert not check.annotations.read_only_hint and "check_idea" in (tools["submit_idea"].description or "")
    assert {"track", "code", "baseline_code", "hparams", "mechanism"} <= set(check.input_schema["properties"])
    # output schemas: what each tool answers, its deciding fields typed and described (27.6)
    for tool in tools.values():
        assert tool.output_schema and tool.output_schema.get("properties"), tool.name
    report = tools["get_report"].output_schema
    assert {"system_verdict", "practical_verdict", "summary"} <= set(report["properties"])
    assert "worked" in json.dumps(report["properties"]["system_verdict"])
    assert "errored" in json.dumps(tools["get_job"].output_schema)

    async def keyless() -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("IDEABENCH_")}
        env.update(IDEABENCH_URL=url, PYTHONPATH=str(ROOT), IDEABENCH_CONFIG=str(Path(os.devnull)))
        params = StdioServerParameters(command=sys.executable, args=["-m", "cli.main", "mcp", "--log-level", "ERROR"],
                                       env=env, cwd=ROOT)
        async with Client(params) as client:
            return _error(await client.call_tool("list_jobs", {}))

    missing = asyncio.run(keyless())
    assert missing["code"] == "missing_api_key" and "IDEABENCH_KEY" in missing["hint"]


@pytest.mark.slow
def test_check_idea_before_submit_idea(service: tuple[str, str, Path]) -> None:
    """Issue 27.5: check_idea answers passed (what it found) or failed (the error a job would end
    with) as structured content, and says what to call next; a static error is a tool error."""
    url, key, _log = service

    async def session() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with stdio(url, key) as client:
            passed = _json(await client.call_tool("check_idea", {"track": "smoke", "code": EXAMPLE}))
            again = _json(await client.call_tool("get_check", {"check_id": passed["check_id"]}))
            failed = _json(await client.call_tool("check_idea", {"track": "smoke", "code": WIDE}))
            bad = _error(await client.call_tool("check_idea", {"track": "smoke", "code": "def build_model(:\n"}))
            return passed, again, failed, bad

    passed, again, failed, bad = asyncio.run(session())
    assert passed["status"] == "passed" and passed["result"]["parameters"]["idea"] == [321], passed
    assert "submit_idea" in passed["next"] and again["check_id"] == passed["check_id"]
    assert again["status"] == "passed"
    assert failed["status"] == "failed" and failed["error"]["code"] == "parameter_parity" and failed["error"]["hint"]
    assert "check_idea" in failed["next"]
    assert bad["code"] == "invalid_code" and bad["hint"]


@pytest.mark.slow
def test_the_mounted_http_endpoint_with_the_bearer_key(service: tuple[str, str, Path]) -> None:
    url, key, _log = service

    async def session() -> None:
        async with http(url, key) as client:
            assert {t.name for t in (await client.list_tools()).tools} >= TOOLS
            rows = _json(await client.call_tool("search_reports", {"track": "smoke", "limit": 5}))["reports"]
            assert rows, "the stdio session's report"
            done = _json(await client.call_tool("wait_for_job", {"job_id": rows[0]["job_id"], "timeout_s": 5}))
            assert done["status"] == "succeeded"
            report = _json(await client.call_tool("get_report", {"job_id": rows[0]["job_id"]}))
            assert report["report_id"] == rows[0]["report_id"]
            missing = _error(await client.call_tool("get_report", {"job_id": "job_nope"}))
            assert missing["code"] == "job_not_found"
            bad = _error(await client.call_tool("submit_idea", {"track": "smoke", "code": "def build_model(:\n"}))
            assert bad["code"] == "invalid_code"
            block = _json(await client.call_tool("compare_numbers", {"baseline": [1.0] * 8, "idea": [0.5] * 8}))
            assert block["p_value"] == 2 / 256
        assert EXAMPLE

    asyncio.run(session())
    refused = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                         headers={"Accept": "application/json, text/event-stream"})
    assert refused.status_code == 401 and refused.json()["code"] == "missing_api_key"
    wrong = httpx.post(f"{url}/mcp", json={}, headers={"Authorization": "Bearer ib_nope_nope"})
    assert wrong.status_code == 401 and wrong.json()["code"] == "invalid_api_key"
