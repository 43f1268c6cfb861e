"""Paired comparison of per-seed numbers: ``bench.stats.compare`` over HTTP."""
