"""ideabench as an MCP server (the ``mcp`` SDK's ``MCPServer``): the same tools over stdio
(``ideabench mcp``, talking to the service at ``IDEABENCH_URL`` with ``IDEABENCH_KEY``) and
over streamable HTTP, mounted on the API at ``/mcp`` with the caller's own bearer key.

Every tool goes through ``ideabench_client.AsyncClient``, so the MCP face answers exactly
what the REST API answers; an API error comes back as a tool error whose text is the JSON
``{code, message, hint}``. Each tool's description says what to do next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from ideabench_client import AsyncClient, IdeabenchError
from ideabench_client.hints import for_face, with_face_hints

ClientFor = Callable[[Context], AsyncClient]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]  # the client a tool call uses (its key, its transport)
DOCS = Path(__file__).resolve().parent.parent / "docs"
INSTRUCTIONS = (
    "ideabench judges an ML idea at neural-network scale: it trains your model and the track's "
    "baseline on the same learning-rate grid, then on fresh paired seeds, with an exact paired test, "
    "and confirms a win on seeds drawn for your job alone. Start with list_tracks, read one with "
    "describe_track (its contract and example idea), check_idea (seconds, no job: fix what it finds), "
    "submit_idea, then wait_for_job and get_report."
)


def _error(exc: IdeabenchError) -> ToolError:
    """The service's error as the tool's, its hint in this face's words (``hints``)."""
    hint = for_face("mcp", exc.code, exc.message, exc.hint)
    return ToolError(json.dumps({"code": exc.code, "message": exc.message, "hint": hint}))


def _doc(name: str, fallback: str) -> str:
    try:
        return (DOCS / name).read_text()
    except OSError:
        return fallback


CheckId = Annotated[str, Field(description="A check's id, as check_idea answered it (chk_...).",
                               min_length=1, max_length=64)]
JobId = Annotated[str, Field(description="A job's id, as submit_idea or list_jobs answered it (job_...).",
                             min_length=1, max_length=64)]
TrackName = Annotated[str, Field(description="A track's name or name@version, from list_tracks (e.g. smoke).",
                                 min_length=1, max_length=64)]
SystemVerdict = Literal["worked", "partial", "failed"]
PracticalVerdict = Literal["helps", "harms", "inconclusive"]
JobStatus = Literal["queued", "running", "succeeded", "errored", "cancelled"]
IdeaCode = Annotated[str, Field(description="The idea file: Python source that defines build_model(spec) "
                                "returning a torch.nn.Module (see describe_track's example_idea).", min_length=1)]
BaselineCode = Annotated[str | None, Field(description="A matched baseline file of the same contract; default: "
                                           "the track's canonical baseline.")]
Hparams = Annotated[dict[str, list[Any]] | None, Field(description=(
    "An extra sweep grid, e.g. {\"width\": [32, 64]}: names are identifiers, values numbers, bools or short "
    "tokens; it overrides the file's HPARAMS and counts as tuning budget."))]
Mechanism = Annotated[dict[str, Any] | None, Field(description=(
    "A MECHANISM: {quantity, prediction, expect: {kind, ...}, probe?}; see the idea contract resource. It "
    "overrides the file's."))]
READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
# The compact report: what an agent decides on, without the sweeps and per-seed tables (~14 KB).
REPORT_KEYS = ("report_id", "job_id", "track", "name", "system_verdict", "practical_verdict", "practical_detail",
               "mechanism_ok", "p_value", "q_value", "delta_mean", "delta_stage", "counted", "links")
BENCH_KEYS = ("decided_by", "p_helps", "smallest_effect", "warnings", "parameter_parity", "sandbox")
COMPARISON_KEYS = ("delta_mean", "rel_delta_pct", "p_value", "p_better", "alpha", "ci_low", "ci_high", "mde",
                   "mde_rel_pct", "idea_wins", "n_pairs", "verdict")


