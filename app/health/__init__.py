"""Liveness and readiness: process up; database, broker and a worker reachable."""
