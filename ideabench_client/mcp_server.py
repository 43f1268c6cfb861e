"""ideabench as an MCP server (the ``mcp`` SDK's ``MCPServer``): the same tools over stdio
(``ideabench mcp``, talking to the service at ``IDEABENCH_URL`` with ``IDEABENCH_KEY``) and
over streamable HTTP, mounted on the API at ``/mcp`` with the caller's own bearer key.

Every tool goes through ``ideabench_client.AsyncClient``, so the MCP face answers exactly
what the REST API answers; an API error comes back as a tool error whose text is the JSON
``{code, message, hint}``. Each tool's description says what to do next.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ideabench_client import AsyncClient, IdeabenchError

ClientFor = Callable[[Context], AsyncClient]  # the client a tool call uses (its key, its transport)
DOCS = Path(__file__).resolve().parent.parent / "docs"
INSTRUCTIONS = (
    "ideabench judges an ML idea at neural-network scale: it trains your model and the track's "
    "baseline on the same learning-rate grid, then on fresh paired seeds, with an exact paired test, "
    "and confirms a win on seeds drawn for your job alone. Start with list_tracks, read one with "
    "describe_track (its contract and example idea), submit_idea, then wait_for_job and get_report."
)


def _error(exc: IdeabenchError) -> ToolError:
    return ToolError(json.dumps({"code": exc.code, "message": exc.message, "hint": exc.hint}))


def _doc(name: str, fallback: str) -> str:
    try:
        return (DOCS / name).read_text()
    except OSError:
        return fallback


def build_server(client_for: ClientFor) -> MCPServer:
    """The MCP server; ``client_for(ctx)`` gives the API client of one tool call."""
    server = MCPServer("ideabench", title="ideabench", instructions=INSTRUCTIONS, version="1")

    async def call(ctx: Context, method: str, *args: Any, **kwargs: Any) -> Any:
        client = client_for(ctx)
        try:
            return await getattr(client, method)(*args, **kwargs)
        except IdeabenchError as exc:
            raise _error(exc) from None
        finally:
            await client.aclose()

    @server.tool()
    async def list_tracks(ctx: Context) -> dict[str, Any]:
        """The tracks an idea can be judged on (name, task, metric, description). Next: call
        describe_track with a name to read its input/output spec, contract and example idea."""
        tracks = await call(ctx, "tracks")
        keep = ("name", "title", "task", "description", "metric", "kind", "id")
        return {"tracks": [{k: t.get(k) for k in keep if k in t} for t in tracks]}

    @server.tool()
    async def describe_track(name: str, ctx: Context) -> dict[str, Any]:
        """One track's card: spec (input_shape, output_shape), metric, defaults (lr grid, epochs,
        n_seeds), parameter cap, the idea contract and an example idea file. Next: write a file
        defining build_model(spec) like the example and call submit_idea."""
        return dict(await call(ctx, "track", name))

    @server.tool()
    async def submit_idea(track: str, code: str, ctx: Context, baseline_code: str | None = None,
                          name: str | None = None, hypothesis: str | None = None,
                          callback_url: str | None = None) -> dict[str, Any]:
        """Submit an idea file (Python source defining build_model(spec)) to a track; optionally a
        matched baseline file of the same contract, a name, a hypothesis, and a public callback_url
        that gets a signed POST when the job ends. Returns the queued job. Next: call wait_for_job
        with its job_id (judging takes seconds to minutes)."""
        job = await call(ctx, "submit", track, code, baseline_code=baseline_code, name=name, hypothesis=hypothesis,
                         callback_url=callback_url)
        return {**job.raw, "next": f"call wait_for_job with job_id {job.job_id!r}"}

    @server.tool()
    async def wait_for_job(job_id: str, ctx: Context, timeout_s: float = 900.0) -> dict[str, Any]:
        """Wait until the job ends (or timeout_s), sending progress notifications (runs done of
        runs total) meanwhile; returns the job. Next: if it succeeded, call get_report; if it
        failed, read error.code and error.hint, fix the file and submit again."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = max(0.0, deadline - time.monotonic())
            job = await call(ctx, "job", job_id, wait=min(20.0, left) or None)
            if job.runs_total:
                await ctx.report_progress(job.runs_done, job.runs_total, f"{job.stage or job.status}")
            if job.finished or left <= 0:
                break
        out = dict(job.raw)
        if job.status == "succeeded":
            out["next"] = f"call get_report with job_id {job_id!r}"
        elif job.finished:
            out["next"] = "read error.code and error.hint, fix the idea file and call submit_idea again"
        else:
            out["next"] = "still running: call wait_for_job again"
        return out

    @server.tool()
    async def get_report(job_id: str, ctx: Context) -> dict[str, Any]:
        """The judged job's report: system_verdict (worked/partial/failed), practical_verdict
        (helps/harms/inconclusive), the summary paragraph, q_value, and the whole report JSON
        (both stages, per-seed values, sweeps, mechanism)."""
        return dict(await call(ctx, "report", job_id))

    @server.tool()
    async def search_reports(ctx: Context, track: str | None = None, system_verdict: str | None = None,
                             practical_verdict: str | None = None, family: str | None = None,
                             limit: int = 20) -> dict[str, Any]:
        """Report rows filtered by track, system_verdict, practical_verdict or idea family (your
        re-rolls), newest first, at most limit (<= 200), each with its q-value."""
        client = client_for(ctx)
        try:
            rows = [row async for row in client.reports(
                limit=max(1, min(limit, 200)), page_size=max(1, min(limit, 200)), track=track,
                system_verdict=system_verdict, practical_verdict=practical_verdict, family=family)]
        except IdeabenchError as exc:
            raise _error(exc) from None
        finally:
            await client.aclose()
        return {"reports": rows}

    @server.tool()
    async def compare_numbers(baseline: list[float], idea: list[float], ctx: Context,
                              lower_is_better: bool = True) -> dict[str, Any]:
        """The exact paired comparison (sign-flip p, CI, effect size, MDE) of two equally long
        lists of per-seed numbers you measured yourself: what the bench would conclude."""
        return dict(await call(ctx, "compare", baseline, idea, lower_is_better))

    @server.tool()
    async def cancel_job(job_id: str, ctx: Context) -> dict[str, Any]:
        """Cancel a queued job at once, or ask the worker to stop a running one; returns the job."""
        job = await call(ctx, "cancel", job_id)
        return dict(job.raw)

    @server.resource("ideabench://docs/idea-contract", mime_type="text/markdown")
    def idea_contract() -> str:
        """The idea contract: what an idea file defines (build_model, HPARAMS, MECHANISM)."""
        return _doc("idea-contract.md", "Define build_model(spec) -> torch.nn.Module; see describe_track.")

    @server.resource("ideabench://docs/protocol", mime_type="text/markdown")
    def protocol() -> str:
        """How an idea is judged: the report's fields, the statistics and the verdict rules."""
        return _doc("reports.md", "") + "\n\n" + _doc("statistics.md", "")

    return server


def stdio_main(url: str | None = None, key: str | None = None) -> int:
    """``ideabench mcp``: serve over stdio, every call to ``url`` with ``key`` (or the usual
    ``IDEABENCH_URL`` / ``IDEABENCH_KEY`` / login file)."""
    build_server(lambda ctx: AsyncClient(url, key)).run("stdio")
    return 0
