"""Ideas and jobs: submission, status, listing, cancellation, worker-side leases."""
