"""The client verbs of ``ideabench``: ``login``, ``check``, ``submit``, ``status``, ``jobs``,
``report``, ``reports``, ``cancel``, through ``ideabench_client`` (no torch, no web stack).

The server and key come from ``--url`` / ``--key``, else ``IDEABENCH_URL`` / ``IDEABENCH_KEY``,
else the config file ``ideabench login`` writes (mode 0600). Exit codes: 0 done (a submitted
idea judged, a checked idea passed, a submission accepted without ``--wait``), 2 an API error
(or a check that failed: what submitting the idea would be refused or end with), 3 a job that
ended errored or cancelled, 4 a job shown by ``status`` (or ``submit --wait``) that has not
ended yet (its wait ran out: ``status J --wait 60 && report J`` never reads an unjudged job);
errors print their ``code`` and ``hint`` (with ``--json``, as a JSON object on stdout).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ideabench_client import Check, Client, Event, IdeabenchError, Job, config
from ideabench_client.client import ENDED_UNSUCCESSFUL
from ideabench_client.hints import error_for_face, for_face

VERBS = ("login", "check", "submit", "status", "jobs", "report", "reports", "cancel", "mcp")
JOB_STATUSES = ("queued", "running", "succeeded", "errored", "cancelled")
EXIT_API_ERROR, EXIT_JOB_FAILED, EXIT_NOT_ENDED = 2, 3, 4


def _job_exit(job: Job) -> int:
    """0 judged, 3 ended errored or cancelled, 4 not ended yet."""
    if job.status in ENDED_UNSUCCESSFUL:
        return EXIT_JOB_FAILED
    return 0 if job.finished else EXIT_NOT_ENDED


def add_parsers(sub: Any) -> None:
    """The client verbs' subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="the service (default: IDEABENCH_URL, the login file, or localhost:8000)")
    common.add_argument("--key", help="an API key (default: IDEABENCH_KEY or the login file)")
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")

    p = sub.add_parser("login", parents=[common], help="check a server and key, and store them (mode 0600)")
    p.set_defaults(client_verb="login")
    p = sub.add_parser("check", parents=[common], help="check an idea file in seconds, before submitting it "
                       "(no job, no training)")
    p.add_argument("idea", help="the idea's Python file")
    p.add_argument("--track", required=True, help="a built-in track name (GET /v1/tracks)")
    p.add_argument("--baseline", help="a matched baseline file (same contract)")
    p.add_argument("--hparams", type=_json_object, help='an extra sweep grid as JSON, e.g. \'{"width": [32, 64]}\' '
                   "(else the file's HPARAMS)")
    p.add_argument("--mechanism", type=_json_object, help="a MECHANISM as JSON (else the file's)")
    p.set_defaults(client_verb="check")
    p = sub.add_parser("submit", parents=[common], help="submit an idea file to the service")
    p.add_argument("idea", help="the idea's Python file")
    p.add_argument("--track", required=True, help="a track name (GET /v1/tracks)")
    p.add_argument("--baseline", help="a matched baseline file (same contract)")
    p.add_argument("--name", help="a short label (default: the file's name)")
    p.add_argument("--hypothesis", help="what the idea should do, and why")
    p.add_argument("--wait", action="store_true", help="follow the job's events until it is judged")
    p.add_argument("--callback-url", help="a public URL to POST a signed message to when the job ends")
    p.add_argument("--hparams", type=_json_object, help='an extra sweep grid as JSON, e.g. \'{"width": [32, 64]}\' '
                   "(else the file's HPARAMS)")
    p.add_argument("--mechanism", type=_json_object, help="a MECHANISM as JSON (else the file's)")
    p.add_argument("--idempotency-key", help="a key of your own: sending the same submission again with it "
                   "answers the first job instead of making another")
    p.set_defaults(client_verb="submit")
    p = sub.add_parser("status", parents=[common], help="a job's status and progress")
    p.add_argument("job_id")
    p.add_argument("--wait", type=float, default=None, help="wait up to this many seconds (<= 60) for its end")
    p.set_defaults(client_verb="status")
    p = sub.add_parser("jobs", parents=[common], help="list your jobs (every job, for an operator), newest first")
    p.add_argument("--status", choices=JOB_STATUSES)
    p.add_argument("--track")
    p.add_argument("--since", help="only jobs created at or after this ISO 8601 moment, e.g. 2026-12-04T00:00:00Z")
    p.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    p.set_defaults(client_verb="jobs")
    p = sub.add_parser("report", parents=[common], help="a judged job's report")
    p.add_argument("job_id")
    p.set_defaults(client_verb="report")
    p = sub.add_parser("reports", parents=[common], help="list reports (every page)")
    p.add_argument("--track")
    p.add_argument("--system-verdict", choices=["worked", "partial", "failed"])
    p.add_argument("--practical-verdict", choices=["helps", "harms", "inconclusive"])
    p.add_argument("--family", help="an idea family: its re-rolls")
    p.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    p.set_defaults(client_verb="reports")
    p = sub.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("job_id")
    p.set_defaults(client_verb="cancel")
    p = sub.add_parser("mcp", parents=[common], help="serve ideabench's MCP tools over stdio (pip install ideabench[mcp])")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], default="WARNING",
                   help="what the server logs on stderr (default WARNING; stdout carries the protocol)")
    p.set_defaults(client_verb="mcp")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _print_json(value: dict[str, Any]) -> None:
    """Every ``--json`` output is one object, each object in it under its name (issue 27.9:
    ``job``, ``report``, ``check``, ``jobs``, ``reports``, ``error``; ``login`` prints what it
    stored), as MCP's tools answer: an agent reads ``.job.status`` after any verb."""
    print(json.dumps(value, indent=2, default=str))