class _Out(BaseModel):
    """A tool's answer: the fields an agent decides on are typed and described (the tool's output
    schema); every other field of the service's answer passes through unchanged."""

    model_config = ConfigDict(extra="allow")


class TrackItem(_Out):
    name: str = Field(description="The track's name: pass it as track to check_idea and submit_idea.")
    title: str | None = None
    task: str | None = Field(default=None, description="regression or classification.")
    available: bool = Field(default=True, description="Whether this deployment can run the track now.")
    unavailable_reason: str | None = Field(default=None, description="Why not, when available is false.")


class TrackListOut(_Out):
    tracks: list[TrackItem]


class TrackCardOut(_Out):
    id: str = Field(description="name@version.")
    name: str
    spec: dict[str, Any] = Field(description="input_shape and output_shape: what build_model(spec) receives.")
    metric: dict[str, Any] = Field(description="The metric, its loss and whether lower is better.")
    defaults: dict[str, Any] = Field(description="lr grid, epochs, batch size, n_seeds: the protocol's settings.")
    param_cap: int | None = Field(default=None, description="The most parameters the idea may have.")
    example_idea: str | None = Field(default=None, description="A complete idea file to start from.")
    limits: dict[str, Any] | None = Field(default=None, description="What a job may spend (seconds, memory).")


class ErrorOut(_Out):
    code: str = Field(description="A stable error code (the idea contract lists them).")
    message: str
    hint: str = Field(description="What to change before trying again.")


class CheckOut(_Out):
    check_id: str
    status: Literal["pending", "running", "passed", "failed"]
    result: dict[str, Any] | None = Field(default=None, description="When passed: counts against the limits, "
                                          "the execution path, the runs a job would make.")
    error: ErrorOut | None = Field(default=None, description="When failed: what the job would end with.")
    next: str = Field(description="The tool to call next.")


class ProgressOut(_Out):
    stage: str | None = None
    runs_done: int = 0
    runs_total: int | None = Field(default=None, description="null before the run plan is known.")
    runs_at_most: int | None = Field(default=None, description="The most runs the job may still make in all.")
    eta_s: float | None = None


class JobOut(_Out):
    job_id: str
    status: JobStatus
    track: str
    progress: ProgressOut | None = None
    error: ErrorOut | None = Field(default=None, description="When errored: why, and what to change.")
    report_id: str | None = None
    next: str | None = Field(default=None, description="The tool to call next.")


class JobListOut(_Out):
    jobs: list[JobOut]


class ComparisonOut(_Out):
    delta_mean: float | None = Field(default=None, description="Mean paired difference, idea - baseline.")
    p_value: float | None = Field(default=None, description="The exact two-sided paired p.")
    ci_low: float | None = None
    ci_high: float | None = None
    mde: float | None = Field(default=None, description="The smallest effect this many pairs can detect.")


class LookOut(_Out):
    n_pairs: int | None = None
    p_better: float | None = Field(default=None, description="The look's one-sided p that the idea is better.")
    alpha: float | None = Field(default=None, description="The look's level: p_better at or below it wins.")


class DecisionOut(_Out):
    sided: str = Field(description="What the deciding test asks: one-sided, the idea better than the baseline.")
    decided_by: str | None = Field(default=None, description="screening or confirmation.")
    p_helps: float | None = Field(default=None, description="The deciding one-sided p.")
    level: float | None = Field(default=None, description="The deciding stage's level (alpha).")
    looks: list[LookOut] = Field(default_factory=list, description="The confirmation's looks, in order.")


class ReportOut(_Out):
    report_id: str
    job_id: str
    track: str
    system_verdict: SystemVerdict = Field(description="worked, partial or failed.")
    practical_verdict: PracticalVerdict = Field(description="helps, harms or inconclusive.")
    practical_detail: str | None = None
    p_value: float | None = Field(default=None, description="The screening's two-sided p: descriptive; "
                                  "decided_by and p_helps say what decided.")
    q_value: float | None = None
    delta_mean: float | None = None
    summary: str | None = Field(default=None, description="The report's paragraph for people.")
    screening: ComparisonOut | None = None
    confirmation: ComparisonOut | None = None
    decision: DecisionOut | None = Field(default=None, description="How the practical verdict was tested "
                                         "(the compact report's; the full one holds it in its stages).")


