"""Data migrations run forward (and back) on stored rows, on SQLite and on real Postgres."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text

from app.db import make_engine
from app.migrate import alembic_config
from tests.conftest import scratch_postgres

CREATED = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/old.db"
        return
    with scratch_postgres() as url:
        yield url


def _key(conn) -> None:  # noqa: ANN001
    conn.execute(text("INSERT INTO api_keys (id, role, token_sha256, created_at) VALUES ('key_a', 'agent', 'x', :at)"),
                 {"at": CREATED})


def _job(conn, job_id: str, status: str = "succeeded", track: str = "smoke@1") -> None:  # noqa: ANN001
    conn.execute(text(
        "INSERT INTO jobs (id, status, queue, track, idea_code, submitter_id, request_sha256, runs_done, "
        "attempts, cancel_requested, created_at) VALUES (:id, :status, 'cpu', :track, 'x', 'key_a', "
        ":id, 0, 1, false, :at)"), {"id": job_id, "status": status, "track": track, "at": CREATED})


def _insert(conn, report_id: str, system: str, practical: str, mechanism_ok: bool | None) -> None:  # noqa: ANN001
    job_id = f"job_{report_id}"
    _job(conn, job_id)
    body = {"system_verdict": system, "practical_verdict": practical, "summary": f"... System verdict: {system}."}
    conn.execute(text(
        "INSERT INTO reports (id, job_id, track, submitter_id, system_verdict, practical_verdict, mechanism_ok, "
        "worked, created_at, body) VALUES (:id, :job, 'smoke@1', 'key_a', :s, :p, :m, :w, :at, :body)"),
        {"id": report_id, "job": job_id, "s": system, "p": practical, "m": mechanism_ok,
         "w": system == "worked", "at": CREATED, "body": json.dumps(body)})
    conn.execute(text(
        "INSERT INTO verdict_counts (day, week, track, system_verdict, practical_verdict, n) "
        "VALUES (:d, :w, 'smoke@1', :s, :p, 1) ON CONFLICT (day, track, system_verdict, practical_verdict) "
        "DO UPDATE SET n = verdict_counts.n + 1"),
        {"d": CREATED.date(), "w": CREATED.date() - dt.timedelta(days=CREATED.weekday()), "s": system,
         "p": practical})


def _state(url: str) -> tuple[dict[str, tuple[str, str]], dict[tuple[str, str], int]]:
    engine = make_engine(url)
    with engine.connect() as conn:
        reports = {}
        for report_id, system, body in conn.execute(text("SELECT id, system_verdict, body FROM reports")):
            body = body if isinstance(body, dict) else json.loads(body)
            assert body["system_verdict"] == system
            reports[report_id] = (system, body["summary"].rsplit(": ", 1)[1])
        counts = {(s, p): n for s, p, n in conn.execute(
            text("SELECT system_verdict, practical_verdict, n FROM verdict_counts"))}
    engine.dispose()
    return reports, counts


def test_partial_without_a_mechanism_becomes_failed_and_back(database_url: str) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0002")
    engine = make_engine(database_url)
    with engine.begin() as conn:
        _key(conn)
        _insert(conn, "rep_null_partial", "partial", "inconclusive", None)  # the old rule's null idea
        _insert(conn, "rep_null_harms", "partial", "harms", None)
        _insert(conn, "rep_one_of_two", "partial", "helps", False)  # a real partial: stays
        _insert(conn, "rep_mech_partial", "partial", "inconclusive", True)  # a real partial: stays
        _insert(conn, "rep_worked", "worked", "helps", None)
    engine.dispose()

    command.upgrade(config, "0003")
    reports, counts = _state(database_url)
    assert reports == {
        "rep_null_partial": ("failed", "failed."), "rep_null_harms": ("failed", "failed."),
        "rep_one_of_two": ("partial", "partial."), "rep_mech_partial": ("partial", "partial."),
        "rep_worked": ("worked", "worked."),
    }
    assert counts == {("failed", "inconclusive"): 1, ("failed", "harms"): 1, ("partial", "helps"): 1,
                      ("partial", "inconclusive"): 1, ("worked", "helps"): 1}

    command.downgrade(config, "0002")
    reports, counts = _state(database_url)
    assert {k: v[0] for k, v in reports.items()} == {
        "rep_null_partial": "partial", "rep_null_harms": "partial", "rep_one_of_two": "partial",
        "rep_mech_partial": "partial", "rep_worked": "worked",
    }
    assert counts == {("partial", "inconclusive"): 2, ("partial", "harms"): 1, ("partial", "helps"): 1,
                      ("worked", "helps"): 1}
    command.upgrade(config, "head")


def test_attempt_columns_are_backfilled_from_stored_rows(database_url: str) -> None:
    from bench.family import family_of

    config = alembic_config(database_url)
    command.upgrade(config, "0003")
    engine = make_engine(database_url)
    code = "from torch import nn\n\ndef build_model(spec):\n    return nn.Linear(8, 1)\n"
    with engine.begin() as conn:
        _key(conn)
        conn.execute(text(
            "INSERT INTO jobs (id, status, queue, track, idea_code, baseline_code, submitter_id, request_sha256, "
            "runs_done, attempts, cancel_requested, created_at) VALUES ('job_1', 'succeeded', 'cpu', 'smoke@1', "
            ":code, 'b', 'key_a', '0', 0, 1, false, :at)"), {"code": code, "at": CREATED})
        body = {"system_verdict": "worked", "bench_report": {"metric_direction": "lower is better", "comparison": {
            "per_seed_diffs": [-1.0] * 8}}}  # a report from before confirmation: no p_helps stored
        conn.execute(text(
            "INSERT INTO reports (id, job_id, track, submitter_id, system_verdict, practical_verdict, worked, "
            "created_at, body) VALUES ('rep_1', 'job_1', 'smoke@1', 'key_a', 'worked', 'helps', true, :at, :body)"),
            {"at": CREATED, "body": json.dumps(body)})
    command.upgrade(config, "0004")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT family FROM jobs")).scalar_one() == family_of(code)
        family, baseline, p = conn.execute(text("SELECT family, baseline, p_helps FROM reports")).one()
    engine.dispose()
    assert family == family_of(code) and baseline.startswith("matched:") and p == 1 / 256
    command.downgrade(config, "0003")
    command.upgrade(config, "head")


def test_report_streams_are_backfilled_from_stored_bodies(database_url: str) -> None:
    """Migration 0012: the stream columns (track version, seed epoch, device class, public data)
    of reports stored before it, read from their bodies; a body without them gets the defaults."""
    config = alembic_config(database_url)
    command.upgrade(config, "0011")
    engine = make_engine(database_url)
    bodies = {
        "rep_1": {"bench_report": {"track_version": 1, "seed_commitment": {"epoch": 3}, "device": "cuda:0",
                                   "public_data": True}},
        "rep_2": {"bench_report": {}},
    }
    with engine.begin() as conn:
        _key(conn)
        for n, (report_id, body) in enumerate(bodies.items()):
            conn.execute(text(
                "INSERT INTO jobs (id, status, queue, track, idea_code, submitter_id, request_sha256, "
                "runs_done, attempts, cancel_requested, created_at) VALUES (:job, 'succeeded', 'cpu', 'vision', "
                "'x', 'key_a', :n, 0, 1, false, :at)"), {"job": f"job_{n}", "n": str(n), "at": CREATED})
            conn.execute(text(
                "INSERT INTO reports (id, job_id, track, submitter_id, system_verdict, practical_verdict, worked, "
                "created_at, body) VALUES (:id, :job, 'vision', 'key_a', 'failed', 'inconclusive', false, :at, "
                ":body)"), {"id": report_id, "job": f"job_{n}", "at": CREATED, "body": json.dumps(body)})
    command.upgrade(config, "0012")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, track_version, seed_epoch, device_class, public_data FROM reports "
                                 "ORDER BY id")).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [("rep_1", 1, 3, "cuda", True), ("rep_2", None, None, "cpu", False)]
    command.downgrade(config, "0011")
    command.upgrade(config, "head")


def test_an_errored_job_is_errored_and_back(database_url: str) -> None:
    """Migration 0014 (issue 27.7): a stored job that ended with an error, ``failed`` before, is
    ``errored``; other statuses stay; a downgrade gives ``failed`` back."""
    config = alembic_config(database_url)
    command.upgrade(config, "0013")
    engine = make_engine(database_url)
    with engine.begin() as conn:
        _key(conn)
        for n, status in enumerate(("failed", "succeeded", "cancelled")):
            _job(conn, f"job_{n}", status)

    def statuses() -> list[str]:
        with engine.connect() as conn:
            return list(conn.execute(text("SELECT status FROM jobs ORDER BY id")).scalars())

    command.upgrade(config, "0014")
    assert statuses() == ["errored", "succeeded", "cancelled"]
    command.downgrade(config, "0013")
    assert statuses() == ["failed", "succeeded", "cancelled"]
    engine.dispose()
    command.upgrade(config, "head")


def test_a_confirmed_reports_listed_delta_becomes_the_confirmations(database_url: str) -> None:
    """Migration 0015: a report the confirmation decided lists the confirmation's delta; others
    keep the screening's; a downgrade gives the screening's back."""
    config = alembic_config(database_url)
    command.upgrade(config, "0014")
    engine = make_engine(database_url)
    bodies = {
        "rep_1": ({"bench_report": {"decided_by": "confirmation", "comparison": {"delta_mean": -0.02},
                                    "confirmation": {"comparison": {"delta_mean": -0.008}}}}, -0.02),
        "rep_2": ({"bench_report": {"decided_by": "screening", "comparison": {"delta_mean": 0.004}}}, 0.004),
    }
    with engine.begin() as conn:
        _key(conn)
        for n, (report_id, (body, delta)) in enumerate(bodies.items()):
            _job(conn, f"job_{n}", track="smoke")
            conn.execute(text(
                "INSERT INTO reports (id, job_id, track, submitter_id, system_verdict, practical_verdict, worked, "
                "delta_mean, created_at, body) VALUES (:id, :job, 'smoke', 'key_a', 'failed', 'inconclusive', "
                "false, :delta, :at, :body)"),
                {"id": report_id, "job": f"job_{n}", "delta": delta, "at": CREATED, "body": json.dumps(body)})
    command.upgrade(config, "0015")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, delta_mean, delta_stage FROM reports ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [("rep_1", -0.008, "confirmation"), ("rep_2", 0.004, "screening")]
    command.downgrade(config, "0014")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT delta_mean FROM reports WHERE id = 'rep_1'")).scalar_one() == -0.02
    engine.dispose()
    command.upgrade(config, "head")


def test_stored_custom_track_reports_leave_the_totals_until_their_track_is_vouched(database_url: str) -> None:
    """Migration 0016: a stored report on a custom track stops counting (its day's verdict
    count taken down) until an operator vouches for its track; built-in reports, and a custom
    one against a matched baseline (never in the totals), keep their rows."""
    config = alembic_config(database_url)
    command.upgrade(config, "0015")
    engine = make_engine(database_url)
    rows = [("rep_b", "smoke", False, None), ("rep_c", "mine@1", True, None), ("rep_d", "mine@1", True, None),
            ("rep_m", "mine@1", True, "matched:0123456789abcdef")]
    with engine.begin() as conn:
        _key(conn)
        for n, (report_id, track, custom, baseline) in enumerate(rows):
            conn.execute(text(
                "INSERT INTO jobs (id, status, queue, track, idea_code, submitter_id, request_sha256, "
                "runs_done, attempts, cancel_requested, created_at) VALUES (:job, 'succeeded', 'cpu', :track, "
                "'x', 'key_a', :n, 0, 1, false, :at)"), {"job": f"job_{n}", "track": track, "n": str(n), "at": CREATED})
            conn.execute(text(
                "INSERT INTO reports (id, job_id, track, custom_track, baseline, submitter_id, system_verdict, "
                "practical_verdict, worked, counted, created_at, body) VALUES (:id, :job, :track, :custom, :baseline, "
                "'key_a', 'worked', 'helps', true, true, :at, '{}')"),
                {"id": report_id, "job": f"job_{n}", "track": track, "custom": custom, "baseline": baseline,
                 "at": CREATED})
        for track, n in (("smoke", 1), ("mine@1", 2)):  # the matched one was never counted
            conn.execute(text(
                "INSERT INTO verdict_counts (day, week, track, system_verdict, practical_verdict, n) "
                "VALUES (:d, :w, :t, 'worked', 'helps', :n)"),
                {"d": CREATED.date(), "w": CREATED.date() - dt.timedelta(days=CREATED.weekday()), "t": track, "n": n})
    command.upgrade(config, "0016")
    with engine.connect() as conn:
        counted = dict(conn.execute(text("SELECT id, counted FROM reports")).all())
        counts = dict(conn.execute(text("SELECT track, n FROM verdict_counts")).all())
        conn.execute(text("SELECT vouched_at, vouched_by FROM custom_tracks")).all()
    assert {k: bool(v) for k, v in counted.items()} == {"rep_b": True, "rep_c": False, "rep_d": False,
                                                         "rep_m": False}
    assert counts == {"smoke": 1}
    command.downgrade(config, "0015")
    command.upgrade(config, "head")
    engine.dispose()


def test_every_track_with_reports_gets_a_stream_token(database_url: str) -> None:
    """Migration 0017: each track with stored reports gets a ``report_streams`` row (a track
    without one is never kept between reads), its reports ``stream_seq`` 0 (older than any
    change); a downgrade drops both."""
    config = alembic_config(database_url)
    command.upgrade(config, "0016")
    engine = make_engine(database_url)
    with engine.begin() as conn:
        _key(conn)
        _insert(conn, "rep_1", "worked", "helps", True)
        _insert(conn, "rep_2", "failed", "inconclusive", None)
    command.upgrade(config, "0017")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT track, seq, base FROM report_streams")).all()
        seqs = conn.execute(text("SELECT stream_seq FROM reports")).scalars().all()
    assert [r[:2] for r in rows] == [("smoke@1", 1)] and len(rows[0][2]) == 32 and seqs == [0, 0]
    command.downgrade(config, "0016")
    command.upgrade(config, "head")
    engine.dispose()


def test_the_verdict_rollup_is_rebuilt_by_stream_and_back(database_url: str) -> None:
    """Migration 0019: ``verdict_counts`` is keyed by the reports' stream too (track version,
    seed epoch, device class), rebuilt from the reports that count in it (counted, against the
    track's own baseline); a downgrade adds the streams up again."""
    config = alembic_config(database_url)
    command.upgrade(config, "0018")
    engine = make_engine(database_url)
    rows = [("rep_1", "cpu", 2, None, True), ("rep_2", "cuda", 2, None, True), ("rep_3", "cuda", 2, None, True),
            ("rep_4", "cpu", None, None, True), ("rep_5", "cpu", 2, "matched:0123456789abcdef", True),
            ("rep_6", "cpu", 2, None, False)]
    with engine.begin() as conn:
        _key(conn)
        for n, (report_id, device, epoch, baseline, counted) in enumerate(rows):
            conn.execute(text(
                "INSERT INTO jobs (id, status, queue, track, idea_code, submitter_id, request_sha256, "
                "runs_done, attempts, cancel_requested, created_at) VALUES (:job, 'succeeded', 'cpu', 'smoke', "
                "'x', 'key_a', :n, 0, 1, false, :at)"), {"job": f"job_{n}", "n": str(n), "at": CREATED})
            conn.execute(text(
                "INSERT INTO reports (id, job_id, track, baseline, submitter_id, system_verdict, practical_verdict, "
                "worked, counted, track_version, seed_epoch, device_class, created_at, body) VALUES (:id, :job, "
                "'smoke', :baseline, 'key_a', 'worked', 'helps', true, :counted, 1, :epoch, :device, :at, '{}')"),
                {"id": report_id, "job": f"job_{n}", "baseline": baseline, "counted": counted, "epoch": epoch,
                 "device": device, "at": CREATED})
    command.upgrade(config, "0019")
    with engine.connect() as conn:
        found = {tuple(r[:3]): r[3] for r in conn.execute(text(
            "SELECT track_version, seed_epoch, device_class, n FROM verdict_counts"))}
    assert found == {(1, 2, "cpu"): 1, (1, 2, "cuda"): 2, (1, 0, "cpu"): 1}
    command.downgrade(config, "0018")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM verdict_counts")).scalars().all() == [4]
    command.upgrade(config, "head")
    engine.dispose()
