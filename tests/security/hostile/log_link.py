"""Hostile: replace the child's log by a link to /proc/self/environ and die, so that a parent
that reads the log's tail (for the error message) reads its own environment instead."""

import os

os.remove("child.log")
os.symlink("/proc/self/environ", "child.log")
os._exit(3)


def build_model(spec):
    raise AssertionError("never reached")
