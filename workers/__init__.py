"""Queue face: the Celery app, its tasks and the reconciler."""
