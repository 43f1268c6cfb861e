"""The parent's .npy reader (bench.npy): what np.save writes for allowed dtypes reads back
exactly, anything else is refused, and no numpy/ast parser runs (CI failed once on a CPython 3.11
SystemError when two threads parsed .npy headers with ast.literal_eval at once)."""

from __future__ import annotations

import ast
import io
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib import format as npy_format

from bench.captured import pack, unpack
from bench.errors import BenchError
from bench.npy import NPY_DESCRS, parse_npy_header, read_npy
from bench.runner import load_npy


def saved(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@pytest.fixture
def no_ast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any call into numpy's header parser or ast.literal_eval fails the test."""
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("parsed with numpy/ast")
    monkeypatch.setattr(ast, "literal_eval", refuse)
    monkeypatch.setattr(npy_format, "read_array_header_1_0", refuse)
    monkeypatch.setattr(npy_format, "read_array_header_2_0", refuse)


@pytest.mark.parametrize("descr", sorted(NPY_DESCRS))
@pytest.mark.parametrize("shape", [(), (0,), (5,), (1, 32), (2, 3, 4)])
def test_every_allowed_dtype_and_shape_reads_back_exactly(descr: str, shape: tuple[int, ...], no_ast: None,
                                                          tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    array = (rng.normal(size=shape) * 100).astype(np.dtype(descr))
    data = saved(array)
    out = read_npy(data)
    assert out.shape == shape and out.dtype == array.dtype and out.tobytes() == array.tobytes()
    assert out.flags.writeable
    path = tmp_path / "a.npy"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        loaded = load_npy(fh, "idea", "prediction file")
    assert loaded.shape == shape and loaded.tobytes() == array.tobytes() and loaded.flags.writeable


def test_a_packed_model_unpacks_without_numpy_parsing(no_ast: None) -> None:
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False])]
    expected = ((((2, 3)), "float32"), ((2,), "bool"))
    out = unpack(pack(arrays), expected)
    assert out is not None and all(np.array_equal(a, b) for a, b in zip(out, arrays, strict=True))
    assert unpack(b"not a zip", expected) is None


def header(descr: str = "<f4", fortran: bool = False, shape: str = "(3,)", version: tuple[int, int] = (1, 0)) -> bytes:
    text = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"
    text += " " * (63 - (len(text) + 10) % 64) + "\n"
    size = len(text).to_bytes(2 if version == (1, 0) else 4, "little")
    return b"\x93NUMPY" + bytes(version) + size + text.encode("latin-1")


@pytest.mark.parametrize("bad", [
    header("'<U4'"), header("'|O'"), header("'<M8[s]'"), header("[('a', '<f4')]"),  # not a number
    header(fortran=True),
    header(shape="(3, )"), header(shape="(03,)"), header(shape="(-3,)"), header(shape="(3,),'x':(1,)"),
    header(version=(3, 0)),
    header()[:20],  # cut
    b"\x93NUMPY\x01\x00\xff\xff" + b" " * 100,  # a header longer than the bench reads
    b"PK\x03\x04" + header()[4:],
])
def test_headers_np_save_does_not_write_for_an_allowed_array_are_refused(bad: bytes, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        parse_npy_header(bad)
    path = tmp_path / "bad.npy"
    path.write_bytes(bad + b"\0" * 64)
    with open(path, "rb") as fh, pytest.raises(BenchError) as exc:
        load_npy(fh, "idea", "prediction file")
    assert exc.value.code.value == "training_error"


def test_another_byte_order_is_named_as_the_ideas_fault(tmp_path: Path) -> None:
    data = saved(np.arange(4, dtype=">f4"))
    with pytest.raises(ValueError):
        read_npy(data)
    path = tmp_path / "big.npy"
    path.write_bytes(data)
    with open(path, "rb") as fh, pytest.raises(BenchError) as exc:
        load_npy(fh, "idea", "prediction file")
    assert "byte order" in exc.value.message


def test_the_data_must_be_all_there(tmp_path: Path) -> None:
    data = saved(np.arange(10, dtype=np.float64))
    with pytest.raises(ValueError):
        read_npy(data[:-8])
    with pytest.raises(ValueError):
        read_npy(data + b"\0" * 8)
    path = tmp_path / "short.npy"
    path.write_bytes(data[:-8])
    with open(path, "rb") as fh, pytest.raises(BenchError):
        load_npy(fh, "idea", "prediction file")


def test_many_threads_read_at_once(no_ast: None) -> None:
    data = saved(np.ones((4, 8), dtype=np.float32))
    errors: list[BaseException] = []

    def read_many() -> None:
        try:
            for _ in range(300):
                assert read_npy(data).sum() == 32
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)
    threads = [threading.Thread(target=read_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_what_the_parser_accepts_numpy_reads_the_same_way(data: st.DataObject) -> None:
    """Differential fuzz: mutate a valid header byte by byte; whatever ``parse_npy_header``
    admits, numpy's own parser reads as the same shape and dtype at the same offset (a
    hostile child cannot make the two disagree about what a file holds)."""
    descr = data.draw(st.sampled_from(sorted(NPY_DESCRS)))
    shape = tuple(data.draw(st.lists(st.integers(0, 5), max_size=3)))
    raw = bytearray(saved(np.zeros(shape, dtype=np.dtype(descr))))
    for _ in range(data.draw(st.integers(0, 3))):
        raw[data.draw(st.integers(0, min(len(raw), 128) - 1))] = data.draw(st.integers(0, 255))
    try:
        ours = parse_npy_header(bytes(raw))
    except ValueError:
        return
    fh = io.BytesIO(bytes(raw))
    version = npy_format.read_magic(fh)
    read = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
    theirs_shape, fortran, theirs_dtype = read(fh)
    assert (ours[0], ours[1], ours[2]) == (tuple(theirs_shape), theirs_dtype, fh.tell()) and not fortran


# Where np.load may still run: in a child's one thread, or in a test's main thread. Every other
# module under bench/ and tests/ may run in the parent's arm threads (the scripted executors of
# tests/bench do: CI failed on test_protocol_rules' own np.load in a thread, stop 44).
NP_LOAD_ALLOWED = {"bench/child.py", "bench/capture.py", "tests/security/test_custom_track_binding.py"}


def test_no_np_load_outside_the_listed_files() -> None:
    root = Path(__file__).resolve().parents[2]
    found = set()
    for path in [*root.glob("bench/**/*.py"), *root.glob("tests/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy")):
                found.add(path.relative_to(root).as_posix())
    assert found <= NP_LOAD_ALLOWED, f"np.load outside {sorted(NP_LOAD_ALLOWED)}: use bench.npy.read_npy"
