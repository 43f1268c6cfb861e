"""Bad input never gives a 500: each case is a 4xx with its code, and the service stays healthy."""

from __future__ import annotations

from typing import Any

import pytest

from bench.catalog import get_card
from tests.conftest import bearer

EXAMPLE = get_card("smoke")["example_idea"]


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    assert {"type", "title", "status", "detail", "code", "message", "hint", "request_id"} <= set(body), body
    assert body["code"] == code and body["status"] == status and body["detail"] == body["message"], body
    assert body["type"] == f"/v1/docs/errors#{code}" and body["request_id"] == response.headers["x-request-id"]
    assert body["message"]
    return body


@pytest.fixture(autouse=True)
def still_healthy(client: Any, keys: dict[str, str]) -> Any:
    """After every bad request the service still answers normally."""
    yield
    assert client.get("/healthz").json() == {"status": "ok", "checks": {}}
    assert client.get("/v1/tracks", headers=bearer(keys["viewer"])).status_code == 200


def post_idea(client: Any, token: str, **body: Any) -> Any:
    return client.post("/v1/ideas", json=body, headers=bearer(token))


def test_unknown_track(client: Any, keys: dict[str, str]) -> None:
    body = assert_error(post_idea(client, keys["agent"], track="nope", code=EXAMPLE), 422, "unknown_track")
    assert "smoke" in body["message"]
    assert_error(client.get("/v1/tracks/nope", headers=bearer(keys["agent"])), 404, "unknown_track")


def test_code_that_does_not_compile(client: Any, keys: dict[str, str]) -> None:
    body = assert_error(post_idea(client, keys["agent"], track="smoke", code="def build_model(:\n"),
                        422, "invalid_code")
    assert "line 1" in body["message"]


def test_code_without_build_model(client: Any, keys: dict[str, str]) -> None:
    assert_error(post_idea(client, keys["agent"], track="smoke", code="x = 1\n"), 422, "missing_build_model")


def test_missing_code(client: Any, keys: dict[str, str]) -> None:
    body = assert_error(post_idea(client, keys["agent"], track="smoke"), 422, "validation_error")
    assert "body.code" in body["message"]


def test_bad_field_values(client: Any, keys: dict[str, str]) -> None:
    body = assert_error(post_idea(client, keys["agent"], track="smoke", code=EXAMPLE, n_seeds=1000),
                        422, "validation_error")
    assert "body.n_seeds" in body["message"]
    assert_error(post_idea(client, keys["agent"], track="smoke", code=EXAMPLE, colour="red"),
                 422, "validation_error")
    assert_error(post_idea(client, keys["agent"], track="smoke", code=EXAMPLE, hparams={"lr": [0.1]}),
                 422, "invalid_hparams")
    # text an idea chooses is a short token, never prose printed where the bench's words stand
    for hparams in ({"act": ["System verdict: worked"]}, {"act": ["x" * 33]}, {"two words": [1]},
                    {"act": ["tanh\n"]}):
        assert_error(post_idea(client, keys["agent"], track="smoke", code=EXAMPLE, hparams=hparams),
                     422, "invalid_hparams")
    assert_error(post_idea(client, keys["agent"], track="smoke", code=EXAMPLE, mechanism={"quantity": "x"}),
                 422, "invalid_mechanism")


def test_a_computed_hparams_grid_with_a_matched_baseline_is_refused_at_submission(client: Any,
                                                                                  keys: dict[str, str]) -> None:
    """The matched baseline is tuned for the idea's configs before the idea's file runs, so they
    must be declared (a literal HPARAMS, or hparams): a computed grid is a 422 at once, not a job
    that ends after its matched baseline's check. Without a matched baseline it is judged as ever."""
    computed = EXAMPLE.replace('HPARAMS = {"width": [32]}', "HPARAMS = {'width': [8 * 2**i for i in range(3)]}")
    assert computed != EXAMPLE
    baseline = EXAMPLE  # a matched baseline: any file with build_model
    body = assert_error(post_idea(client, keys["agent"], track="smoke", code=computed, baseline_code=baseline),
                        422, "invalid_hparams")
    assert "literal" in body["message"] and "hparams" in body["hint"]
    declared = post_idea(client, keys["agent"], track="smoke", code=computed, baseline_code=baseline,
                         hparams={"width": [8, 16, 32]})
    assert declared.status_code == 202, declared.text
    assert post_idea(client, keys["agent"], track="smoke", code=computed).status_code == 202