def _job_json(job: Job, client: Client | None) -> dict[str, Any]:
    """A job under ``job``, and its report under ``report`` once it has one (submit, status)."""
    out: dict[str, Any] = {"job": job.raw}
    if client is not None and job.status == "succeeded":
        out["report"] = client.report(job.job_id)
    return out


class _Progress:
    """A progress line on stderr, fed by the job's events."""

    def __init__(self) -> None:
        self.interactive = sys.stderr.isatty()
        self.stage = "queued"

    def __call__(self, event: Event) -> None:
        data = event.data
        if event.event == "queued":
            line = f"queued (position {data.get('queue_position')})"
        elif event.event == "stage":
            self.stage = str(data.get("stage"))
            line = f"{self.stage}: started"
        elif event.event == "run":
            done, total = int(data.get("runs_done") or 0), int(data.get("runs_total") or 0) or None
            width = 24
            filled = int(width * done / total) if total else 0
            line = f"[{'#' * filled}{'.' * (width - filled)}] {self.stage:<12} {done:>3}/{total or '?'}"
        elif event.event == "warning":
            line = f"warning: {data.get('message')}"
        else:
            line = f"ended: {data.get('status')}"
        end = "\r" if self.interactive and event.event == "run" else "\n"
        print(line, end=end, file=sys.stderr, flush=True)


def _job_line(job: Job) -> str:
    progress = f"{job.stage or '-'} {job.runs_done}/{job.runs_total or '?'}"
    text = f"{job.job_id}  {job.status:<10} {job.track}  {progress}"
    error = error_for_face("cli", job.error)
    if error:
        text += f"\nerror [{error.get('code')}]: {error.get('message')}\nhint: {error.get('hint')}"
    return text


def _login(args: argparse.Namespace, client: Client) -> int:
    if not client.key:
        raise IdeabenchError("missing_api_key", "give --key (or IDEABENCH_KEY)", "An operator creates keys "
                             "with `ideabench keys create --role agent`.")
    me = client.me()  # a call every role may make: the key works, and says what it may do
    path = config.save(client.url, client.key)
    if args.json:
        _print_json({"url": client.url, "config": str(path), "key": me.get("id"), "role": me.get("role"),
                     "limits": me.get("limits")})
    else:
        print(f"logged in to {client.url} as {me.get('id')} (role {me.get('role')}); stored in {path} (mode 0600)")
    return 0


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _limit_line(label: str, block: dict[str, Any] | None) -> str:
    """``label: idea 321 (limit 353; baseline 321)``: one block of a passed check's result."""
    block = block or {}
    idea = block.get("idea")
    text = f"{label}: idea {', '.join(_num(v) for v in (idea if isinstance(idea, list) else [idea]))}"
    text += f" (limit {_num(block.get('limit'))}"
    return text + (f"; baseline {_num(block['baseline'])})" if block.get("baseline") is not None else ")")


def _check_lines(found: Check, args: argparse.Namespace) -> str:
    """A check for people: its state and, once passed, what it found against the limits a job
    enforces, the runs a job would make and the command that submits it."""
    head = f"{found.check_id}  {found.status:<8} {found.track}"
    if not found.passed:
        return head
    result = found.result or {}
    execution, runs = result.get("execution") or {}, result.get("runs") or {}
    lines = [head + (f"  ({result['seconds']} s)" if result.get("seconds") is not None else ""),
             _limit_line("parameters", result.get("parameters")),
             _limit_line("buffer words", result.get("buffer_words")),
             _limit_line("FLOPs per example", result.get("flops_per_example")),
             f"configs: {len(result.get('configs') or [{}])}  runs: {runs.get('planned')} planned, at most "
             f"{runs.get('at_most')}  execution: {execution.get('path')}"
             + (f" ({execution['why']})" if execution.get("why") else "")]
    flops = result.get("flops_per_example") or {}
    if flops.get("dearest_limit") is not None:  # the dearest forward the trainer runs, per example
        lines.insert(4, _limit_line("dearest forward per example",
                                    {"idea": flops.get("idea_dearest"), "limit": flops["dearest_limit"]}))
    mechanism = result.get("mechanism")
    if isinstance(mechanism, dict) and mechanism.get("quantity"):
        lines.append(f"mechanism: {mechanism['quantity']} ({(mechanism.get('expect') or {}).get('kind')})")
    lines += [f"warning: {w.get('message', w) if isinstance(w, dict) else w}" for w in result.get("warnings") or []]
    lines.append(f"next: ideabench submit {args.idea} --track {args.track}")
    return "\n".join(lines)


