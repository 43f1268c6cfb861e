"""Fair use: per-key request rate, jobs in flight and jobs per UTC day (429 + Retry-After).

The caps on jobs are the service's settings, or a key's own overrides set by an operator
(PATCH /v1/keys/{key_id}).

The request rate is counted by the ``limits`` library (a moving window; in memory for the
embedded service and one API process, in Redis when ``rate_limit_storage`` names it, so
that several API processes share one count), with its asyncio API: the count is taken in
the event loop without blocking it (and, in memory, without the timer thread the
synchronous memory storage starts every few milliseconds). Jobs in flight and jobs per day are counted
in the database at submission, where the jobs are, under the key's lock
(``app.jobs.intake``). Operators are exempt: they run the
service (and its tests and load benchmarks).
"""

from __future__ import annotations

import datetime as dt
import math
import time

from limits import RateLimitItem, parse, storage
from limits.aio import strategies

from app.errors import ApiCode, ApiError
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

    def refusal(self, active: int, today: int, now: dt.datetime, *, cap: int | None, quota: int | None
                ) -> ApiError | None:
        """The 429 (``too_many_jobs`` / ``daily_quota``) for another job of a key that has
        ``active`` jobs in flight and made ``today`` since midnight UTC, or None. ``cap`` and
        ``quota`` are the key's limits (0: none); see ``limits_of``. The counts are taken
        under the key's lock (``app.jobs.intake``)."""
        if cap and active >= cap:
            return ApiError(429, ApiCode.TOO_MANY_JOBS,
                            f"This key has {active} jobs queued or running; the limit is {cap}.",
                            headers={"Retry-After": "30"})
        if quota and today >= quota:
            midnight = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
            wait = math.ceil((midnight + dt.timedelta(days=1) - now).total_seconds())
            return ApiError(429, ApiCode.DAILY_QUOTA,
                            f"This key has submitted {today} jobs today (UTC); its daily quota is {quota}.",
                            headers={"Retry-After": str(max(1, wait))})
        return None

    def limits_of(self, max_active: int | None, daily_quota: int | None) -> tuple[int, int]:
        """A key's (cap on jobs in flight, daily quota): its own overrides, else the settings."""
        cap = self.settings.max_active_jobs_per_key if max_active is None else max_active
        quota = self.settings.daily_job_quota_per_key if daily_quota is None else daily_quota
        return cap, quota