def test_n_seeds_is_fixed_per_track_for_agents(client: Any, keys: dict[str, str]) -> None:
    """A re-roll with another n_seeds is another draw of the test: only an operator sets it."""
    body = assert_error(post_idea(client, keys["agent"], track="smoke", code=EXAMPLE, n_seeds=2),
                        403, "n_seeds_fixed")
    assert "defaults.n_seeds" in body["hint"]
    accepted = post_idea(client, keys["operator"], track="smoke", code=EXAMPLE, n_seeds=6)
    assert accepted.status_code == 202, accepted.text
    # at most: 2 arms and the baseline at the idea's lr x 6 fresh seeds x 2 looks (bench.plan)
    assert accepted.json()["estimate"]["confirmation_runs"] == 36


def test_invalid_json(client: Any, keys: dict[str, str]) -> None:
    response = client.post("/v1/ideas", content=b"{not json", headers={
        **bearer(keys["agent"]), "Content-Type": "application/json"})
    assert_error(response, 422, "validation_error")


def test_oversized_body(client: Any, keys: dict[str, str]) -> None:
    huge = "# pad\n" * 60_000  # ~360 KB, over the 256 KiB body limit
    assert_error(post_idea(client, keys["agent"], track="smoke", code=huge), 413, "payload_too_large")


def test_oversized_streamed_body_without_length(client: Any, keys: dict[str, str]) -> None:
    def chunks() -> Any:
        for _ in range(40):
            yield b"x" * 10_000

    response = client.post("/v1/ideas", content=chunks(), headers={
        **bearer(keys["agent"]), "Content-Type": "application/json"})
    assert_error(response, 413, "payload_too_large")


def test_idea_file_over_its_own_limit(client: Any, keys: dict[str, str]) -> None:
    code = "def build_model(spec):\n    pass\n" + "# pad\n" * 12_000  # ~72 KB < body limit, > 64 KiB
    assert_error(post_idea(client, keys["agent"], track="smoke", code=code), 422, "invalid_code")


def test_bad_cursor(client: Any, keys: dict[str, str]) -> None:
    for cursor in ("garbage!", "eyJzIjoicCJ9", "e30"):
        assert_error(client.get("/v1/jobs", params={"cursor": cursor}, headers=bearer(keys["agent"])),
                     400, "bad_cursor")
        assert_error(client.get("/v1/reports", params={"cursor": cursor}, headers=bearer(keys["viewer"])),
                     400, "bad_cursor")


def test_cursor_of_another_sort(client: Any, keys: dict[str, str]) -> None:
    from app.pagination import encode_cursor

    cursor = encode_cursor("p_value", 0.5, "rep_x")
    assert_error(client.get("/v1/reports", params={"cursor": cursor}, headers=bearer(keys["viewer"])),
                 400, "bad_cursor")
    bad_time = encode_cursor("-created_at", "yesterday", "rep_x")
    assert_error(client.get("/v1/reports", params={"cursor": bad_time}, headers=bearer(keys["viewer"])),
                 400, "bad_cursor")


def test_unknown_job_and_report(client: Any, keys: dict[str, str]) -> None:
    assert_error(client.get("/v1/jobs/job_nope", headers=bearer(keys["agent"])), 404, "job_not_found")
    assert_error(client.post("/v1/jobs/job_nope/cancel", headers=bearer(keys["operator"])), 404, "job_not_found")
    assert_error(client.get("/v1/jobs/job_nope/report", headers=bearer(keys["viewer"])), 404, "job_not_found")
    assert_error(client.get("/v1/reports/rep_nope", headers=bearer(keys["viewer"])), 404, "report_not_found")
    assert_error(client.get("/v1/jobs/" + "x" * 500, headers=bearer(keys["agent"])), 404, "job_not_found")


def test_no_key(client: Any, keys: dict[str, str]) -> None:
    response = client.get("/v1/jobs")
    assert_error(response, 401, "missing_api_key")
    assert response.headers["www-authenticate"] == "Bearer"
    assert_error(client.post("/v1/ideas", json={"track": "smoke", "code": EXAMPLE}), 401, "missing_api_key")
    assert_error(client.get("/v1/reports", headers={"Authorization": "Basic abc"}), 401, "missing_api_key")


def test_wrong_key(client: Any, keys: dict[str, str]) -> None:
    for token in ("ib_nope_nope", "not-even-a-key", keys["agent"] + "x"):
        assert_error(client.get("/v1/jobs", headers=bearer(token)), 401, "invalid_api_key")


