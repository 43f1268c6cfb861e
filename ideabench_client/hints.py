"""Each face's own words for the service's hints: an agent using the CLI or MCP is told the
call of that face (``ideabench jobs``, ``list_jobs``), not a REST route it cannot make.

The service's hints (``app/errors.py``) name REST routes. A face replaces the hint of a code
listed here with its own; a hint it has no words for passes unchanged (it names no route).
``report_not_ready`` has two cases, told apart by the service's message: a job still running
("... no report yet.") and one that ended without a report.
"""

from __future__ import annotations

from typing import Any

_ENDED_WITHOUT_REPORT = "report_not_ready:ended"

HINTS: dict[str, dict[str, str]] = {
    "cli": {
        "job_not_found": "List your jobs with `ideabench jobs`.",
        "report_not_found": "List reports with `ideabench reports`; `ideabench report JOB_ID` takes a job's id.",
        "report_not_ready": "Wait with `ideabench status JOB_ID --wait 60` (exit 4: not ended yet) until it has "
        "succeeded, then `ideabench report JOB_ID`.",
        _ENDED_WITHOUT_REPORT: "The job ended without a report: `ideabench status JOB_ID` shows its error (code, "
        "message, hint); fix the idea and `ideabench submit` it again.",
        "check_not_found": "Run `ideabench check idea.py --track NAME` again (checks are kept per key).",
        "too_many_checks": "Wait for your open checks to end, then run `ideabench check` again.",
        "too_many_jobs": "Wait for some of your jobs to end (`ideabench jobs --status queued`), then submit again.",
        "invalid_callback_url": "Give a public http(s) URL without credentials, or leave --callback-url out and "
        "use --wait.",
        "validation_error": "Fix the named field; `ideabench submit --help` lists every option.",
        "missing_api_key": "Give --key, set IDEABENCH_KEY or run `ideabench login`; an operator creates keys with "
        "`ideabench keys create --role agent`.",
        "n_seeds_fixed": "Leave the seeds unset: they are fixed per track (`ideabench tracks`); only an operator "
        "may set them.",
        "key_not_found": "List keys with `ideabench keys list` on the service's host (operators).",
        "too_many_validations": "Wait until one of your tracks leaves status validating (`ideabench tracks`), then "
        "register again.",
        # the engine's codes whose hints name a route (bench/errors.py), in a job's or a check's error too
        "unknown_track": "List the tracks with `ideabench tracks`.",
        "missing_build_model": "Define a top-level function `build_model(spec)` that returns a torch.nn.Module; "
        "`ideabench track NAME` shows the spec and an example idea.",
        "compute_parity": "Spend at most the track's compute_ratio (`ideabench track NAME`) times the baseline's "
        "forward FLOPs per example: fewer repeated applications of a block, narrower layers, or a matched "
        "baseline of the same cost.",
        "capture_timeout": "build_model must return quickly: it builds a model, it does not train or wait (no "
        "sleeps, downloads or loops over data); every config and init seed is built within the track's capture "
        "limit (`ideabench track NAME`: limits).",
        "track_not_ready": "The track is still being validated (or was rejected): run `ideabench track NAME@VERSION` "
        "until its status is active.",
        "track_unavailable": "This deployment cannot run the track (`ideabench track NAME` says why): choose "
        "another that `ideabench tracks` lists as available, or ask an operator.",
        "track_deprecated": "Submit to the track's newest version (`ideabench tracks` lists it).",
        "stream_lost": "Check the service; the job goes on: `ideabench status JOB_ID --wait 60` still answers.",
    },
    "mcp": {
        "job_not_found": "Call list_jobs and pass a job_id it answered.",
        "report_not_found": "Call search_reports, or get_report with the job_id of a job that succeeded.",
        "report_not_ready": "Call wait_for_job with this job_id until its status is succeeded, then get_report.",
        _ENDED_WITHOUT_REPORT: "The job ended without a report: call get_job to read its error (code, message, "
        "hint), fix the idea and call submit_idea again.",
        "check_not_found": "Pass the check_id check_idea answered with (checks are kept per key).",
        "too_many_checks": "Wait for your open checks to end (get_check with their check_id), then call "
        "check_idea again.",
        "too_many_jobs": "Wait for some of your jobs to end (list_jobs with status queued; wait_for_job), then "
        "call submit_idea again.",
        "invalid_callback_url": "Give a public http(s) URL without credentials, or leave callback_url out and "
        "call wait_for_job.",
        "n_seeds_fixed": "Leave n_seeds out: it is fixed per track (describe_track, defaults.n_seeds).",
        "validation_error": "Fix the named argument; the tool's input schema describes each one.",
        "rate_limited": "Slow down: wait a few seconds, then call the tool again.",
        "key_not_found": "Keys are an operator's (`ideabench keys list` on the service's host), not an MCP tool's.",
        "too_many_validations": "Wait until one of your tracks leaves status validating (list_tracks), then "
        "register again.",
        "unknown_track": "Call list_tracks and pass a name it answered.",
        "missing_build_model": "Define a top-level function `build_model(spec)` that returns a torch.nn.Module; "
        "describe_track gives the spec and an example idea.",
        "compute_parity": "Spend at most the track's compute_ratio (describe_track) times the baseline's forward "
        "FLOPs per example: fewer repeated applications of a block, narrower layers, or a matched baseline of "
        "the same cost.",
        "capture_timeout": "build_model must return quickly: it builds a model, it does not train or wait (no "
        "sleeps, downloads or loops over data); every config and init seed is built within the track's capture "
        "limit (describe_track: limits).",
        "track_not_ready": "The track is still being validated (or was rejected): call describe_track with its "
        "name@version until its status is active.",
        "track_unavailable": "This deployment cannot run the track (describe_track says why): choose another that "
        "list_tracks answers with available true, or ask an operator.",
        "track_deprecated": "Submit to the track's newest version (list_tracks lists it).",
        "stream_lost": "Call wait_for_job again with the same job_id: the job goes on.",
    },
}


def for_face(face: str, code: str, message: str, hint: str) -> str:
    """The hint ``face`` (``cli`` or ``mcp``) shows for an error the service answered."""
    if code == "report_not_ready" and not message.rstrip().rstrip(".").endswith("yet"):
        code = _ENDED_WITHOUT_REPORT
    return HINTS[face].get(code, hint)


def error_for_face(face: str, error: dict[str, Any] | None) -> dict[str, Any] | None:
    """A job's or a check's ``error`` ({code, message, hint}) with ``face``'s hint."""
    if not error or not isinstance(error.get("code"), str):
        return error
    return {**error, "hint": for_face(face, error["code"], str(error.get("message") or ""), str(error.get("hint") or ""))}


def with_face_hints(face: str, raw: dict[str, Any]) -> dict[str, Any]:
    """A job or a check as the service answered it, its error's hint in ``face``'s words."""
    return {**raw, "error": error_for_face(face, raw.get("error"))} if raw.get("error") else raw
