"""A self-describing API: ``GET /`` and ``GET /v1`` link everything an agent needs, and the
guides (idea contract, protocol, statistics, agents, API, tracks, error codes) are served
as ``text/markdown`` under ``/v1/docs/...``. No key needed: nothing here is secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from app.errors import HINTS, ApiCode, ApiError, error_responses
from bench.errors import DEFAULT_HINTS, ErrorCode

router = APIRouter(tags=["discovery"])
DOCS = Path(__file__).resolve().parents[2] / "docs"
GUIDES = {
    "idea-contract": ("idea-contract.md", "What an idea file defines: build_model, HPARAMS, MECHANISM."),
    "protocol": ("reports.md", "The report and the rules that fill it: statistics, verdicts."),
    "statistics": ("statistics.md", "Replication on fresh seeds, attempt records, q-values."),
    "agents": ("agents.md", "A session through each face: REST+SSE, Python client, CLI, MCP."),
    "api": ("api.md", "Every route, its fields, limits and pagination."),
    "tracks": ("tracks.md", "The built-in tracks, their sizes and measured times."),
    "custom-tracks": ("custom-tracks.md", "Registering a track of your own."),
}
MARKDOWN = "text/markdown; charset=utf-8"


def _links() -> dict[str, Any]:
    return {
        "service": "ideabench",
        "version": "1",
        "description": "Judges ML ideas: submit an idea file for a track, follow its job, read the report.",
        "next": "GET /v1/tracks, then GET /v1/tracks/{name} (its contract and example idea), then POST "
                "/v1/ideas/check (the checks a job makes before training, in seconds), then POST /v1/ideas.",
        "links": {
            "tracks": "/v1/tracks", "check": "/v1/ideas/check", "submit": "/v1/ideas", "jobs": "/v1/jobs", "job": "/v1/jobs/{job_id}",
            "job_events": "/v1/jobs/{job_id}/events", "job_report": "/v1/jobs/{job_id}/report",
            "reports": "/v1/reports", "verdict_summary": "/v1/verdicts/summary", "compare": "/v1/compare",
            "keys": "/v1/keys", "mcp": "/mcp", "openapi": "/openapi.json", "docs": "/v1/docs",
            "health": "/healthz", "ready": "/readyz", "judging": "/readyz/judging",
        },
        "guides": {name: {"href": f"/v1/docs/{name}", "about": about} for name, (_, about) in GUIDES.items()}
        | {"errors": {"href": "/v1/docs/errors", "about": "Every error code and what to do about it."}},
    }


@router.get("/", summary="The API's index")
@router.get("/v1", summary="The API's index")
def index() -> dict[str, Any]:
    """Links to every route and guide, and where to start."""
    return _links()


@router.get("/v1/docs", summary="The guides")
def docs_index() -> dict[str, Any]:
    """The guides served as markdown."""
    return {"guides": _links()["guides"]}


def errors_markdown() -> str:
    """Every error code with its hint, one anchor per code (an error's ``type`` points here)."""
    lines = ["# Error codes", "", "Every error is an RFC 9457 problem with `code`, `message` and `hint`.", ""]
    entries = {**{c.value: h for c, h in DEFAULT_HINTS.items()}, **{str(c): h for c, h in HINTS.items()}}
    for code in sorted({*(c.value for c in ErrorCode), *(c.value for c in ApiCode)}):
        lines += [f'## <a id="{code}"></a>`{code}`', "", entries.get(code) or "See the message.", ""]
    return "\n".join(lines)


@router.get("/v1/docs/{name}", response_class=PlainTextResponse, responses={
    **error_responses(404), 200: {"content": {"text/markdown": {}}, "description": "The guide, as markdown."}})
def guide(name: str) -> PlainTextResponse:
    """One guide as markdown: idea-contract, protocol, statistics, agents, api, tracks, custom-tracks, errors."""
    if name == "errors":
        return PlainTextResponse(errors_markdown(), media_type=MARKDOWN)
    entry = GUIDES.get(name)
    try:
        text = (DOCS / entry[0]).read_text() if entry else None
    except OSError:
        text = None
    if text is None:
        raise ApiError(404, ApiCode.NOT_FOUND, f"No guide {name!r} here.",
                       f"The guides are: {', '.join([*GUIDES, 'errors'])} (GET /v1/docs).")
    return PlainTextResponse(text, media_type=MARKDOWN)
