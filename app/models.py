"""Every table, imported in one place so the metadata is complete (Alembic, tests)."""

from __future__ import annotations

from app.checks.models import IdeaCheck
from app.db import Base
from app.health.models import WorkerBeat
from app.jobs.models import Job, JobEvent, JobStatus, WebhookAttempt
from app.keys.models import ApiKey
from app.reports.models import Report, VerdictCount
from app.seeds.models import SeedEpoch
from app.tracks.models import CustomTrackRow

metadata = Base.metadata

__all__ = ["ApiKey", "Base", "IdeaCheck", "CustomTrackRow", "Job", "JobEvent", "JobStatus", "Report", "SeedEpoch", "VerdictCount", "WebhookAttempt", "WorkerBeat",
           "metadata"]
