"""Group commit of submissions: one writer thread per API process writes every submission
that arrived while it wrote the last batch, in one transaction.

Alone, a submission costs a thread hop, a session, a key lock, a count, an insert and a
commit (with its WAL flush): five round trips, and 2.8 ms of Postgres CPU per submission in
benchmarks/load.py (docs/reliability.md, session 12). A batch of n pays for each of these
once: it locks its keys (sorted, one statement), reads the jobs their Idempotency-Keys already made (one
statement), counts every locked key's jobs in flight and of today (one statement), inserts
what it accepts (one multi-row INSERT) and commits once. At low load a batch holds one
submission and nothing waits: the writer takes what is there, it does not wait to fill up.

The rules are those of one submission at a time, applied in arrival order: a retry is
answered with the job its key made (before any cap, as before); a key at its cap gets 429
however many of its submissions share a batch (each accepted one counts against the next);
the counts are read after the lock is granted, in a statement of their own (a count in the
locking statement would read a snapshot taken before the lock was granted).

A batch that fails on a lost database answers every submission in it with that error (503
to retry: nothing was written, or, where the connection dropped during the commit, all of it,
and a retry with its Idempotency-Key is answered with its job). Any other failure is
retried one submission at a time, so that no body can fail the others in its batch.

Why not a library: what is batched is our own transaction (locks, counts, replays), which
no queueing library knows; the code is a queue, a thread and a future per submission.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import queue
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Table, bindparam, func, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.elements import BindParameter

from app.db import db_now
from app.errors import ApiCode, ApiError, database_lost
from app.fair_use import FairUse
from app.health import repository as health_repository
from app.ids import new_id
from app.jobs import service
from app.jobs.estimate import Estimator
from app.jobs.models import Job, JobStatus
from app.jobs.schemas import IdeaSubmission
from app.keys.deps import Caller
from app.keys.models import ApiKey
from app.settings import Settings
from app.tracks import service as tracks_service
from app.webhooks import service as webhooks
from bench.catalog import is_builtin
from bench.errors import BenchError
from bench.plan import RunPlan

log = logging.getLogger(__name__)

JOBS: Table = Job.__table__  # type: ignore[assignment]
MAX_BATCH = 256
INLINE_BODY_BYTES = 4 * 1024


@dataclass
class Pending:
    """One submission for the writer: its row (or the error its checks raised), and the
    fair-use limits of its key (``cap`` / ``quota`` None: not counted, e.g. an operator)."""

    key_id: str
    idempotency_key: str | None
    digest: str
    values: dict[str, Any] | None  # None: refused by its checks (``error``), answered as a replay if it is one
    error: Exception | None = None
    cap: int | None = None
    quota: int | None = None
    plan: RunPlan | None = None  # its run plan (service.run_plan), for the estimate
    card: dict[str, Any] = field(default_factory=dict)  # the track's, for the estimate
    # Set by the writer (anew in each transaction it tries), read by the request once woken.
    outcome: service.Submitted | Exception | None = None
    replay: bool = False  # answered with the job its Idempotency-Key made (not inserted)
    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future[None] | None = None

    @property
    def counted(self) -> bool:
        return bool(self.cap or self.quota)

    @property
    def accepted(self) -> bool:
        """To insert (or inserted): neither refused nor a retry."""
        return self.values is not None and self.outcome is None and not self.replay

    @property
    def pair(self) -> tuple[str, str] | None:
        return (self.key_id, self.idempotency_key) if self.idempotency_key is not None else None


@dataclass
class _Batch:
    """What one transaction learned and decided."""

    items: list[Pending]
    existing: dict[tuple[str, str], Job] = field(default_factory=dict)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)


class Intake:
    """The writer of one API process (``app.state.intake``); ``await submit(p)`` from any
    event loop (the test client starts one per request)."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings, estimator: Estimator,
                 fair_use: FairUse) -> None:
        self.sessions = sessions
        self.settings = settings
        self.estimator = estimator
        self.fair_use = fair_use
        self._queue: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self.batches = 0  # batches written (a figure for tests and benchmarks)

    async def submit(self, pending: Pending) -> service.Submitted:
        """Write ``pending`` in the next batch; its ``Submitted``, or the error that answers it."""
        loop = asyncio.get_running_loop()
        pending.loop, pending.future = loop, loop.create_future()
        self._ensure_thread()
        self._queue.put(pending)
        await pending.future
        if isinstance(pending.outcome, Exception):
            raise pending.outcome
        if pending.outcome is None:  # the writer died (write itself never raises)
            raise RuntimeError("the submission was not written")
        return pending.outcome

    def close(self) -> None:
        """Stop the writer once it has written what was queued before."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(10)
            self._thread = None

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._start:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="ideabench-intake", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            try:
                self.write(batch)
                self.batches += 1
            finally:  # (write never raises; whatever happens, no request waits forever)
                _wake(batch)
            if stop:
                return

    def write(self, items: list[Pending]) -> None:
        """Write ``items`` in one transaction and set each one's ``outcome`` (never raises)."""
        try:
            self._write_together(items)
        except Exception as exc:  # noqa: BLE001 - every error becomes an answer
            if database_lost(exc) or len(items) == 1:
                if not database_lost(exc):
                    log.exception("a submission failed to be written")
                for item in items:
                    item.outcome = exc
                return
            for item in items:  # no body fails another: each alone
                self.write([item])

    def _write_together(self, items: list[Pending]) -> None:
        for item in items:
            item.outcome, item.replay = None, False
        with self.sessions() as session:
            now = db_now(session)  # created / enqueued stamps order the queue across API hosts
            connection = session.connection()
            sqlite_db = connection.dialect.name == "sqlite"
            batch = _Batch(items)
            counted = sorted({p.key_id for p in items if p.counted and p.values is not None})
            if counted:  # lock the keys, then count (a statement of its own: see the module)
                connection.execute(_LOCK_KEYS[sqlite_db], {"keys": counted})
            pairs = sorted({p.pair for p in items if p.pair is not None})
            if pairs:
                batch.existing = _jobs_of(session, pairs)
            if counted:
                midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
                batch.counts = {key: (active, today) for key, active, today in connection.execute(
                    _COUNTS, {"keys": counted, "midnight": midnight})}
            for offset, item in enumerate(items):
                if item.values is not None:  # distinct, in arrival order, on the clock of the counts
                    item.values["created_at"] = now + dt.timedelta(microseconds=offset)
            rows = self._decide(batch, now)
            if rows:
                # In one order of (key, Idempotency-Key): two batches that wait on each other's
                # uncommitted keys (a key with no cap is not locked) would deadlock otherwise.
                rows.sort(key=lambda row: (row["submitter_id"], row["idempotency_key"] or ""))
                inserted = {row.id for row in connection.execute(_INSERTS[sqlite_db], rows)}
                for item in items:
                    if item.accepted and item.values is not None and item.values["id"] not in inserted:
                        item.replay = True  # lost an insert race on its Idempotency-Key
            session.commit()
            try:
                self._answer(session, batch)  # (after the commit: no lock is held while it reads)
            except Exception as exc:  # noqa: BLE001 - committed: never written again by a retry
                if not database_lost(exc):
                    log.exception("submissions written but not answered")
                for item in items:
                    if item.outcome is None:
                        item.outcome = exc
            # (closing the session ends its reads without expiring the jobs they loaded)

    def _decide(self, batch: _Batch, now: dt.datetime) -> list[dict[str, Any]]:
        """Each item's fate in arrival order; the rows to insert."""
        rows: list[dict[str, Any]] = []
        added: Counter[str] = Counter()
        made: set[tuple[str, str]] = set()
        for item in batch.items:
            pair = item.pair
            if pair is not None and (pair in batch.existing or pair in made):
                item.replay = True  # a retry: answered with the job (``_answer``)
                continue
            if item.values is None:
                item.outcome = item.error
                continue
            if item.counted:
                active, today = batch.counts.get(item.key_id, (0, 0))
                refusal = self.fair_use.refusal(active + added[item.key_id], today + added[item.key_id], now,
                                                cap=item.cap, quota=item.quota)
                if refusal is not None:
                    item.outcome = refusal
                    continue
            added[item.key_id] += 1
            if pair is not None:
                made.add(pair)
            rows.append(item.values)
        return rows

    def _answer(self, session: Session, batch: _Batch) -> None:
        """The answers of the accepted items and of the retries."""
        made = {p.pair: p for p in batch.items if p.accepted and p.pair is not None}
        missing = [pair for p in batch.items if p.replay and (pair := p.pair) is not None
                   and pair not in batch.existing and pair not in made]
        if missing:  # an insert race lost to another process: read the winner
            batch.existing.update(_jobs_of(session, missing))
        for item in batch.items:
            try:
                if item.accepted and item.values is not None:
                    assert item.plan is not None  # set with the values (prepare)
                    item.outcome = service.submitted(session, Job(**item.values), False, item.plan, item.card,
                                                     self.estimator)
                elif item.replay and item.pair is not None:
                    first = made.get(item.pair)
                    job = batch.existing.get(item.pair) or (Job(**first.values) if first and first.values else None)
                    item.outcome = (service.replay(session, job, item.digest, self.estimator)
                                    if job is not None else item.error or RuntimeError("a replay without its job"))
            except (ApiError, BenchError) as exc:
                item.outcome = exc


