"""Custom tracks through the API (no worker: validation outcomes are stored directly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import delete

from app.health.models import WorkerBeat
from app.tracks import service as tracks_service
from app.tracks.schemas import TrackRegistration
from tests.app.factories import insert_report, key_id, report_body
from tests.conftest import bearer

ROOT = Path(__file__).resolve().parents[2]
TINY = (ROOT / "tests" / "data" / "tracks" / "tiny_quadratic.py").read_text()
IDEA = "from torch import nn\n\ndef build_model(spec):\n    return nn.Linear(4, 1)\n"
VALIDATION = {"sizes": {"train": 256, "val": 64, "test": 64}, "deterministic": True, "warnings": [],
              "baseline_smoke": {"seconds": 0.8}, "data_seconds_per_seed": 0.05}


def register(client: Any, token: str, source: str = TINY) -> Any:
    return client.post("/v1/tracks", json={"source": source, "file_name": "tiny.py"}, headers=bearer(token))


def activate(app: Any, track_id: str, error: dict[str, str] | None = None) -> None:
    with app.state.sessionmaker() as session:
        assert tracks_service.record_validation(session, track_id, result=VALIDATION, error=error)
        session.commit()


def submit(client: Any, token: str, track: str) -> Any:
    return client.post("/v1/ideas", json={"track": track, "code": IDEA}, headers=bearer(token))


def test_register_validates_statically_and_queues_the_sandbox_check(app: Any, client: Any,
                                                                    keys: dict[str, str]) -> None:
    response = register(client, keys["agent"])
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["id"] == "tiny_quadratic@1" and body["status"] == "validating" and body["kind"] == "custom"
    assert body["author"] == key_id(keys["agent"]) and body["domain"] == "test fixtures"
    assert body["defaults"]["n_seeds"] == 8 and body["sha256"]
    assert response.headers["Location"] == "/v1/tracks/tiny_quadratic@1"
    assert app.state.queue.tracks_sent == [("tiny_quadratic@1", "cpu")]
    # The same file again is the same version; a changed file is a new version.
    again = register(client, keys["agent"])
    assert again.status_code == 200 and again.json()["id"] == "tiny_quadratic@1"
    changed = register(client, keys["agent"], TINY.replace("0.05 noise", "0.05 noise (v2)"))
    assert changed.status_code == 202 and changed.json()["id"] == "tiny_quadratic@2"
    assert len(app.state.queue.tracks_sent) == 2


def test_register_errors_have_codes(client: Any, keys: dict[str, str]) -> None:
    cases = [
        (TINY.replace('"param_cap": 5000,', '"param_cap": 5000, "n_seeds": 2,'), 422, "invalid_track"),
        (TINY + "\nif True\n", 422, "invalid_code"),
        (TINY.replace('"tiny_quadratic"', '"smoke"'), 409, "track_name_taken"),
    ]
    for source, status, code in cases:
        response = register(client, keys["agent"], source)
        assert response.status_code == status, response.text
        assert response.json()["code"] == code and response.json()["hint"]
    assert register(client, keys["viewer"]).status_code == 403
    assert register(client, keys["agent"]).status_code == 202
    taken = register(client, keys["agent2"], TINY.replace("0.05 noise", "0.05 noise!"))
    assert taken.status_code == 409 and taken.json()["code"] == "track_name_taken"


def test_lifecycle_validating_active_deprecated(app: Any, client: Any, keys: dict[str, str]) -> None:
    token = keys["agent"]
    register(client, token)
    waiting = submit(client, token, "tiny_quadratic")
    assert waiting.status_code == 409 and waiting.json()["code"] == "track_not_ready"
    activate(app, "tiny_quadratic@1")
    accepted = submit(client, token, "tiny_quadratic")
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["track"] == "tiny_quadratic@1"  # the exact version is stored
    # a custom track's baseline is its validated build: no matched baseline (red team, session 21)
    matched = client.post("/v1/ideas", json={"track": "tiny_quadratic", "code": IDEA, "baseline_code": IDEA},
                          headers=bearer(token))
    assert matched.status_code == 422 and matched.json()["code"] == "matched_baseline_unsupported", matched.text
    assert "build_baseline" in matched.json()["hint"]
    estimate = accepted.json()["estimate"]
    assert estimate["runs_total"] == 2 * 2 * 2 + 2 * 8
    # timed from its validation: runs two at a time, each of its 10 seeds' data made once
    assert (estimate["basis"], estimate["seconds_per_run"], estimate["fixed_s"]) == ("card", 0.4, 0.5)
    one = client.get("/v1/tracks/tiny_quadratic@1", headers=bearer(keys["viewer"])).json()
    assert one["status"] == "active" and one["source"] == TINY and one["validation"]["sizes"]["train"] == 256
    # Version 2, then deprecate version 1: it takes no new jobs, and the hint names v2.
    register(client, token, TINY.replace("0.05 noise", "0.05 noise (v2)"))
    activate(app, "tiny_quadratic@2")
    forbidden = client.post("/v1/tracks/tiny_quadratic@1/deprecate", headers=bearer(keys["agent2"]))
    assert forbidden.status_code == 403 and forbidden.json()["code"] == "not_owner"
    done = client.post("/v1/tracks/tiny_quadratic@1/deprecate", headers=bearer(token))
    assert done.status_code == 200 and done.json()["deprecated"] is True
    refused = submit(client, token, "tiny_quadratic@1")
    assert refused.status_code == 409 and refused.json()["code"] == "track_deprecated"
    assert "tiny_quadratic@2" in refused.json()["hint"]
    assert submit(client, token, "tiny_quadratic").json()["track"] == "tiny_quadratic@2"
    # Still readable with its source: a track in use is never deleted.
    assert client.get("/v1/tracks/tiny_quadratic@1", headers=bearer(token)).json()["source"] == TINY


def test_rejected_track_says_why(app: Any, client: Any, keys: dict[str, str]) -> None:
    register(client, keys["agent"])
    error = {"code": "invalid_track", "message": "make_splits is not deterministic", "hint": "seed it"}
    activate(app, "tiny_quadratic@1", error)
    view = client.get("/v1/tracks/tiny_quadratic", headers=bearer(keys["agent"])).json()
    assert view["status"] == "rejected" and view["error"] == error
    refused = submit(client, keys["agent"], "tiny_quadratic")
    assert refused.status_code == 409 and "not deterministic" in refused.json()["message"]


def test_listing_and_report_filters_tell_builtin_from_custom(app: Any, client: Any, keys: dict[str, str]) -> None:
    register(client, keys["agent"])
    activate(app, "tiny_quadratic@1")
    custom_body = report_body(track="tiny_quadratic")
    custom_body["bench_report"]["custom_track"] = {"name": "tiny_quadratic", "version": 1, "build_checked": True}
    with app.state.sessionmaker() as session:
        submitter = key_id(keys["agent"])
        insert_report(session, submitter, track="smoke")
        insert_report(session, submitter, track="smoke@1")
        custom = insert_report(session, submitter, body=custom_body, track="tiny_quadratic@1")
        session.commit()
    listed = client.get("/v1/tracks", headers=bearer(keys["viewer"])).json()["items"]
    by_id = {t["id"]: t for t in listed}
    assert by_id["smoke@1"]["kind"] == "builtin" and by_id["smoke@1"]["n_reports"] == 2
    assert by_id["tiny_quadratic@1"]["n_reports"] == 1 and by_id["tiny_quadratic@1"]["author"]
    assert "source" not in by_id["tiny_quadratic@1"] or by_id["tiny_quadratic@1"]["source"] is None
    for ident, n in (("smoke", 2), ("smoke@1", 2), ("tiny_quadratic@1", 1), ("tiny_quadratic", 1)):
        assert client.get(f"/v1/tracks/{ident}", headers=bearer(keys["viewer"])).json()["n_reports"] == n, ident
    only_custom = client.get("/v1/tracks", params={"kind": "custom"}, headers=bearer(keys["viewer"])).json()
    assert [t["id"] for t in only_custom["items"]] == ["tiny_quadratic@1"]
    reports = client.get("/v1/reports", params={"track_kind": "custom"}, headers=bearer(keys["viewer"])).json()
    assert [r["report_id"] for r in reports["items"]] == [custom.id] and reports["items"][0]["custom_track"]
    builtin = client.get("/v1/reports", params={"track_kind": "builtin"}, headers=bearer(keys["viewer"])).json()
    assert len(builtin["items"]) == 2 and custom.id not in {r["report_id"] for r in builtin["items"]}
    summary = client.get("/v1/verdicts/summary", params={"track_kind": "custom"},
                         headers=bearer(keys["viewer"])).json()
    assert summary["totals"] == []  # no operator vouched for the track: its verdicts count nowhere yet
    assert client.put("/v1/tracks/tiny_quadratic@1/vouch", headers=bearer(keys["operator"])).status_code == 200
    summary = client.get("/v1/verdicts/summary", params={"track_kind": "custom"},
                         headers=bearer(keys["viewer"])).json()
    assert [(t["track"], t["kind"], t["total"]) for t in summary["totals"]] == [("tiny_quadratic@1", "custom", 1)]
    everything = client.get("/v1/verdicts/summary", headers=bearer(keys["viewer"])).json()
    assert {t["track"]: t["kind"] for t in everything["totals"]} == {
        "smoke": "builtin", "smoke@1": "builtin", "tiny_quadratic@1": "custom"}


def test_the_openapi_example_track_passes_the_static_checks() -> None:
    example = TrackRegistration.model_json_schema()["examples"][0]["source"]
    card = tracks_service.parse_track_source(example)
    assert card["name"] == "sum_of_squares"


def test_a_key_has_at_most_two_tracks_in_validation(app: Any, client: Any, keys: dict[str, str]) -> None:
    def version(n: int) -> str:
        return TINY.replace("0.05 noise", f"0.05 noise (v{n})")

    token = keys["agent"]
    assert app.state.settings.track_validations_per_key == 2
    assert register(client, token, version(1)).status_code == 202
    assert register(client, token, version(2)).status_code == 202
    refused = register(client, token, version(3))
    assert refused.status_code == 429, refused.text
    body = refused.json()
    assert body["code"] == "too_many_validations" and "validating" in body["hint"]
    assert "2" in body["message"]
    assert register(client, token, version(2)).status_code == 200  # an identical re-upload still answers
    with app.state.sessionmaker() as session:  # nothing was stored for the refused upload
        assert [r.version for r in tracks_service._versions(session, "tiny_quadratic")] == [1, 2]
    # Another key has its own allowance; an operator has none.
    other = TINY.replace('"tiny_quadratic"', '"tiny_other"')
    assert register(client, keys["agent2"], other).status_code == 202
    assert register(client, keys["operator"], version(4)).status_code == 202
    # Once one leaves validation, the key may register again.
    activate(app, "tiny_quadratic@1")
    assert register(client, token, version(5)).status_code == 202


def test_simultaneous_uploads_of_one_key_cannot_both_pass_the_quota(pg_app: Any) -> None:
    """Postgres: the second registration waits for the first one's transaction, then counts it."""
    import threading

    import pytest

    from app.errors import ApiError
    from app.keys.service import create_key

    with pg_app.state.sessionmaker() as session:
        author = create_key(session, "agent", "racer").key.id
        session.commit()
    outcome: dict[str, Any] = {}

    def second() -> None:
        with pg_app.state.sessionmaker() as session:
            try:
                # Another name: no primary-key conflict with the first upload to wait on.
                tracks_service.register(session, TINY.replace('"tiny_quadratic"', '"tiny_other"'), author,
                                        "tiny.py", max_validating=1)
                session.commit()
                outcome["result"] = "stored"
            except ApiError as exc:
                outcome["result"] = exc.code

    thread = threading.Thread(target=second)
    first = pg_app.state.sessionmaker()
    try:
        tracks_service.register(first, TINY, author, "tiny.py", max_validating=1)  # holds the key row
        thread.start()
        thread.join(timeout=1.0)
        blocked = thread.is_alive()  # waiting for the first transaction's lock
    finally:
        first.commit()
        first.close()
    thread.join(timeout=10)
    assert blocked
    assert outcome == {"result": "too_many_validations"}
    with pytest.raises(ApiError):
        with pg_app.state.sessionmaker() as session:
            tracks_service.register(session, TINY.replace("0.05 noise", "0.05 noise (v3)"), author,
                                    "tiny.py", max_validating=1)


