"""The Python client of the ideabench API: ``Client`` (sync) and ``AsyncClient``.

Needs only httpx, httpx-sse and standardwebhooks (``pip install ideabench``: no torch, no web stack).
"""

from ideabench_client.client import AsyncClient, Check, Client, Event, Job, verify_webhook
from ideabench_client.errors import (
    AuthError,
    Conflict,
    IdeabenchError,
    InvalidRequest,
    JobFailed,
    NotFound,
    RateLimited,
    Unavailable,
)

__all__ = [
    "AsyncClient", "AuthError", "Check", "Client", "Conflict", "Event", "IdeabenchError", "InvalidRequest", "Job",
    "JobFailed", "NotFound", "RateLimited", "Unavailable", "verify_webhook",
]
