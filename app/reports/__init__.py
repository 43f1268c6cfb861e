"""Reports: the stored verdicts, their listing with filters, and dashboard summaries."""
