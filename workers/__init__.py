"""ideabench's queue face: the Celery app, the job runner and the reconciler.

The only place where the database and torch meet: tasks take a job id, claim
the job, call ``bench.judge.judge`` and persist the outcome.
"""
