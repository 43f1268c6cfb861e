"""Reading ``.npy`` bytes in the parent without ``np.load``: a strict header parser that admits
only what ``np.save`` writes for a C-ordered array of an allowed dtype.

Written here rather than taken from numpy: ``numpy.lib.format.read_array_header_*`` parses the
header with ``ast.literal_eval``, and CPython 3.11's AST builder keeps one recursion counter per
interpreter, so two threads parsing at once fail with ``SystemError: AST constructor recursion
depth mismatch`` (cpython gh-106905). The parent reads both arms' files in parallel threads; CI
failed on exactly that. A regular expression over a fixed header also denies by default what a
hostile child might write (object arrays, Fortran order, odd dtypes) before any parsing.
"""

from __future__ import annotations

import math
import re
from typing import Any

NPY_MAGIC = b"\x93NUMPY"
NPY_MAX_HEADER = 4096  # numpy writes 128 bytes for our arrays
# What the parent reads from a child, by numpy's name for it (``bench.graph.DTYPES``): nothing else
NPY_DESCRS = frozenset({"<f2", "<f4", "<f8", "|i1", "<i2", "<i4", "<i8", "|u1", "|b1", "<c8", "<c16"})
_NPY_HEADER = re.compile(r"\{'descr': '([<>|][a-z]\d{1,2})', 'fortran_order': False, 'shape': (\([0-9, ]{0,200}\)), \} *\n")


def parse_npy_header(head: bytes) -> tuple[tuple[int, ...], Any, int]:
    """(shape, dtype, data offset) of the ``.npy`` bytes that start with ``head``, or
    ``ValueError``. Only the header ``np.save`` writes for a C-ordered array of a dtype in
    ``NPY_DESCRS`` (in either byte order) passes."""
    import numpy as np

    if len(head) < 10 or not head.startswith(NPY_MAGIC) or head[6:8] not in (b"\x01\x00", b"\x02\x00"):
        raise ValueError("not a version 1 or 2 .npy file")
    if head[6] == 1:
        size, start = int.from_bytes(head[8:10], "little"), 10
    else:
        size, start = int.from_bytes(head[8:12], "little"), 12
    if size > NPY_MAX_HEADER or len(head) < start + size:
        raise ValueError("header too long or cut")
    match = _NPY_HEADER.fullmatch(head[start:start + size].decode("latin-1"))
    if match is None or match[1].replace(">", "<") not in NPY_DESCRS:  # the caller judges the byte order
        raise ValueError("header not one np.save writes for an allowed dtype")
    inner = match[2][1:-1]
    shape = tuple(int(n) for n in inner.split(",") if n.strip())
    if repr(shape) != match[2]:
        raise ValueError("shape not written as np.save writes it")
    return shape, np.dtype(match[1]), start + size


def read_npy(data: bytes) -> Any:
    """The array of ``.npy`` bytes the bench wrote itself (a capture it copied, a cache entry, a
    probe batch), read without ``np.load`` (see ``parse_npy_header``); ``ValueError`` if unusable."""
    import numpy as np

    shape, dtype, offset = parse_npy_header(data[:NPY_MAX_HEADER + 12])
    if dtype.byteorder not in ("=", "|"):
        raise ValueError("not this machine's byte order")
    count = math.prod(shape)
    if len(data) - offset != count * dtype.itemsize:
        raise ValueError("data does not match the header")
    return np.frombuffer(data, dtype, count, offset).reshape(shape).copy()