class ReportListOut(_Out):
    reports: list[dict[str, Any]] = Field(description="Report rows (the listing's), newest first.")


def _check_out(found: dict[str, Any], check_id: str) -> dict[str, Any]:
    """A check as a tool answers it, with what to call next."""
    status = found.get("status")
    if status == "passed":
        nxt = "call submit_idea with the same track, code, baseline_code, hparams and mechanism"
    elif status == "failed":
        nxt = "read error.code and error.hint, fix the idea file and call check_idea again"
    else:
        nxt = f"still {status}: call get_check with check_id {check_id!r}"
    return {**with_face_hints("mcp", found), "next": nxt}


def _decision(bench: dict[str, Any]) -> dict[str, Any]:
    """How the practical verdict was tested: one-sided (the idea better: ``p_helps``, against the
    deciding stage's level), and the confirmation's looks, each with its own level; the two-sided
    ``p_value`` is descriptive (docs/statistics.md)."""
    decided_by = bench.get("decided_by")
    stage = (bench.get(decided_by) or {}) if decided_by in ("screening", "confirmation") else {}
    confirmation = bench.get("confirmation") or {}
    return {
        "sided": "one-sided: the idea better than the baseline",
        "decided_by": decided_by,
        "p_helps": bench.get("p_helps"),
        "level": (stage.get("comparison") or {}).get("alpha"),
        "looks": [{k: look.get(k) for k in ("n_pairs", "p_better", "alpha")} for look in confirmation.get("looks") or []],
        "two_sided_p": "descriptive only: p_value in each stage",
    }


def compact_report(row: dict[str, Any]) -> dict[str, Any]:
    """A report row with its deciding numbers only: verdicts, both stages' comparisons (the
    screening's and, when one ran, the confirmation's), the summary, warnings and links."""
    body = row.get("report") or {}
    bench = body.get("bench_report") or {}
    out: dict[str, Any] = {k: row.get(k) for k in REPORT_KEYS if k in row}
    out["summary"] = body.get("summary")
    out.update({k: bench.get(k) for k in BENCH_KEYS if k in bench})
    for stage in ("screening", "confirmation"):
        block = bench.get(stage) or {}
        comparison = block.get("comparison") or {}
        out[stage] = {k: comparison.get(k) for k in COMPARISON_KEYS if k in comparison} if block else None
    out["decision"] = _decision(bench)
    mechanism = bench.get("mechanism_signature")
    if mechanism:
        out["mechanism"] = {k: mechanism.get(k) for k in ("quantity", "confirmed", "detail", "idea_mean",
                                                          "baseline_mean", "self_measured")}
    out["full"] = "call get_report with full=true for the sweeps, per-seed values and every field"
    return out