async def prepare(
    caller: Caller, body: IdeaSubmission, *, idempotency_key: str | None, settings: Settings, fair_use: FairUse,
    sessions: sessionmaker[Session], request_id: str | None, body_bytes: int,
) -> Pending:
    """A submission checked and made into its row (``check``). A small one on a built-in track
    (a request body of at most ``INLINE_BODY_BYTES``) is checked here, which costs less than a
    thread hop (about 1 ms for a track's example idea) where the last read of the workers' beats
    is fresh (``tracks_service.cached_workers``); a larger one in the thread pool, where it cannot
    stall this process's other requests (a 16 KB file of tiny statements takes 0.3 s), and one
    that must read the database (a custom track, the workers' beats), too."""
    args = (caller, body, idempotency_key, settings, fair_use, sessions, request_id)
    if (body_bytes <= INLINE_BODY_BYTES and is_builtin(body.track)
            and tracks_service.workers_fresh(settings, body.device or settings.default_job_device)):
        return check(*args)
    return await run_in_threadpool(check, *args)


def check(
    caller: Caller, body: IdeaSubmission, idempotency_key: str | None, settings: Settings, fair_use: FairUse,
    sessions: sessionmaker[Session], request_id: str | None,
) -> Pending:
    """The static checks and the row of a submission. A refused one raises, unless it has an
    Idempotency-Key: a retry of a submission that made its job is answered with that job even
    where the same body would now be refused (the track deprecated), so the writer decides."""
    if body.n_seeds is not None and not caller.is_operator:
        raise ApiError(403, ApiCode.N_SEEDS_FIXED,
                       "n_seeds is fixed per track; an agent's submission may not set it.")
    cap, quota = (None, None) if caller.is_operator else fair_use.limits_of(caller.max_active_jobs,
                                                                            caller.daily_job_quota)
    pending = Pending(caller.key_id, idempotency_key, service.request_digest(body), None, cap=cap, quota=quota)
    try:
        if is_builtin(body.track):  # it runs where a live worker of the submission's queue can run it
            workers = tracks_service.cached_workers(sessions, settings, body.device or settings.default_job_device)
            track, card = body.track, tracks_service.runnable_builtin(body.track, workers)
        else:
            with sessions() as session:
                track, card = tracks_service.resolve_for_job(session, body.track)
        checked = service.validate_submission(body, settings, track, card)
        if (body.device or settings.default_job_device) == "gpu":
            with sessions() as session:
                served = health_repository.queue_served(session, "gpu", settings.worker_seen_s)
            if not served:  # it would wait in the gpu queue for a worker that does not exist
                raise ApiError(409, ApiCode.NO_GPU_WORKER, f"No GPU worker that may judge was seen in the last "
                               f"{settings.worker_seen_s:g} s, so a job on the gpu queue would wait forever.")
    except (BenchError, ApiError) as exc:
        if idempotency_key is None:
            raise
        pending.error = exc
        return pending
    pending.values = {
        "id": new_id("job"),
        "status": JobStatus.QUEUED.value,
        "queue": body.device or settings.default_job_device,
        "track": checked.track,
        "name": body.name,
        "hypothesis": body.hypothesis,
        "idea_code": body.code,
        "baseline_code": body.baseline_code,
        "n_seeds": body.n_seeds,
        "hparams": body.hparams,
        "mechanism": body.mechanism,
        "submitter_id": caller.key_id,
        "idempotency_key": idempotency_key,
        "family": checked.family,
        "request_id": request_id,
        "request_sha256": pending.digest,
        "callback_url": body.callback_url,
        "callback_state": webhooks.PENDING if body.callback_url else None,
        "callback_attempts": 0,
        "runs_done": 0,
        "attempts": 0,
        "cancel_requested": False,
        "created_at": None,  # stamped by the writer, in the order it writes
        "enqueued_at": None,  # not sent: a worker's dispatcher sends it (workers/reconciler.py)
    }
    pending.plan = service.run_plan(checked.card, checked.hparams, body.n_seeds, checked.matched_configs)
    pending.card = checked.card
    return pending


