"""A self-describing API: the index, the guides as markdown, RFC 9457 problems with field
errors, and X-Request-ID on every answer (stored with a submitted job)."""

from __future__ import annotations

from typing import Any

from app.jobs.models import Job
from tests.app.test_api_errors import EXAMPLE
from tests.conftest import bearer


def test_the_index_links_everything_and_every_guide_is_markdown(client: Any) -> None:
    for path in ("/", "/v1"):
        body = client.get(path).json()
        assert {"tracks", "submit", "job_events", "reports", "mcp", "openapi", "docs"} <= set(body["links"])
        assert "POST /v1/ideas" in body["next"]
    guides = client.get("/v1/docs").json()["guides"]
    assert {"idea-contract", "protocol", "statistics", "agents", "errors"} <= set(guides)
    for name, entry in guides.items():
        response = client.get(entry["href"])
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith("text/markdown") and response.text.startswith("#"), name
    errors = client.get("/v1/docs/errors").text
    assert '<a id="n_seeds_fixed"></a>' in errors and '<a id="invalid_code"></a>' in errors
    missing = client.get("/v1/docs/nope")
    assert missing.status_code == 404 and "idea-contract" in missing.json()["hint"]


def test_validation_errors_list_each_field_in_a_problem(client: Any, keys: dict[str, str]) -> None:
    response = client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE, "n_seeds": 1000, "colour": "red"},
                           headers=bearer(keys["operator"]))
    body = response.json()
    assert response.status_code == 422 and response.headers["content-type"].startswith("application/problem+json")
    assert body["title"] == "Unprocessable Entity" and body["instance"] == "/v1/ideas"
    assert {e["field"] for e in body["errors"]} == {"body.n_seeds", "body.colour"}


def test_every_answer_carries_a_request_id_and_a_job_keeps_it(app: Any, client: Any, keys: dict[str, str]) -> None:
    made = client.get("/healthz").headers["x-request-id"]
    assert made.startswith("req_") and len(made) > 10
    assert client.get("/healthz", headers={"X-Request-ID": "agent-7.step:3"}).headers["x-request-id"] == "agent-7.step:3"
    for bad in ("has spaces", "x" * 200, "new\\nline"):
        assert client.get("/healthz", headers={"X-Request-ID": bad}).headers["x-request-id"].startswith("req_")
    error = client.get("/v1/jobs/job_nope", headers={**bearer(keys["agent"]), "X-Request-ID": "trace-42"})
    assert error.json()["request_id"] == "trace-42" == error.headers["x-request-id"]
    job_id = client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE},
                         headers={**bearer(keys["agent"]), "X-Request-ID": "submit-1"}).json()["job_id"]
    with app.state.sessionmaker() as session:
        assert session.get(Job, job_id).request_id == "submit-1"
    too_big = client.post("/v1/ideas", content=b"x" * (2 * 1024 * 1024), headers={
        **bearer(keys["agent"]), "Content-Type": "application/json", "X-Request-ID": "big-1"})
    assert too_big.status_code == 413 and too_big.json()["request_id"] == "big-1"
    assert too_big.json()["type"] == "/v1/docs/errors#payload_too_large"


def test_the_openapi_schema_types_the_report_and_the_mechanism(client: Any) -> None:
    schema = client.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    assert components["ReportView"]["properties"]["report"] == {"$ref": "#/components/schemas/Report_Report"}
    assert "bench_report" in components["Report_Report"]["properties"]
    mechanism = components["IdeaSubmission"]["properties"]["mechanism"]["anyOf"][0]
    assert mechanism == {"$ref": "#/components/schemas/Mechanism"}
    assert "input_gradient" in components["Mechanism"]["properties"]["probe"]["properties"]["kind"]["enum"]

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            return ([node["$ref"]] if "$ref" in node else []) + [r for v in node.values() for r in refs(v)]
        return [r for v in node for r in refs(v)] if isinstance(node, list) else []

    for ref in refs(schema):  # every reference resolves
        assert ref.split("/")[-1] in components, ref
