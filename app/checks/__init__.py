"""Checks before the queue (POST /v1/ideas/check): a worker captures and checks an idea without
training it, so an agent fixes most errors before it spends a job (issue 27.5)."""
