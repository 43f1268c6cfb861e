"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app.body_limit import BodySizeLimit
from app.checks.routes import router as checks_router
from app.compare.routes import router as compare_router
from app.dashboard.routes import install_dashboard
from app.db import make_engine, make_sessionmaker
from app.discovery.routes import router as discovery_router
from app.errors import install_error_handlers
from app.fair_use import FairUse
from app.health.routes import router as health_router
from app.jobs.estimate import Estimator
from app.jobs.intake import Intake
from app.jobs.routes import router as jobs_router
from app.keys.routes import router as keys_router
from app.keys.service import KeyCache
from app.logs import configure as configure_logs
from app.mcp import install_mcp
from app.metrics import install_metrics
from app.openapi import install_openapi
from app.queue import JobQueue
from app.reports.routes import router as reports_router
from app.request_id import RequestId
from app.settings import Settings
from app.tracks.routes import router as tracks_router
from app.webhooks.sender import WebhookSender

DESCRIPTION = """\
ideabench judges ML ideas: POST an idea file for a track, poll the job, read the
report with its verdicts. Every error is `{"code", "message", "hint"}`.
Authenticate with `Authorization: Bearer <key>`. See docs/api.md for the flow.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    """A new app bound to ``settings`` (default: from the environment)."""
    settings = settings or Settings()
    if settings.log_format == "json":  # (under plain uvicorn too: it loads the factory after its own logging)
        configure_logs(settings.log_format)
    engine = make_engine(settings.database_url)
    queue = JobQueue(settings.broker_url)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        sender = WebhookSender(settings, app.state.sessionmaker) if settings.send_webhooks else None
        if sender is not None:
            sender.start()
        async with mcp_server.session_manager.run():
            yield
        if sender is not None:
            sender.stop()
            sender.join(settings.webhook_timeout_s + 1.0)  # its pass in flight ends within a send's deadline
        app.state.intake.close()
        queue.close()
        engine.dispose()

    app = FastAPI(title="ideabench", version="1", description=DESCRIPTION, lifespan=lifespan)
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = make_sessionmaker(engine)
    app.state.queue = queue
    app.state.estimator = Estimator(settings.estimate_run_s)
    app.state.key_cache = KeyCache(settings.key_cache_s)
    app.state.fair_use = FairUse(settings)
    app.state.intake = Intake(app.state.sessionmaker, settings, app.state.estimator, app.state.fair_use)
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:  # off unless configured: agents call from servers, not browsers
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"],
                           allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID",
                                          "X-Request-ID"],
                           expose_headers=["X-Request-ID", "Retry-After", "Location"])
    install_dashboard(app, settings)
    install_metrics(app, app.state.sessionmaker)  # (its middleware sees every routed request)
    app.add_middleware(RequestId)  # added last: outermost, so every answer carries the id
    for router in (discovery_router, checks_router, jobs_router, reports_router, tracks_router, compare_router, keys_router,
                   health_router):
        app.include_router(router)
    install_openapi(app)
    mcp_server = install_mcp(app)
    return app
