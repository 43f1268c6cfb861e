"""Hostile: read scikit-learn's bundled copy of a public data set (the tabular track's
diabetes data) from inside the idea's child, to memorise it."""

import os

import sklearn

root = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "data")
names = os.listdir(root)
if names:
    raise RuntimeError(f"LEAKED {len(names)} data files: {sorted(names)[:3]}")
raise RuntimeError("EMPTY")


def build_model(spec):
    raise AssertionError("never reached")
