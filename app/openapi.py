"""OpenAPI extras that need the track catalog (read when the schema is first built).

The example for POST /v1/ideas is the smoke track's real example idea, and the
track examples are the real smoke card, so they never drift from the engine.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from bench.catalog import get_card
from bench.contract import EXPECT_KINDS, MAX_ATOL, MAX_RTOL, MODULE_PATH, PROBE_KINDS
from bench.report import Report

EXAMPLE_TRACK = "smoke"


def _example_submission(card: dict[str, Any]) -> dict[str, Any]:
    return {
        "track": card["name"],
        "code": card["example_idea"],
        "name": "silu-wide",
        "hypothesis": "A smooth activation fits the smooth target better than ReLU at equal width.",
    }


MECHANISM_SCHEMA: dict[str, Any] = {
    "title": "Mechanism",
    "type": "object",
    "description": "A declared, measurable prediction about the trained model (docs/idea-contract.md): "
    "a bench probe measures it (else the file's measure(model, x), reported as self_measured) on every "
    "final model of both arms, and the bench decides whether `expect` holds.",
    "required": ["quantity", "prediction", "expect"],
    "properties": {
        "quantity": {"type": "string"},
        "prediction": {"type": "string"},
        "expect": {
            "type": "object", "required": ["kind"],
            "properties": {
                "kind": {"type": "string", "enum": sorted(EXPECT_KINDS)},
                "target": {"type": "number", "description": "close_to"},
                "value": {"type": "number", "description": "less_than / greater_than"},
                "rtol": {"type": "number", "minimum": 0, "maximum": MAX_RTOL},
                "atol": {"type": "number", "minimum": 0, "maximum": MAX_ATOL},
            },
        },
        "probe": {
            "type": "object", "required": ["kind"],
            "description": "A bench probe (measured by the bench; docs/idea-contract.md): "
            "token_permutation {dim, swap}, input_gradient {}, equivariance {transform, output}, "
            "norm_ratio {module}.",
            "properties": {
                "kind": {"type": "string", "enum": list(PROBE_KINDS)},
                "dim": {"type": "integer", "description": "token_permutation: the token axis (after the batch)"},
                "swap": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                         "description": "token_permutation: the two positions exchanged"},
                "transform": {"type": "object", "description": "equivariance: {roll: {shift, dim}}, "
                              "{flip: {dim}} or {add: number}"},
                "output": {"type": "string", "enum": ["same", "none"],
                           "description": "equivariance: same (equivariance) or none (invariance)"},
                "module": {"type": "string", "pattern": f"^{MODULE_PATH.pattern}$",
                           "description": "norm_ratio: the submodule, by attribute path or its last part "
                           "('mix', 'blocks.0.mix'); both arms must have it"},
            },
            "examples": [{"kind": "norm_ratio", "module": "mix"}],
        },
    },
}


def _typed_objects(schema: dict[str, Any]) -> None:
    """The report (``bench.report.Report``) and the mechanism as schemas, not ``object``:
    documented only, so a stored report is served as stored."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    report = Report.model_json_schema(ref_template="#/components/schemas/Report_{model}")
    for name, definition in report.pop("$defs", {}).items():
        components[f"Report_{name}"] = definition
    components["Report_Report"] = report
    components["Mechanism"] = MECHANISM_SCHEMA
    for key, component in components.items():
        properties = component.get("properties", {})
        if key.startswith("ReportView") and "report" in properties:
            properties["report"] = {"$ref": "#/components/schemas/Report_Report"}
        if key.startswith("IdeaSubmission") and "mechanism" in properties:
            properties["mechanism"] = {"anyOf": [{"$ref": "#/components/schemas/Mechanism"}, {"type": "null"}],
                                       "description": properties["mechanism"].get("description", "")}


def _set_examples(schema: dict[str, Any], name: str, examples: list[Any]) -> None:
    for key, component in schema.get("components", {}).get("schemas", {}).items():
        if key == name or key.startswith(f"{name}-"):
            component["examples"] = examples