def test_every_card_says_what_a_job_may_spend(client: Any, keys: dict[str, str]) -> None:
    """Issue 27.2: no agent-facing document or card stated the limits (a sleeping build_model
    held the only worker for the job timeout)."""
    card = client.get("/v1/tracks/smoke", headers=bearer(keys["viewer"])).json()
    assert card["limits"] == {"capture_timeout_s": 120.0, "job_timeout_s": 1800.0, "memory_mb": 6144,
                              "compute_ratio": 4.0}
    listed = client.get("/v1/tracks", headers=bearer(keys["viewer"])).json()["items"]
    tokens = next(item for item in listed if item["name"] == "correlated_tokens")
    assert tokens["limits"]["compute_ratio"] == 20.0 and tokens["compute_ratio"] == 20.0


def test_a_track_that_cannot_run_is_listed_so_and_refused_at_once(client: Any, keys: dict[str, str],
                                                                  monkeypatch: Any, tmp_path: Any) -> None:
    """Issue 27.3: cifar10 without its data was listed active, took the job, then failed it
    internal ("a bug in ideabench")."""
    monkeypatch.delenv("IDEABENCH_CIFAR10_DIR", raising=False)
    listed = client.get("/v1/tracks", headers=bearer(keys["viewer"])).json()["items"]
    cifar = next(item for item in listed if item["name"] == "cifar10")
    assert cifar["available"] is False and "IDEABENCH_CIFAR10_DIR" in cifar["unavailable_reason"]
    assert next(item for item in listed if item["name"] == "smoke")["available"] is True
    code = client.get("/v1/tracks/cifar10", headers=bearer(keys["viewer"])).json()["example_idea"]
    refused = client.post("/v1/ideas", json={"track": "cifar10", "code": code}, headers=bearer(keys["agent"]))
    assert refused.status_code == 409 and refused.json()["code"] == "track_unavailable", refused.text
    assert "IDEABENCH_CIFAR10_DIR" in refused.json()["message"] and refused.json()["hint"]
    monkeypatch.setenv("IDEABENCH_CIFAR10_DIR", str(tmp_path))  # set, but empty
    cifar = client.get("/v1/tracks/cifar10", headers=bearer(keys["viewer"])).json()
    assert cifar["available"] is False and "lacks data_batch_1" in cifar["unavailable_reason"]