def _check(args: argparse.Namespace, client: Client) -> int:
    code = Path(args.idea).read_text()
    baseline = Path(args.baseline).read_text() if args.baseline else None
    found = client.check(args.track, code, baseline_code=baseline, hparams=args.hparams, mechanism=args.mechanism)
    if args.json:
        _print_json({"check": found.raw})
    else:
        print(_check_lines(found, args))
    if found.passed:
        return 0
    error = error_for_face("cli", found.error) or {
        "code": "check_not_ended", "message": f"the check is still {found.status}",
        "hint": f"Run `ideabench check` again later (this check is {found.check_id})."}
    print(f"error [{error.get('code')}]: {error.get('message')}\nhint: {error.get('hint')}", file=sys.stderr)
    return EXIT_API_ERROR  # what submitting the idea would be refused or end with


def _submit(args: argparse.Namespace, client: Client) -> int:
    code = Path(args.idea).read_text()
    baseline = Path(args.baseline).read_text() if args.baseline else None
    job = client.submit(args.track, code, baseline_code=baseline, name=args.name or Path(args.idea).stem,
                        hypothesis=args.hypothesis, callback_url=args.callback_url, hparams=args.hparams,
                        mechanism=args.mechanism, idempotency_key=args.idempotency_key, wait=args.wait,
                        on_event=None if args.json else _Progress())
    if args.json:
        _print_json(_job_json(job, client))
    else:
        print(_job_line(job))
        if job.status == "succeeded":
            report = client.report(job.job_id)
            print(f"system_verdict={report['system_verdict']}  practical_verdict={report['practical_verdict']}"
                  f"  q_value={report.get('q_value')}\n\n{report['report']['summary']}")
    return _job_exit(job) if args.wait else 0  # without --wait: accepted


def _run(args: argparse.Namespace, client: Client) -> int:
    verb = args.client_verb
    if verb == "login":
        return _login(args, client)
    if verb == "check":
        return _check(args, client)
    if verb == "submit":
        return _submit(args, client)
    if verb in ("status", "cancel"):
        job = client.job(args.job_id, wait=args.wait) if verb == "status" else client.cancel(args.job_id)
        _print_json(_job_json(job, client if verb == "status" else None)) if args.json else print(_job_line(job))
        if verb == "cancel" and not args.json and job.status == "running":  # not yet its new state
            print(f"cancel requested: the worker stops it within seconds (`ideabench status {job.job_id} --wait`)")
        return _job_exit(job) if verb == "status" else 0
    if verb == "jobs":
        jobs = list(client.jobs(status=args.status, track=args.track, since=args.since, limit=args.limit))
        if args.json:
            _print_json({"jobs": [job.raw for job in jobs]})
        else:
            for job in jobs:
                print(_job_line(job))
        return 0
    if verb == "report":
        report = client.report(args.job_id)
        if args.json:
            _print_json({"report": report})
        else:
            # the test that decided (one-sided, p_helps), as ``reports`` shows it: not the two-sided
            # p, which is descriptive (issue 27.7)
            print(f"{report['system_verdict']}/{report['practical_verdict']}  p_helps={report.get('p_helps')}  "
                  f"q={report.get('q_value')}\n\n{report['report']['summary']}")
        return 0
    rows = list(client.reports(limit=args.limit, track=args.track, system_verdict=args.system_verdict,
                               practical_verdict=args.practical_verdict, family=args.family))
    if args.json:
        _print_json({"reports": rows})
    else:
        for row in rows:
            print(f"{row['report_id']}  {row['track']:<20} {row['system_verdict']:>7}/{row['practical_verdict']:<12}"
                  f" p_helps={row.get('p_helps')}  q={row.get('q_value')}  {row.get('name') or ''}")
    return 0


def dispatch(args: argparse.Namespace) -> int:
    """Run a client verb; an API error exits 2 with its code and hint."""
    if args.client_verb == "mcp":
        from ideabench_client.mcp_server import stdio_main

        return stdio_main(args.url, args.key, args.log_level)
    try:
        with Client(args.url, args.key) as client:
            return _run(args, client)
    except BrokenPipeError:  # the reader left: cli.main ends every verb quietly
        raise
    except OSError as exc:
        print(f"error: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_API_ERROR
    except IdeabenchError as exc:
        hint = for_face("cli", exc.code, exc.message, exc.hint)  # this face's words, not a REST route
        if args.json:
            _print_json({"error": {"code": exc.code, "message": exc.message, "hint": hint}})
        print(f"error [{exc.code}]: {exc.message}\nhint: {hint}", file=sys.stderr)
        return EXIT_API_ERROR