def _errors_are_error_bodies(schema: dict[str, Any]) -> None:
    """FastAPI documents 422 as its own HTTPValidationError, and a streaming route's errors in
    its stream's media type; every error here is an ErrorBody in application/problem+json."""
    ref = {"$ref": "#/components/schemas/ErrorBody"}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            response = responses.get("422")
            if response is not None:
                response["description"] = "validation_error or an idea error (invalid_code, ...)"
            for status, response in responses.items():  # every error is a problem+json ErrorBody
                if status.startswith(("4", "5")):
                    response["content"] = {"application/problem+json": {"schema": ref}}
    components = schema.get("components", {}).get("schemas", {})
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)


def _job_links(job_id: str) -> dict[str, Any]:
    param = {"job_id": job_id}
    return {
        "GetJob": {"operationId": "get_job_v1_jobs__job_id__get", "parameters": param,
                   "description": "Poll the job (or long-poll with ?wait=60)."},
        "JobEvents": {"operationId": "job_events_v1_jobs__job_id__events_get", "parameters": param,
                      "description": "Follow the job's progress as Server-Sent Events."},
        "JobReport": {"operationId": "get_job_report_v1_jobs__job_id__report_get", "parameters": param,
                      "description": "The report, once the job has succeeded."},
        "CancelJob": {"operationId": "cancel_job_v1_jobs__job_id__cancel_post", "parameters": param,
                      "description": "Cancel the job."},
    }


# (path, method, status) -> the OpenAPI links of that answer: what an agent (or a stateful
# fuzzer) calls next with the ids the answer holds.
LINKS: dict[tuple[str, str, str], dict[str, Any]] = {
    ("/v1/ideas", "post", "202"): _job_links("$response.body#/job_id"),
    ("/v1/jobs", "get", "200"): _job_links("$response.body#/items/0/job_id"),
    ("/v1/reports", "get", "200"): {
        "GetReport": {"operationId": "get_report_v1_reports__report_id__get",
                      "parameters": {"report_id": "$response.body#/items/0/report_id"}},
        "GetJobReport": {"operationId": "get_job_report_v1_jobs__job_id__report_get",
                         "parameters": {"job_id": "$response.body#/items/0/job_id"}},
    },
    ("/v1/tracks", "post", "202"): {
        "GetTrack": {"operationId": "get_track_v1_tracks__ident__get",
                     "parameters": {"ident": "$response.body#/id"}},
    },
    ("/v1/keys", "post", "201"): {
        "SetKeyLimits": {"operationId": "set_key_limits_v1_keys__key_id__patch",
                         "parameters": {"key_id": "$response.body#/id"}},
        "RevokeKey": {"operationId": "revoke_key_v1_keys__key_id__delete",
                      "parameters": {"key_id": "$response.body#/id"}},
    },
}


def _links_and_bad_bodies(schema: dict[str, Any]) -> None:
    """The answers' links (``LINKS``); a 400 ``bad_request`` on every route that takes a body
    (a body that is not JSON at all is refused before validation); a 503 on every route that
    reads the database (``database_unavailable`` while it is unreachable)."""
    ref = {"$ref": "#/components/schemas/ErrorBody"}
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.get("responses", {})
            for status, response in responses.items():
                links = LINKS.get((path, method, status))
                if links is not None:
                    response["links"] = links
            if "requestBody" in operation and "400" not in responses:
                responses["400"] = {"description": "bad_request: the body is not JSON",
                                    "content": {"application/problem+json": {"schema": ref}}}
            if path != "/healthz" and "503" not in responses:
                responses["503"] = {"description": "database_unavailable: retry after Retry-After",
                                    "content": {"application/problem+json": {"schema": ref}}}


def install_openapi(app: FastAPI) -> None:
    """Build the schema lazily, adding catalog-based examples."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        _errors_are_error_bodies(schema)
        _links_and_bad_bodies(schema)
        _typed_objects(schema)
        try:
            card = get_card(EXAMPLE_TRACK)
        except Exception:  # a build without the smoke track still serves its schema
            card = None
        if card is not None:
            _set_examples(schema, "IdeaSubmission", [_example_submission(card)])
            _set_examples(schema, "TrackCard", [card])
            _set_examples(schema, "TrackList", [{"items": [card]}])
            body = (
                schema["paths"]["/v1/ideas"]["post"]["requestBody"]["content"]["application/json"]
            )
            body["example"] = _example_submission(card)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