def _jobs_of(session: Session, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], Job]:
    """The jobs that these (key, Idempotency-Key) pairs made, by pair."""
    stmt = select(Job).where(tuple_(Job.submitter_id, Job.idempotency_key).in_(pairs))
    return {(j.submitter_id, str(j.idempotency_key)): j for j in session.scalars(stmt)}


def _wake(batch: list[Pending]) -> None:
    """Resolve each item's future in its own loop: one wake-up call per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for item in batch:
        if item.loop is not None and item.future is not None:
            by_loop.setdefault(item.loop, []).append(item.future)
    for loop, futures in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, futures)
        except RuntimeError:  # that loop has closed (its request went away)
            pass


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


_KEYS: BindParameter[Any] = bindparam("keys", expanding=True)
# Postgres: lock the keys' rows in one order (no two batches deadlock), FOR NO KEY UPDATE:
# it orders the batches of one key but not the foreign-key checks (FOR KEY SHARE) of the jobs
# that other batches insert for it (FOR UPDATE would; with a key counted by one API process
# and not by another, whose key cache is older, two batches could then wait on each other).
# SQLite: a write that changes nothing, which takes the database's write lock before the counts.
_LOCK_KEYS = (
    select(ApiKey.id).where(ApiKey.id.in_(_KEYS)).order_by(ApiKey.id).with_for_update(key_share=True),
    update(ApiKey).where(ApiKey.id.in_(_KEYS)).values(id=ApiKey.id),
)
# Each key's jobs in flight (ix_jobs_submitter_status) and since midnight
# (ix_jobs_submitter_created), each read from its own index: correlated subqueries, one
# statement for the batch. One count(*) FILTER over all of a key's jobs read its whole
# history on every submission: 51 ms for a key with 100,000 jobs, with the key locked.
_COUNTS = select(
    ApiKey.id,
    select(func.count()).where(
        Job.submitter_id == ApiKey.id, Job.status.in_([JobStatus.QUEUED.value, JobStatus.RUNNING.value]),
    ).scalar_subquery(),
    select(func.count()).where(
        Job.submitter_id == ApiKey.id, Job.created_at >= bindparam("midnight"),
    ).scalar_subquery(),
).where(ApiKey.id.in_(_KEYS))
_INSERTS = (
    postgresql.insert(JOBS).on_conflict_do_nothing(index_elements=["submitter_id", "idempotency_key"])
    .returning(JOBS.c.id),
    sqlite.insert(JOBS).on_conflict_do_nothing(index_elements=["submitter_id", "idempotency_key"])
    .returning(JOBS.c.id),
)
