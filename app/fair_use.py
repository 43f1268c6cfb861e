"""Fair use: per-key request rate, jobs in flight and jobs per UTC day (429 + Retry-After).

The caps on jobs are the service's settings, or a key's own overrides set by an operator
(PATCH /v1/keys/{key_id}).

The request rate is counted by the ``limits`` library (a moving window; in memory for the
embedded service and one API process, in Redis when ``rate_limit_storage`` names it, so
that several API processes share one count), with its asyncio API: the count is taken in
the event loop without blocking it (and, in memory, without the timer thread the
synchronous memory storage starts every few milliseconds). Jobs in flight and jobs per day are counted
in the database at submission, where the jobs are. Operators are exempt: they run the
service (and its tests and load benchmarks).
"""

from __future__ import annotations

import datetime as dt
import math
import time

from limits import RateLimitItem, parse, storage
from limits.aio import strategies
from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from app.errors import ApiCode, ApiError
from app.jobs.models import Job, JobStatus
from app.keys.models import ApiKey
from app.settings import Settings


class FairUse:
    """The limits of one API process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.item: RateLimitItem = parse(settings.rate_limit)
        url = settings.rate_limit_storage or "memory://"
        options = {"implementation": "redispy"} if url.startswith(("redis", "rediss")) else {}
        backend = storage.storage_from_string(f"async+{url}", **options)
        self.limiter = strategies.MovingWindowRateLimiter(backend)

    async def check_rate(self, key_id: str) -> None:
        """Count one request of ``key_id``; 429 ``rate_limited`` over ``rate_limit``."""
        if await self.limiter.hit(self.item, key_id):
            return
        reset = (await self.limiter.get_window_stats(self.item, key_id)).reset_time
        wait = max(1, math.ceil(reset - time.time()))
        raise ApiError(429, ApiCode.RATE_LIMITED,
                       f"More than {self.settings.rate_limit} requests from this key.",
                       headers={"Retry-After": str(wait)})

    def check_jobs(self, session: Session, key_id: str, now: dt.datetime, *, max_active: int | None = None,
                   daily_quota: int | None = None) -> None:
        """429 ``too_many_jobs`` / ``daily_quota`` before another job of ``key_id`` is made;
        ``max_active`` / ``daily_quota`` are the key's own overrides (None: the settings).

        The key is locked first (held until the route commits its insert), so concurrent
        submissions of one key are counted one after the other: without it, 24 requests at
        once at a cap of 3 could each count fewer than 3 and get in. Both counts are one
        prepared query.
        """
        cap = self.settings.max_active_jobs_per_key if max_active is None else max_active
        quota = self.settings.daily_job_quota_per_key if daily_quota is None else daily_quota
        if not cap and not quota:
            return
        midnight = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        connection = session.connection()
        connection.execute(_LOCK_KEY[connection.dialect.name == "sqlite"], {"key": key_id})
        active, today = connection.execute(_COUNTS, {"key": key_id, "midnight": midnight}).one()
        if cap and active >= cap:
            raise ApiError(429, ApiCode.TOO_MANY_JOBS,
                           f"This key has {active} jobs queued or running; the limit is {cap}.",
                           headers={"Retry-After": "30"})
        if quota and today >= quota:
            wait = math.ceil((midnight + dt.timedelta(days=1) - now).total_seconds())
            raise ApiError(429, ApiCode.DAILY_QUOTA,
                           f"This key has submitted {today} jobs today (UTC); its daily quota is {quota}.",
                           headers={"Retry-After": str(max(1, wait))})


# Postgres: lock the key's row. SQLite: a write that changes nothing, which begins the
# transaction and takes the database's write lock before the count (a SELECT alone runs
# outside any transaction under pysqlite, and FOR UPDATE renders as nothing there).
_LOCK_KEY = (
    select(ApiKey.id).where(ApiKey.id == bindparam("key")).with_for_update(),
    update(ApiKey).where(ApiKey.id == bindparam("key")).values(id=ApiKey.id),
)
# Two counts that each read only what they count, from an index: the key's jobs in flight
# (ix_jobs_submitter_status) and its jobs since midnight (ix_jobs_submitter_created). One
# count(*) FILTER over all the key's jobs read its whole history on every submission: 51 ms
# for a key with 100,000 jobs, with the key locked (docs/reliability.md).
_COUNTS = select(
    select(func.count()).where(
        Job.submitter_id == bindparam("key"),
        Job.status.in_([JobStatus.QUEUED.value, JobStatus.RUNNING.value]),
    ).scalar_subquery(),
    select(func.count()).where(
        Job.submitter_id == bindparam("key"), Job.created_at >= bindparam("midnight"),
    ).scalar_subquery(),
)
