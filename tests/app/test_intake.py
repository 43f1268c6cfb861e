"""Group commit of submissions (app.jobs.intake): a batch keeps every rule of one submission
at a time (caps, retries, conflicts), no item fails the others, and two API processes'
writers on one Postgres never let a key past its cap or make a retry's job twice."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from sqlalchemy import func, select, text

from app.db import make_engine, make_sessionmaker
from app.errors import ApiError, database_lost
from app.fair_use import FairUse
from app.jobs import intake, service
from app.jobs.estimate import Estimator
from app.jobs.models import Job
from app.jobs.schemas import IdeaSubmission
from app.keys.deps import Caller
from app.keys.roles import Role
from app.keys.service import create_key
from app.models import metadata
from bench.catalog import get_card
from bench.errors import BenchError, ErrorCode

IDEA = get_card("smoke")["example_idea"]


class Writer:
    """One API process's intake on ``settings``' database."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.engine = make_engine(settings.database_url)
        self.sessions = make_sessionmaker(self.engine)
        self.fair_use = FairUse(settings)
        self.intake = intake.Intake(self.sessions, settings, Estimator(settings.estimate_run_s), self.fair_use)

    def key(self, name: str, **limits: int) -> Caller:
        with self.sessions() as session:
            key = create_key(session, "agent", name).key
            for field, value in limits.items():
                setattr(key, field, value)
            session.commit()
            return Caller(key.id, Role.AGENT, max_active_jobs=key.max_active_jobs,
                          daily_job_quota=key.daily_job_quota)

    async def pending(self, caller: Caller, idempotency_key: str | None = None, **body: Any) -> intake.Pending:
        submission = IdeaSubmission.model_validate({"track": "smoke", "code": IDEA, **body})
        return await intake.prepare(caller, submission, idempotency_key=idempotency_key, settings=self.settings,
                                    fair_use=self.fair_use, sessions=self.sessions, request_id=None, body_bytes=0)

    def jobs(self) -> int:
        with self.sessions() as session:
            return int(session.scalar(select(func.count()).select_from(Job)) or 0)

    def close(self) -> None:
        self.intake.close()
        self.engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def writer(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    if request.param == "sqlite":
        from app.settings import Settings

        settings = Settings(data_dir=tmp_path / "var")
        metadata.create_all(make_engine(settings.database_url))
    else:
        settings = request.getfixturevalue("pg_settings")
    one = Writer(settings)
    yield one
    one.close()


def _outcomes(items: list[intake.Pending]) -> list[Any]:
    return [item.outcome for item in items]


def test_a_batch_lets_a_key_up_to_its_cap_and_no_further(writer: Writer) -> None:
    """Five submissions of a key at cap 3 in one transaction: three jobs, two 429 too_many_jobs;
    another key's in the same batch is counted apart."""
    capped, other = writer.key("capped", max_active_jobs=3), writer.key("other", max_active_jobs=3)
    items = [asyncio.run(writer.pending(capped)) for _ in range(5)] + [asyncio.run(writer.pending(other))]
    writer.intake.write(items)
    out = _outcomes(items)
    assert [isinstance(o, service.Submitted) for o in out] == [True, True, True, False, False, True]
    assert [o.code for o in out[3:5]] == ["too_many_jobs"] * 2
    assert writer.jobs() == 4
    queued = [o.queue_position for o in out if isinstance(o, service.Submitted)]
    assert queued == sorted(queued) and len(set(queued)) == 4  # each counted behind the one before


def test_a_retry_in_the_same_batch_is_a_replay_and_a_reused_key_a_conflict(writer: Writer) -> None:
    caller = writer.key("retries")
    first, retry, reused = (asyncio.run(writer.pending(caller, "k1")), asyncio.run(writer.pending(caller, "k1")),
                            asyncio.run(writer.pending(caller, "k1", name="another body")))
    writer.intake.write([first, retry, reused])
    assert isinstance(first.outcome, service.Submitted) and not first.outcome.replay
    assert isinstance(retry.outcome, service.Submitted) and retry.outcome.replay
    assert retry.outcome.job.id == first.outcome.job.id
    assert isinstance(reused.outcome, ApiError) and reused.outcome.code == "idempotency_conflict"
    assert writer.jobs() == 1
    later = asyncio.run(writer.pending(caller, "k1"))  # and in a later batch, from the database
    writer.intake.write([later])
    assert isinstance(later.outcome, service.Submitted) and later.outcome.replay
    assert later.outcome.job.id == first.outcome.job.id


def test_a_retry_is_answered_with_its_job_even_where_its_body_is_now_refused(writer: Writer) -> None:
    """At its cap, or with a check that now fails, a retry still gets the job it made."""
    caller = writer.key("at-cap", max_active_jobs=1)
    made = asyncio.run(writer.pending(caller, "k"))
    writer.intake.write([made])
    assert isinstance(made.outcome, service.Submitted)
    again, fresh = asyncio.run(writer.pending(caller, "k")), asyncio.run(writer.pending(caller, "new"))
    writer.intake.write([again, fresh])
    assert isinstance(again.outcome, service.Submitted) and again.outcome.replay
    assert isinstance(fresh.outcome, ApiError) and fresh.outcome.code == "too_many_jobs"
    # The same body refused by its checks now (say, its track deprecated since): its job.
    refused_now = asyncio.run(writer.pending(caller, "k"))
    refused_now.values, refused_now.error = None, BenchError(ErrorCode.TRACK_DEPRECATED, "gone")
    writer.intake.write([refused_now])
    assert isinstance(refused_now.outcome, service.Submitted) and refused_now.outcome.replay
    assert refused_now.outcome.job.id == made.outcome.job.id
    # A refused body under that key: another body, so 409; under a new key: its own error.
    other = asyncio.run(writer.pending(caller, "k", code="def build_model(:"))
    broken = asyncio.run(writer.pending(caller, "broken", code="def build_model(:"))
    writer.intake.write([other, broken])
    assert getattr(other.outcome, "code", None) == "idempotency_conflict"
    assert getattr(broken.outcome, "code", None) == "invalid_code"


def test_no_item_fails_the_others_in_its_batch(writer: Writer) -> None:
    """A row the database refuses fails alone: the batch is written again one item at a time."""
    caller = writer.key("poison")
    items = [asyncio.run(writer.pending(caller)) for _ in range(3)]
    assert items[1].values is not None
    items[1].values["submitter_id"] = "key_that_does_not_exist"  # a foreign key the database refuses
    writer.intake.write(items)
    assert isinstance(items[0].outcome, service.Submitted) and isinstance(items[2].outcome, service.Submitted)
    assert isinstance(items[1].outcome, Exception) and not isinstance(items[1].outcome, service.Submitted)
    assert writer.jobs() == 2


def test_concurrent_submissions_share_batches(writer: Writer) -> None:
    """Forty submissions at once from one event loop: far fewer transactions than jobs."""
    caller = writer.key("many")

    async def main() -> list[service.Submitted]:
        items = [await writer.pending(caller, f"k{i}") for i in range(40)]
        return list(await asyncio.gather(*(writer.intake.submit(p) for p in items)))

    answers = asyncio.run(main())
    assert len({a.job.id for a in answers}) == 40 and writer.jobs() == 40
    assert writer.intake.batches < 20, writer.intake.batches


@pytest.fixture
def two_slow_writers(pg_settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Two API processes' writers (two engines) whose transactions wait 0.3 s between their
    counts and their insert: two batches written at once both count before either commits."""
    decide = intake.Intake._decide

    def slow_decide(self: intake.Intake, batch: Any, now: Any) -> Any:
        rows = decide(self, batch, now)
        time.sleep(0.3)
        return rows

    monkeypatch.setattr(intake.Intake, "_decide", slow_decide)
    writers = [Writer(pg_settings), Writer(pg_settings)]
    yield writers
    for one in writers:
        one.close()


def _write_at_once(writers: list[Writer], batches: list[list[intake.Pending]]) -> None:
    threads = [threading.Thread(target=w.intake.write, args=(b,)) for w, b in zip(writers, batches, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def test_two_processes_writers_keep_a_key_at_its_cap(two_slow_writers: list[Writer]) -> None:
    """Six submissions each, at once, for one key at cap 5: only the key's lock keeps it at 5
    jobs (without it: 10)."""
    caller = two_slow_writers[0].key("shared", max_active_jobs=5)
    batches = [[asyncio.run(w.pending(caller, f"{n}-{i}")) for i in range(6)] for n, w in enumerate(two_slow_writers)]
    _write_at_once(two_slow_writers, batches)
    out = [item.outcome for batch in batches for item in batch]
    assert sum(isinstance(o, service.Submitted) for o in out) == two_slow_writers[0].jobs() == 5
    assert [o.code for o in out if not isinstance(o, service.Submitted)] == ["too_many_jobs"] * 7  # type: ignore[union-attr]


def test_two_processes_writers_make_one_job_per_idempotency_key(two_slow_writers: list[Writer]) -> None:
    """The same six Idempotency-Keys from both processes at once, in opposite orders, for a key
    with no cap (not locked): each key makes one job, the process that lost the insert answers
    with it. (The inserts are sorted so that two batches cannot deadlock on each other's
    uncommitted keys; this timing does not make them interleave, so it does not prove that.)"""
    caller = two_slow_writers[0].key("racing", max_active_jobs=0, daily_job_quota=0)
    orders = [range(6), range(5, -1, -1)]
    batches = [[asyncio.run(w.pending(caller, f"k{i}")) for i in order]
               for w, order in zip(two_slow_writers, orders, strict=True)]
    _write_at_once(two_slow_writers, batches)
    assert two_slow_writers[0].jobs() == 6
    for first, second in zip(batches[0], reversed(batches[1]), strict=True):
        a, b = first.outcome, second.outcome
        assert isinstance(a, service.Submitted) and isinstance(b, service.Submitted), (a, b)
        assert a.job.id == b.job.id and {a.replay, b.replay} == {True, False}


def test_a_lost_connection_answers_its_batch_503_and_the_next_batch_is_written(pg_settings: Any) -> None:
    """The writer's connection killed by the server: that batch's submissions get the database
    error (503 database_unavailable at the API) and nothing of it is written; the next works."""
    one = Writer(pg_settings)
    caller = one.key("lost")
    warm = asyncio.run(one.pending(caller))
    one.intake.write([warm])  # the pool now holds the writer's connection
    with make_engine(pg_settings.database_url).connect() as admin:
        killed = admin.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()")).scalar_one()
    assert killed >= 1
    items = [asyncio.run(one.pending(caller)) for _ in range(3)]
    one.intake.write(items)
    assert all(database_lost(o) for o in _outcomes(items)), _outcomes(items)
    assert one.jobs() == 1
    again = [asyncio.run(one.pending(caller)) for _ in range(3)]
    one.intake.write(again)
    assert all(isinstance(o, service.Submitted) for o in _outcomes(again))
    assert one.jobs() == 4
    one.close()


def test_a_large_body_is_checked_in_the_thread_pool_with_the_same_answers(
        client: Any, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies over INLINE_BODY_BYTES are checked off the event loop (a large file's checks
    would stall every request of the process): accepted or refused as a small one would be,
    and a retry of an accepted one is its replay. A small one is checked inline once the workers'
    beats were read (``tracks_service.cached_workers``: the first submission reads them off the loop)."""
    from tests.conftest import bearer

    hops: list[object] = []
    real = intake.run_in_threadpool

    async def counted(func: Any, *args: Any) -> Any:
        hops.append(func)
        return await real(func, *args)

    monkeypatch.setattr(intake, "run_in_threadpool", counted)
    first = client.post("/v1/ideas", json={"track": "smoke", "code": IDEA}, headers=bearer(keys["agent"]))
    assert first.status_code == 202 and hops == [intake.check]  # it read the workers' beats: off the loop
    hops.clear()
    small = client.post("/v1/ideas", json={"track": "smoke", "code": IDEA}, headers=bearer(keys["agent"]))
    assert small.status_code == 202 and hops == []
    padding = "\n# " + "x" * intake.INLINE_BODY_BYTES + "\n"
    headers = {**bearer(keys["agent"]), "Idempotency-Key": "large"}
    accepted = client.post("/v1/ideas", json={"track": "smoke", "code": IDEA + padding}, headers=headers)
    assert accepted.status_code == 202, accepted.text
    again = client.post("/v1/ideas", json={"track": "smoke", "code": IDEA + padding}, headers=headers)
    assert again.json()["idempotent_replay"] is True and again.json()["job_id"] == accepted.json()["job_id"]
    refused = client.post("/v1/ideas", json={"track": "smoke", "code": "def build_model(:\n" + padding},
                          headers=bearer(keys["agent"]))
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_code"
    assert hops == [intake.check] * 3


def test_a_nul_character_in_a_stored_text_is_a_422_not_a_500(client: Any, keys: dict[str, str]) -> None:
    """Postgres refuses NUL in text and JSON; a name, hypothesis, grid or mechanism holding one
    was a 500 (and, in a batch, made every other submission of it be written again alone)."""
    from tests.conftest import bearer

    for extra in ({"name": "a\x00b"}, {"hypothesis": "\x00"}, {"hparams": {"width": ["\x00"]}},
                  {"mechanism": {"k\x00": 1}}):
        answer = client.post("/v1/ideas", json={"track": "smoke", "code": IDEA, **extra},
                             headers=bearer(keys["agent"]))
        assert answer.status_code == 422, (extra, answer.text)
        assert answer.json()["code"] == "validation_error", answer.json()