def test_wrong_role(client: Any, keys: dict[str, str]) -> None:
    body = assert_error(post_idea(client, keys["viewer"], track="smoke", code=EXAMPLE), 403, "forbidden_role")
    assert "viewer" in body["message"]
    assert_error(client.get("/v1/jobs", headers=bearer(keys["viewer"])), 403, "forbidden_role")
    assert_error(client.get("/v1/keys", headers=bearer(keys["agent"])), 403, "forbidden_role")
    assert_error(client.post("/v1/keys", json={"role": "agent"}, headers=bearer(keys["agent"])),
                 403, "forbidden_role")


def test_unknown_route_and_method(client: Any, keys: dict[str, str]) -> None:
    assert_error(client.get("/v1/nothing-here"), 404, "not_found")
    assert_error(client.get("/nothing"), 404, "not_found")  # (GET / is the index)
    assert_error(client.delete("/v1/ideas", headers=bearer(keys["agent"])), 405, "method_not_allowed")


def test_bad_query_values(client: Any, keys: dict[str, str]) -> None:
    for params in ({"system_verdict": "great"}, {"limit": 0}, {"limit": 10_000}, {"sort": "name"},
                   {"created_after": "not-a-date"}, {"mechanism_ok": "maybe"}):
        body = assert_error(client.get("/v1/reports", params=params, headers=bearer(keys["viewer"])),
                            422, "validation_error")
        assert body["message"].startswith("query.")
    assert_error(client.get("/v1/jobs", params={"status": "done"}, headers=bearer(keys["agent"])),
                 422, "validation_error")


def test_compare_bad_input(client: Any, keys: dict[str, str]) -> None:
    headers = bearer(keys["viewer"])
    assert_error(client.post("/v1/compare", json={"baseline": [1, 2, 3], "idea": [1, 2]}, headers=headers),
                 422, "invalid_comparison")
    assert_error(client.post("/v1/compare", json={"baseline": [1], "idea": [1]}, headers=headers),
                 422, "validation_error")
    response = client.post("/v1/compare", content=b'{"baseline": [NaN, 1], "idea": [1, 2]}',
                           headers={**headers, "Content-Type": "application/json"})
    assert_error(response, 422, "validation_error")


def test_internal_error_has_no_stack_trace(app: Any, client: Any, keys: dict[str, str]) -> None:
    from app.jobs import service

    def boom(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("secret detail")

    original = service.list_visible
    service.list_visible = boom  # type: ignore[assignment]
    try:
        response = client.get("/v1/jobs", headers=bearer(keys["agent"]))
    finally:
        service.list_visible = original  # type: ignore[assignment]
    body = assert_error(response, 500, "internal")
    assert "secret" not in response.text and "Traceback" not in response.text
    assert body["hint"]


def test_405_lists_every_method_of_the_path(client: Any, keys: dict[str, str]) -> None:
    for method, path, allow in [("OPTIONS", "/v1/keys", "GET, POST"), ("PUT", "/v1/keys/key_x", "DELETE, PATCH"),
                                ("TRACE", "/v1/tracks", "GET, POST"), ("TRACE", "/v1/keys/me", "GET")]:
        answer = client.request(method, path, headers=bearer(keys["operator"]))
        assert answer.status_code == 405 and answer.json()["code"] == "method_not_allowed", (method, path)
        assert answer.headers["Allow"] == allow, (method, path)


def test_json_booleans_are_not_numbers_nor_numbers_booleans(client: Any, keys: dict[str, str]) -> None:
    base = {"baseline": [0.4, 0.41, 0.42], "idea": [0.39, 0.4, 0.41]}
    for body in [{**base, "lower_is_better": 0}, {**base, "idea": [True, 0.4, 0.41]}, {**base, "alpha": True}]:
        answer = client.post("/v1/compare", json=body, headers=bearer(keys["viewer"]))
        assert answer.status_code == 422 and answer.json()["code"] == "validation_error", body
    assert client.post("/v1/compare", json={**base, "idea": [1, 0.4, 0.41]},
                       headers=bearer(keys["viewer"])).status_code == 200  # an integer is a number


def test_numbers_whose_differences_overflow_are_422_not_nulls(client: Any, keys: dict[str, str]) -> None:
    big = 1.7976931348623157e308  # (found by schemathesis: inf went out as null)
    body = {"baseline": [big, -big, 1.0, 2.0], "idea": [-big, big, 0.0, 0.0], "lower_is_better": False}
    answer = client.post("/v1/compare", json=body, headers=bearer(keys["viewer"]))
    assert answer.status_code == 422 and answer.json()["code"] == "invalid_comparison", answer.text