def build_server(client_for: ClientFor, log_level: LogLevel = "INFO") -> MCPServer:
    """The MCP server; ``client_for(ctx)`` gives the API client of one tool call."""
    server = MCPServer("ideabench", title="ideabench", instructions=INSTRUCTIONS, version="1", log_level=log_level)

    async def call(ctx: Context, method: str, *args: Any, **kwargs: Any) -> Any:
        client = client_for(ctx)
        try:
            return await getattr(client, method)(*args, **kwargs)
        except IdeabenchError as exc:
            raise _error(exc) from None
        finally:
            await client.aclose()

    async def collect(ctx: Context, method: str, **kwargs: Any) -> list[Any]:
        """Every item of a paged listing of the client (``jobs``, ``reports``)."""
        client = client_for(ctx)
        try:
            return [item async for item in getattr(client, method)(**kwargs)]
        except IdeabenchError as exc:
            raise _error(exc) from None
        finally:
            await client.aclose()

    @server.tool(annotations=READ)
    async def list_tracks(ctx: Context) -> TrackListOut:
        """The tracks an idea can be judged on (name, task, metric, description, available: whether
        this deployment can run it now). Next: call
        describe_track with a name to read its input/output spec, contract and example idea."""
        tracks = await call(ctx, "tracks")
        keep = ("name", "title", "task", "description", "metric", "kind", "id", "available", "unavailable_reason")
        return TrackListOut.model_validate({"tracks": [{k: t.get(k) for k in keep if k in t} for t in tracks]})

    @server.tool(annotations=READ)
    async def describe_track(name: TrackName, ctx: Context) -> TrackCardOut:
        """One track's card: spec (input_shape, output_shape), metric, defaults (lr grid, epochs,
        n_seeds), parameter cap, compute ratio, the idea contract and an example idea file. Next:
        write a file defining build_model(spec) like the example and call submit_idea."""
        return TrackCardOut.model_validate(await call(ctx, "track", name))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                             open_world_hint=False))
    async def check_idea(
        track: TrackName,
        code: IdeaCode,
        ctx: Context,
        baseline_code: BaselineCode = None,
        hparams: Hparams = None,
        mechanism: Mechanism = None,
        timeout_s: Annotated[float, Field(description="Return after this many seconds even if the check still "
                                          "runs (then call get_check).", gt=0, le=600)] = 120.0,
    ) -> CheckOut:
        """Check an idea file before submitting it, in seconds, without training and without a job:
        the static checks, then both models captured in the sandbox and what a job checks before
        it trains (op allowlist, configs, parameter, buffer and compute parity, output shapes, the
        mechanism's probe). Returns the check: status passed (result: parameters, buffer words and
        FLOPs per example against their limits, the execution path, the runs a job would make) or
        failed (error: the code, message and hint the job would end with). Next: if it passed, call
        submit_idea with the same arguments; if it failed, fix the file and call check_idea again."""
        found = await call(ctx, "check", track, code, baseline_code=baseline_code, hparams=hparams,
                           mechanism=mechanism, timeout=timeout_s)
        return CheckOut.model_validate(_check_out(found.raw, found.check_id))

    @server.tool(annotations=READ)
    async def get_check(
        check_id: CheckId, ctx: Context,
        wait_s: Annotated[float, Field(description="Wait up to this many seconds for the check to end.",
                                       ge=0, le=60)] = 30.0,
    ) -> CheckOut:
        """A check check_idea made: pending, running, passed (with its result) or failed (with its
        error's code, message and hint)."""
        found = await call(ctx, "get_check", check_id, wait=wait_s)
        return CheckOut.model_validate(_check_out(found.raw, found.check_id))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                             open_world_hint=False))
    async def submit_idea(
        track: TrackName,
        code: IdeaCode,
        ctx: Context,
        baseline_code: BaselineCode = None,
        name: Annotated[str | None, Field(description="A short label for the idea.", max_length=200)] = None,
        hypothesis: Annotated[str | None, Field(description="What the idea should do, and why.")] = None,
        hparams: Hparams = None,
        mechanism: Mechanism = None,
        idempotency_key: Annotated[str | None, Field(description=(
            "Your own key for this submission: sending it again answers the first job instead of making "
            "another (safe retries)."), max_length=200)] = None,
        callback_url: Annotated[str | None, Field(description="A public https URL that gets a signed POST "
                                                  "when the job ends.")] = None,
    ) -> JobOut:
        """Submit an idea file to a track to be judged. Before: call check_idea with the same
        arguments; it finds in seconds most errors a job would end with, without spending a job.
        Returns the queued job. Next: call wait_for_job with its job_id (judging takes seconds to
        minutes; each job's limits are in describe_track)."""
        job = await call(ctx, "submit", track, code, baseline_code=baseline_code, name=name, hypothesis=hypothesis,
                         hparams=hparams, mechanism=mechanism, idempotency_key=idempotency_key,
                         callback_url=callback_url)
        return JobOut.model_validate({**job.raw, "next": f"call wait_for_job with job_id {job.job_id!r}"})

    @server.tool(annotations=READ)
    async def wait_for_job(
        job_id: JobId, ctx: Context,
        timeout_s: Annotated[float, Field(description="Return after this many seconds even if the job still "
                                          "runs (then call again).", gt=0, le=3600)] = 300.0,
    ) -> JobOut:
        """Wait until the job ends (or timeout_s), sending a progress notification as each run
        ends (runs done of runs total); returns the job. Next: if it succeeded, call get_report; if
        it errored, read error.code and error.hint, fix the file and submit again."""
        client = client_for(ctx)
        total: float | None = None  # the stage's runs_total, from its stage event
        try:
            # a call after one that timed out: the stream replays the job's events from its start,
            # and those before the runs done now were the earlier call's to send (a second call
            # sent 100 of them again); this call starts from where the job stands
            now = await client.job(job_id)
            resumed = now.runs_done
            if resumed and now.runs_total:
                await ctx.report_progress(float(resumed), float(now.runs_total), str(now.stage))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    async for event in client.events(job_id):
                        done = int(event.data.get("runs_done") or 0)
                        if event.event == "stage" and event.data.get("runs_total"):
                            total = float(event.data["runs_total"])
                            most = event.data.get("runs_at_most")
                            if done >= resumed:
                                await ctx.report_progress(float(done), total, str(event.data.get("stage")) + (
                                    f" (up to {most} runs, as the protocol decides)" if most and most > total else ""))
                        elif event.event == "run" and event.data.get("runs_done") is not None:
                            total = float(event.data.get("runs_total") or 0) or total
                            if total and done > resumed:
                                await ctx.report_progress(float(done), total, str(event.data.get("stage")))
            job = await client.job(job_id)
        except IdeabenchError as exc:
            raise _error(exc) from None
        finally:
            await client.aclose()
        if job.finished and job.runs_total:
            await ctx.report_progress(float(job.runs_total), float(job.runs_total), job.status)
        out = with_face_hints("mcp", job.raw)
        if job.status == "succeeded":
            out["next"] = f"call get_report with job_id {job_id!r}"
        elif job.finished:
            out["next"] = "read error.code and error.hint, fix the idea file and call submit_idea again"
        else:
            out["next"] = f"still {job.status}: call wait_for_job again"
        return JobOut.model_validate(out)

    @server.tool(annotations=READ)
    async def get_job(job_id: JobId, ctx: Context) -> JobOut:
        """A job's status, progress (stage, runs done of total, eta) and, when it ended without a
        report, its error (code, message, hint)."""
        return JobOut.model_validate(with_face_hints("mcp", (await call(ctx, "job", job_id)).raw))

    @server.tool(annotations=READ)
    async def list_jobs(
        ctx: Context,
        status: Annotated[JobStatus | None, Field(description="Only jobs in this state.")] = None,
        track: Annotated[str | None, Field(description="Only jobs on this track.")] = None,
        since: Annotated[str | None, Field(description="Only jobs created at or after this ISO 8601 moment "
                                           "(with a zone, e.g. 2026-12-04T00:00:00Z).")] = None,
        limit: Annotated[int, Field(description="At most this many jobs.", ge=1, le=200)] = 20,
    ) -> JobListOut:
        """Your jobs, newest first (an operator's key: every job), each with its status and, for a
        errored one, its error code and hint. Next: get_report for a succeeded one."""
        jobs = await collect(ctx, "jobs", status=status, track=track, since=since, limit=limit, page_size=limit)
        return JobListOut.model_validate({"jobs": [with_face_hints("mcp", job.raw) for job in jobs]})

    @server.tool(annotations=READ)
    async def get_report(
        job_id: JobId, ctx: Context,
        full: Annotated[bool, Field(description="The whole report JSON (sweeps, per-seed values, every "
                                    "field; ~14 KB) instead of the compact summary.")] = False,
    ) -> ReportOut:
        """The judged job's report, compact by default: system_verdict (worked/partial/failed),
        practical_verdict (helps/harms/inconclusive) and its detail, the summary paragraph, the
        screening's and the confirmation's deltas, CI and MDE, q_value, warnings and links."""
        row = dict(await call(ctx, "report", job_id))
        return ReportOut.model_validate(row if full else compact_report(row))

    @server.tool(annotations=READ)
    async def search_reports(
        ctx: Context,
        track: Annotated[str | None, Field(description="Only reports on this track.")] = None,
        system_verdict: Annotated[SystemVerdict | None, Field(description="worked, partial or failed.")] = None,
        practical_verdict: Annotated[PracticalVerdict | None, Field(description="helps, harms or "
                                                                    "inconclusive.")] = None,
        family: Annotated[str | None, Field(description="An idea family (the report's family): its "
                                            "re-rolls.")] = None,
        limit: Annotated[int, Field(description="At most this many rows.", ge=1, le=200)] = 20,
    ) -> ReportListOut:
        """Report rows filtered by track, system_verdict, practical_verdict or idea family, newest
        first, each with its q-value."""
        return ReportListOut(reports=await collect(ctx, "reports", limit=limit, page_size=limit, track=track,
                                                   system_verdict=system_verdict,
                                                   practical_verdict=practical_verdict, family=family))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False))
    async def compare_numbers(
        baseline: Annotated[list[float], Field(description="The baseline's per-seed numbers.")],
        idea: Annotated[list[float], Field(description="The idea's per-seed numbers, paired with baseline's.")],
        ctx: Context,
        lower_is_better: Annotated[bool, Field(description="Whether a lower number is better (MSE: yes).")] = True,
    ) -> ComparisonOut:
        """The exact paired comparison (sign-flip p, CI, effect size, MDE) of two equally long
        lists of per-seed numbers you measured yourself: what the bench would conclude."""
        return ComparisonOut.model_validate(await call(ctx, "compare", baseline, idea, lower_is_better))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False))
    async def cancel_job(job_id: JobId, ctx: Context) -> JobOut:
        """Cancel a queued job at once, or ask the worker to stop a running one; returns the job."""
        job = await call(ctx, "cancel", job_id)
        return JobOut.model_validate(with_face_hints("mcp", job.raw))

    @server.resource("ideabench://docs/idea-contract", mime_type="text/markdown")
    def idea_contract() -> str:
        """The idea contract: what an idea file defines (build_model, HPARAMS, MECHANISM)."""
        return _doc("idea-contract.md", "Define build_model(spec) -> torch.nn.Module; see describe_track.")

    @server.resource("ideabench://docs/protocol", mime_type="text/markdown")
    def protocol() -> str:
        """How an idea is judged: the report's fields, the statistics and the verdict rules."""
        return _doc("reports.md", "") + "\n\n" + _doc("statistics.md", "")

    return server


def stdio_main(url: str | None = None, key: str | None = None, log_level: LogLevel = "WARNING") -> int:
    """``ideabench mcp``: serve over stdio, every call to ``url`` with ``key`` (or the usual
    ``IDEABENCH_URL`` / ``IDEABENCH_KEY`` / login file); logs at ``log_level`` (stderr)."""

    def client_for(ctx: Context) -> AsyncClient:
        client = AsyncClient(url, key)
        if not client.key:
            raise ToolError(json.dumps({
                "code": "missing_api_key",
                "message": "This MCP server has no API key to call ideabench with.",
                "hint": "Set IDEABENCH_KEY in the MCP server's environment (your MCP client's config for "
                        "`ideabench mcp`), or run `ideabench login --url URL --key KEY` once.",
            }))
        return client

    build_server(client_for, log_level).run("stdio")
    return 0