def test_a_tracks_availability_is_what_the_live_workers_say_not_the_api_hosts(
        app: Any, client: Any, keys: dict[str, str], monkeypatch: Any, tmp_path: Any) -> None:
    """Issue 27.3: availability was read from the API process's environment, but cifar10's data lies
    on the workers (docs/deploy.md): an API host without it refused a track its workers could run,
    and one with it took jobs no worker could. Each worker's beat now says what it cannot run; a
    track is available where a live worker that may judge can run it (on the submission's queue),
    and only with no such worker does the API's own environment decide (an embedded service)."""
    import datetime as dt

    from app.db import utcnow
    from app.health import repository as health_repository

    monkeypatch.setattr(tracks_service, "WORKERS_TTL_S", 0.0)  # each submission reads the beats anew

    def beat(worker: str, unavailable: dict[str, str] | None, *, queue: str = "cpu", sandbox: str = "complete",
             age_s: float = 0.0) -> None:
        with app.state.sessionmaker() as session:
            health_repository.record_beat(session, worker, queue, "cpu", utcnow() - dt.timedelta(seconds=age_s),
                                          sandbox=sandbox, unavailable=unavailable)
            session.commit()

    def cifar() -> dict[str, Any]:
        listed = client.get("/v1/tracks", headers=bearer(keys["viewer"])).json()["items"]
        one = client.get("/v1/tracks/cifar10", headers=bearer(keys["viewer"])).json()
        found = next(item for item in listed if item["name"] == "cifar10")
        assert (found["available"], found["unavailable_reason"]) == (one["available"], one["unavailable_reason"])
        return dict(one)

    code = client.get("/v1/tracks/cifar10", headers=bearer(keys["viewer"])).json()["example_idea"]

    def submitted() -> Any:
        return client.post("/v1/ideas", json={"track": "cifar10", "code": code}, headers=bearer(keys["agent"]))

    monkeypatch.delenv("IDEABENCH_CIFAR10_DIR", raising=False)  # the API's host has no data
    missing = "IDEABENCH_CIFAR10_DIR is not set on this deployment"
    beat("nodata:1", {"cifar10": missing})
    beat("old:1", None)  # a worker from before the column said nothing: it does not count
    beat("stale:1", {}, age_s=3600)  # one that could, gone an hour: does not count
    beat("refused:1", {}, sandbox="refused: missing namespaces")  # it may not judge
    beat("gpu:1", {}, queue="gpu")  # it could, on another queue than a submission's
    assert cifar()["available"] is True  # listed: the GPU worker can run it
    refused = submitted()  # a cpu submission: only nodata:1 serves its queue
    assert refused.status_code == 409 and refused.json()["code"] == "track_unavailable", refused.text
    assert "none of the 1 live workers" in refused.json()["message"] and missing in refused.json()["message"]
    with app.state.sessionmaker() as session:
        session.execute(delete(WorkerBeat).where(WorkerBeat.id == "gpu:1"))
        session.commit()
    state = cifar()
    assert state["available"] is False and state["unavailable_reason"].startswith("none of the 1 live workers")
    beat("data:1", {})  # a worker with the data: the track runs, though the API's host has none
    assert cifar()["available"] is True and cifar()["unavailable_reason"] is None
    accepted = submitted()
    assert accepted.status_code == 202, accepted.text
    # the API's host has the data, no worker does: not available (the old rule took the job)
    monkeypatch.setenv("IDEABENCH_CIFAR10_DIR", str(tmp_path))
    for name in (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"):
        (tmp_path / name).write_bytes(b"x")
    assert tracks_service.deployment_unavailable(tracks_service.get_card("cifar10"), None) is None
    with app.state.sessionmaker() as session:
        session.execute(delete(WorkerBeat).where(WorkerBeat.id == "data:1"))
        session.commit()
    assert cifar()["available"] is False and submitted().json()["code"] == "track_unavailable"


def test_after_a_seed_rotation_the_same_file_is_validated_again_as_a_new_version(app: Any, client: Any,
                                                                                 keys: dict[str, str]) -> None:
    """A version validated in an epoch the deployment has since replaced counts nowhere
    (``custom_track.build_checked``): an identical re-upload then stages the same file as a new
    version, validated in the current epoch, instead of answering the stale one (session 22).
    In the epoch it was validated in, an identical re-upload still answers the version it matches."""
    from app.db import utcnow
    from app.seeds.models import SeedEpoch

    token = keys["agent"]
    with app.state.sessionmaker() as session:
        session.add(SeedEpoch(epoch=1, scheme="s", commitment="c" * 64, created_at=utcnow()))
        session.commit()
    assert register(client, token).status_code == 202
    with app.state.sessionmaker() as session:
        assert tracks_service.record_validation(session, "tiny_quadratic@1", result={**VALIDATION, "seed_epoch": 1})
        session.commit()
    same = register(client, token)
    assert (same.status_code, same.json()["id"]) == (200, "tiny_quadratic@1")
    with app.state.sessionmaker() as session:  # a worker judged under a new epoch: 1 is replaced
        session.add(SeedEpoch(epoch=2, scheme="s", commitment="d" * 64, created_at=utcnow()))
        session.commit()
    again = register(client, keys["operator"])  # an operator re-registers the deployment's tracks
    assert (again.status_code, again.json()["id"], again.json()["status"]) == (202, "tiny_quadratic@2", "validating")
    with app.state.sessionmaker() as session:  # validated again, still its author's (red team, session 22)
        assert tracks_service.get(session, "tiny_quadratic@2").author == key_id(token)
    assert register(client, token).json()["id"] == "tiny_quadratic@2"  # in validation: answered, not staged again
    assert register(client, keys["agent2"]).json()["code"] == "track_name_taken"  # still its author's alone
