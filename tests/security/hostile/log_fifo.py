"""Hostile: replace the child's log by a FIFO and die; a parent that opens it to read the
tail blocks forever (and keeps renewing the job's lease, so nothing requeues it)."""

import os

os.remove("child.log")
os.mkfifo("child.log")
os._exit(3)


def build_model(spec):
    raise AssertionError("never reached")
