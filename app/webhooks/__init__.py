"""Job-end webhooks."""
