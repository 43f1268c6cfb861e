"""A red team of the operator's vouch for a custom track (issue 25.8; helper, 2026-12-05):
each test asserts the safe behaviour of a hole it found, on SQLite and on Postgres."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.jobs import leases
from app.reports.models import VerdictCount
from app.tracks.models import CustomTrackRow
from bench.track_source import parse_track_source
from tests.app.factories import insert_job, insert_report, key_id, report_body
from tests.conftest import bearer

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
SOURCE = (Path(__file__).parents[1] / "security" / "hostile" / "data_signal_track.py").read_text()



def _track(session: Any, ident: str, author: str) -> None:
    session.add(CustomTrackRow(id=ident, name=ident.split("@")[0], version=int(ident.split("@")[1]),
                               sha256="0" * 64, source=SOURCE, card=parse_track_source(SOURCE), domain="test",
                               author=author, status="active", created_at=T0))
    session.flush()


def _verdict_n(app: Any, track: str) -> int:
    with app.state.sessionmaker() as session:
        return int(session.scalar(select(func.coalesce(func.sum(VerdictCount.n), 0))
                                  .where(VerdictCount.track == track)) or 0)


@pytest.mark.parametrize("method", ["DELETE", "PUT"])
def test_a_vouch_or_withdrawal_racing_a_report_being_stored_leaves_the_count_true(
    env: tuple[Any, TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch, method: str,
) -> None:
    """The operator withdraws (or gives) the vouch while a worker stores a report on the track,
    after the worker read the vouch. Before: SQLite has no read locks and its driver opens the
    write transaction only at the first write, so the recount missed the report and the report
    kept the vouch it had read: a rigged ``helps`` counted on an unvouched track (or an honest
    one left out of a vouched track's totals). Now the worker writes the track's row before it
    reads the vouch, and the two are ordered: whichever way, the report counts iff the track is
    vouched for, and the verdict counts agree."""
    import workers.runner as runner
    from workers.context import WorkerContext

    app, client, tokens = env
    with app.state.sessionmaker() as session:
        _track(session, "rig@1", key_id(tokens["agent"]))
        session.commit()
    if method == "DELETE":
        assert client.put("/v1/tracks/rig@1/vouch", headers=bearer(tokens["operator"])).status_code == 200
    with app.state.sessionmaker() as session:
        job = insert_job(session, key_id(tokens["agent2"]), track="rig@1", created_at=T0)
        session.commit()
        claim = leases.claim_job(session, job.id, "host:1", dt.datetime.now(dt.UTC), 600)
        session.commit()
    assert claim is not None
    answers: list[int] = []
    operator = threading.Thread(target=lambda: answers.append(client.request(
        method, "/v1/tracks/rig@1/vouch", headers=bearer(tokens["operator"])).status_code))
    original = runner.build_report_row

    def operator_acts_then_build(*args: Any, **kwargs: Any) -> Any:
        operator.start()
        operator.join(1.0)  # it waits for the store's transaction (or ran first, on Postgres it cannot)
        return original(*args, **kwargs)

    monkeypatch.setattr(runner, "build_report_row", operator_acts_then_build)
    body = report_body("worked", "helps", track="rig@1", p_helps=0.001)
    body["bench_report"]["custom_track"] = {"name": "rig", "version": 1, "build_checked": True}
    context = WorkerContext(settings=app.state.settings, engine=app.state.engine, sessions=app.state.sessionmaker,
                            worker_id="host:1", queue=app.state.queue)
    assert runner._store_report(context, claim, job, body).value == "succeeded"
    operator.join(60)
    assert answers == [200]
    vouched = client.get("/v1/tracks/rig@1", headers=bearer(tokens["viewer"])).json()["vouched"]
    assert vouched is (method == "PUT")
    rows = client.get("/v1/reports?track=rig@1", headers=bearer(tokens["viewer"])).json()["items"]
    assert [r["counted"] for r in rows] == [vouched]
    assert _verdict_n(app, "rig@1") == int(vouched)


def test_an_ident_that_names_no_track_is_a_404_not_a_500(env: tuple[Any, TestClient, dict[str, str]]) -> None:
    """A NUL byte (or any character a track name cannot hold) in a track's ident answered 500
    ``internal`` on Postgres (the driver refuses NUL in a text parameter): to the operator's
    vouch, and to any agent's GET of a track."""
    _, client, tokens = env
    for ident in ("x%00@1", "x%00", "smoke%0A@1", "Rig@1", "rig@0", "rig@1@2", "a" * 90 + "@1"):
        answers = {
            "PUT": client.put(f"/v1/tracks/{ident}/vouch", headers=bearer(tokens["operator"])),
            "DELETE": client.delete(f"/v1/tracks/{ident}/vouch", headers=bearer(tokens["operator"])),
            "GET": client.get(f"/v1/tracks/{ident}", headers=bearer(tokens["agent"])),
            "deprecate": client.post(f"/v1/tracks/{ident}/deprecate", headers=bearer(tokens["agent"])),
        }
        assert {k: (a.status_code, a.json()["code"]) for k, a in answers.items()} == {
            k: (404, "unknown_track") for k in answers}, ident
    refused = client.post("/v1/ideas", headers=bearer(tokens["agent"]), json={
        "track": "x\u0000@1", "code": "def build_model(spec):\n    return None\n"})
    assert (refused.status_code, refused.json()["code"]) == (422, "validation_error")  # the schema refuses NUL


def test_a_custom_row_under_a_built_in_name_is_never_vouched_for(
    env: tuple[Any, TestClient, dict[str, str]],
) -> None:
    """A custom ``newname@1`` registered before a release built ``newname`` in keeps its row, and
    built-in jobs submitted as ``newname@1`` store the same track string: a vouch on the custom
    row recounted the built-in's reports (a withdrawal took honest ones out of the totals).
    Here ``smoke@1`` stands for such a name: refused, nothing recounted."""
    app, client, tokens = env
    with app.state.sessionmaker() as session:
        _track(session, "smoke@1", key_id(tokens["agent"]))
        honest = insert_report(session, key_id(tokens["agent2"]), track="smoke@1", created_at=T0)
        session.commit()
    assert honest.counted is True and _verdict_n(app, "smoke@1") == 1
    for method in ("DELETE", "PUT"):
        answer = client.request(method, "/v1/tracks/smoke@1/vouch", headers=bearer(tokens["operator"]))
        assert (answer.status_code, answer.json()["code"]) == (404, "unknown_track")
    rows = client.get("/v1/reports?track=smoke@1", headers=bearer(tokens["viewer"])).json()["items"]
    assert [r["counted"] for r in rows] == [True] and _verdict_n(app, "smoke@1") == 1


def test_a_card_name_with_a_trailing_newline_is_no_name() -> None:
    """``NAME_RE`` was matched with ``$``, which also matches before a final newline: a card
    named ``"smoke\\n"`` registered as a custom ``smoke\\n@1`` that lists like the built-in."""
    from bench.errors import BenchError

    with pytest.raises(BenchError, match="CARD\\['name'\\]"):
        parse_track_source(SOURCE.replace('"name": "data_signal"', '"name": "smoke\\n"'))
