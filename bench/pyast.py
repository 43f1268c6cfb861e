"""One lock for every Python syntax tree the engine and the API build or compile.

CPython 3.11's AST builder keeps its recursion counter per interpreter, not per thread: two
threads building (``ast.parse``) or compiling (``compile(tree, ...)``) a tree at once can fail
with ``SystemError: AST constructor recursion depth mismatch`` (cpython gh-106905). The API
parses submissions in a thread pool, a worker checks ideas beside the job it judges, and a job
reads both arms in parallel threads, so every such call in ideabench goes through this lock
(numpy's ``.npy`` header parser used the same machinery: see ``bench.npy``).
"""

from __future__ import annotations

import ast
import threading

AST_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` under ``AST_LOCK``."""
    with AST_LOCK:
        return ast.parse(source, filename=filename)
