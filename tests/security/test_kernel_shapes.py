"""Red team: allowlisted ops whose CPU kernels trust sizes a hand-written graph sets.

A capture child writes the graph JSON, so every literal argument of a call (a size, a pad, a
dimension) and every tensor's shape is the submitter's choice; ``build_graph`` checks only that
each argument has its schema's type. After the oneDNN LSTM (``bench.batched_ops._lstm_refused``)
these probes call the allowlisted ops with inconsistent arguments, each graph built with
``bench.graph.build_graph`` and run as the trusted trainer runs it (``Program``). A probe that can
crash runs in a subprocess with a timeout. The holes found, each closed by a guard
(``bench.graph.GUARDS``; the tests were written failing):

- ``native_group_norm.default`` takes N, C and HxW as literals; its kernel checks
  ``X.numel() == N * C * HxW`` in int64, so an HxW of ``3 + 2**61`` (the product wraps to the
  real numel) passes and the kernel walks 2**61 elements past the input: a segfault.
- ``_pad_circular.default`` (and ``pad.default`` with ``"circular"``, ``_pad_enum.default`` with
  mode 2) with a negative pad on one side longer than what it keeps: the output is
  ``new_empty`` memory nobody writes, freed tensors' values (another tensor's -777s) in it.
- ``scaled_dot_product_attention.default`` with a key of fewer rows than the value: the CPU
  flash kernel takes the key's length from the value and reads key rows past the key (a
  neighbour row of a slice; a segfault past the heap), in training and in eval.
- ``max_pool1d.default`` with kernel ``2**62 + 1`` and dilation 4 (the effective kernel wraps to
  1): the kernel loops 2**62 times, so one call stalls the trainer.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch

from bench.errors import BenchError
from bench.graph import build_graph

CPU = torch.device("cpu")
aten = torch.ops.aten


def _doc(calls: list[tuple[str, str, list[Any]]], out: str) -> dict[str, Any]:
    """A graph document as a capture child could write it: one user input ``x``, then
    ``calls`` as (name, op, args) with ``"@name"`` standing for a node, then ``out`` returned."""
    def encode(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("@"):
            return {"$node": value[1:]}
        if isinstance(value, list):
            return [encode(v) for v in value]
        return value

    nodes: list[dict[str, Any]] = [{"name": "x", "op": "placeholder"}]
    for name, target, args in calls:
        nodes.append({"name": name, "op": "call_function", "target": target, "args": encode(args),
                      "kwargs": {}})
    nodes.append({"name": "output", "op": "output", "args": [[{"$node": out}]]})
    return {"format": 1, "inputs": [{"kind": "user", "name": "x", "target": ""}],
            "outputs": [{"kind": "user", "target": out}], "nodes": nodes}


def _run(doc: dict[str, Any], x: torch.Tensor) -> torch.Tensor:
    """The graph built as the trainer builds it and run on ``x`` (``BenchError`` if refused)."""
    program, _ = build_graph(doc, CPU)
    out = program(x)[0]
    assert isinstance(out, torch.Tensor)
    return out


def _in_child(body: str, timeout: float = 20.0) -> tuple[int, str]:
    """``body`` run in a fresh interpreter (with ``_doc`` and ``_run``, a ``refused`` context that
    prints REFUSED for BenchError/RuntimeError): its exit status (negative for a signal, -999 when
    it ran past ``timeout``) and its output."""
    code = textwrap.dedent("""
        import contextlib, sys, torch
        from bench.errors import BenchError
        from tests.security.test_kernel_shapes import _doc, _run
        aten = torch.ops.aten

        @contextlib.contextmanager
        def refused():
            try:
                yield
            except (BenchError, RuntimeError) as exc:
                print("REFUSED", str(exc)[:200], flush=True)
                sys.exit(0)
    """) + textwrap.dedent(body)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return -999, "timed out"
    return done.returncode, done.stdout + done.stderr[-2000:]


# -- native_group_norm: N, C, HxW trusted ---------------------------------------------------
def test_group_norm_sizes_that_overflow_to_the_numel_are_refused() -> None:
    """HxW = 3 + 2**61: 2 * 4 * HxW wraps to 24, the input's numel; the kernel reads and writes
    2**61 elements a group. Must raise, not kill the trainer."""
    rc, out = _in_child("""
        doc = _doc([("gn", "aten.native_group_norm.default", ["@x", None, None, 2, 4, 3 + 2**61, 2, 1e-5]),
                    ("y", "operator.getitem", ["@gn", 0])], "y")
        with refused():
            y = _run(doc, torch.randn(2, 4, 3))
            print("RAN", tuple(y.shape), flush=True)
    """)
    assert rc == 0 and "REFUSED" in out, (rc, out[-400:])


def test_group_norm_sizes_that_disagree_with_the_input_are_refused() -> None:
    """Without the overflow, aten checked the product (a passing probe: sizes off by a factor);
    the guard (bench.graph._group_norm_sizes) now refuses them first."""
    for n, c, hxw in ((2, 4, 30), (20, 4, 3), (1, 4, 3)):
        doc = _doc([("gn", "aten.native_group_norm.default", ["@x", None, None, n, c, hxw, 2, 1e-5]),
                    ("y", "operator.getitem", ["@gn", 0])], "y")
        with pytest.raises(RuntimeError, match="N, C and HxW must be the input's"):
            _run(doc, torch.randn(2, 4, 3))


# -- circular pad: uninitialised output ------------------------------------------------------
def _leaks(target: str, extra: list[Any], pad: list[int]) -> list[float]:
    """The values of a circular pad of (1, 1, 5) distinct values that are not among them, after
    a freed tensor of -777s (what the trainer's heap might hold: an earlier batch, labels)."""
    x = torch.arange(1.0, 6.0).reshape(1, 1, 5)
    doc = _doc([("y", target, ["@x", pad, *extra])], "y")
    program, _ = build_graph(doc, CPU)  # the graph is accepted as it stands
    found: list[float] = []
    for _ in range(20):
        junk = torch.full((1, 1, 5), -777.0)
        del junk
        try:
            y = program(x)[0]
        except RuntimeError:
            return []
        found += [v for v in y.flatten().tolist() if v not in x.flatten().tolist()]
    return found


@pytest.mark.parametrize(("target", "extra"), [
    ("aten._pad_circular.default", []),
    ("aten.pad.default", ["circular", None]),
    ("aten._pad_enum.default", [2, None]),
])
@pytest.mark.parametrize("pad", [[-5, 5], [-7, 3], [4, -5]])
def test_a_circular_pad_that_keeps_less_than_it_wraps_reads_no_uninitialised_memory(
        target: str, extra: list[Any], pad: list[int]) -> None:
    """Pads (-5, 5) of a length 5: aten's "wraps more than once" check passes (5 <= 5), the kept
    part is empty, and the 5 outputs are ``new_empty`` memory (the -777s of a freed tensor)."""
    assert _leaks(target, extra, pad) == []


@pytest.mark.parametrize("pad", [[-2, 3], [2, -3], [3, 3], [-1, -1], [5, 0]])
def test_circular_pads_within_what_they_keep_give_the_input_values(pad: list[int]) -> None:
    """Passing probe: a negative pad no longer than the length minus the other side's wrap."""
    assert _leaks("aten._pad_circular.default", [], pad) == []


@pytest.mark.parametrize(("target", "pad"), [
    ("aten.reflection_pad1d.default", [-4, 3]),
    ("aten.replication_pad1d.default", [-4, 7]),
    ("aten.replication_pad1d.default", [7, -11]),
])
def test_reflection_and_replication_pads_with_negative_sides_stay_in_the_input(target: str, pad: list[int]) -> None:
    assert _leaks(target, [], pad) == []


# -- scaled_dot_product_attention: the key's rows trusted ---------------------------------
def _attention_doc(key_rows: int) -> dict[str, Any]:
    """q = v = x (1, 1, 6, 8); k = x's first ``key_rows`` rows (a slice: its storage is x's)."""
    return _doc([("k", "aten.slice.Tensor", ["@x", 2, 0, key_rows]),
                 ("y", "aten.scaled_dot_product_attention.default", ["@x", "@k", "@x"])], "y")


@pytest.mark.parametrize("grad", [False, True])
def test_attention_reads_no_key_row_past_the_key(grad: bool) -> None:
    """A key of 2 rows, a value of 6: the flash kernel reads key rows 2..5, which are x's own
    rows 2..5 here (the key is a slice). Its output must not be attention over the whole of x;
    aten's math form refuses the call."""
    torch.manual_seed(0)
    x = torch.randn(1, 1, 6, 8, requires_grad=grad)
    try:
        y = _run(_attention_doc(2), x)
    except (BenchError, RuntimeError):
        return
    over_all = aten.scaled_dot_product_attention.default(x, x, x)
    assert not torch.allclose(y, over_all), "the key's neighbour rows were read"


def test_attention_with_a_one_row_key_and_a_long_value_does_not_crash() -> None:
    """A key of one row and a value (the input) of 2**24: the kernel reads 2**24 key rows."""
    rc, out = _in_child("""
        doc = _doc([("q", "aten.slice.Tensor", ["@x", 2, 0, 4]),
                    ("s", "aten.slice.Tensor", ["@x", 2, 0, 1]),
                    ("k", "aten.clone.default", ["@s"]),  # a key of its own: one row, 32 bytes
                    ("y", "aten.scaled_dot_product_attention.default", ["@q", "@k", "@x"])], "y")
        with refused():
            y = _run(doc, torch.randn(1, 1, 1 << 24, 8))
            print("RAN", tuple(y.shape), flush=True)
    """)
    assert rc == 0, (rc, out[-400:])


def test_attention_of_other_batches_or_heads_broadcasts_as_the_math_form() -> None:
    """Passing probe: keys and values of one batch row or one head go to the math form, which
    broadcasts them (no flash kernel reading a row it does not have)."""
    torch.manual_seed(0)
    q = torch.randn(2, 3, 7, 8)
    for shape in ((1, 3, 9, 8), (2, 1, 9, 8)):
        k, v = torch.randn(shape), torch.randn(shape)
        y = aten.scaled_dot_product_attention.default(q, k, v)
        math = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
        assert torch.allclose(y, math, atol=1e-5)


# -- max_pool1d: a kernel of 2**62 + 1 taps --------------------------------------------------
def test_a_max_pool_whose_dilated_kernel_wraps_is_refused_quickly() -> None:
    """Kernel 2**62 + 1, dilation 4: (k - 1) * d wraps to 0, every check passes and the kernel
    loops 2**62 times per output (the 2-D and 3-D pools and max_pool1d_with_indices refuse it)."""
    rc, out = _in_child("""
        doc = _doc([("y", "aten.max_pool1d.default", ["@x", [2**62 + 1], [1], [0], [4], True])], "y")
        with refused():
            y = _run(doc, torch.randn(1, 2, 5))
            print("RAN", tuple(y.shape), flush=True)
    """, timeout=8.0)
    assert rc == 0 and "REFUSED" in out, (rc, out[-400:])


@pytest.mark.parametrize(("target", "args"), [
    ("aten.max_pool1d_with_indices.default", [[2**62 + 1], [1], [0], [4], True]),
    ("aten.max_pool2d_with_indices.default", [[2**62 + 1, 1], [1, 1], [0, 0], [4, 1], True]),
    ("aten.avg_pool2d.default", [[2**63 - 1, 1], [1, 1], [2**62, 0], True, False, None]),
])
def test_other_pools_refuse_kernels_that_overflow(target: str, args: list[Any]) -> None:
    """Refused when the graph is built (no integer argument past 2**31: ``bench.graph.check_call``),
    and by the kernels themselves, behind that wall."""
    x = torch.randn(1, 2, 5) if "1d" in target else torch.randn(1, 2, 5, 5)
    doc = _doc([("p", target, ["@x", *args])], "p")
    with pytest.raises(BenchError, match="beyond 2"):
        _run(doc, x)
    with pytest.raises(RuntimeError, match="overflow"):
        getattr(aten, target.split(".")[1]).default(x, *args)


# -- stopped: what the kernels check ---------------------------------------------------------
@pytest.mark.parametrize(("call", "match"), [
    (lambda: aten.conv2d.default(torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3), None,
                                 [1, 1], [2**62, 2**62], [2**62, 2**62]), "padding"),
    (lambda: aten.convolution.default(torch.randn(1, 2, 5, 5), torch.randn(2, 3, 3, 3), None, [2, 2],
                                      [0, 0], [1, 1], True, [5, 5], 1), "output padding"),
    (lambda: aten.native_channel_shuffle.default(torch.randn(2, 5, 3, 3), 2), "divisible"),
    (lambda: aten._cdist_forward.default(torch.randn(3, 4), torch.randn(5, 4), 2.0, 7), "modes"),
    (lambda: aten.multilabel_margin_loss_forward.default(
        torch.randn(2, 4), torch.tensor([[7, 1, -1, 0], [3, -1, 0, 0]]), 1), "out of range"),
    (lambda: aten.multi_margin_loss.default(torch.randn(2, 4), torch.tensor([1, 3]), 1, 1.0,
                                            torch.ones(2), 1), "weight"),
    (lambda: aten.grid_sampler_2d.default(torch.randn(1, 2, 5, 5), torch.randn(1, 4, 4, 3), 0, 0, False),
     "grid"),
    (lambda: aten.index_add.default(torch.randn(4, 6), 0, torch.tensor([0, 1]), torch.randn(2, 2)),
     "shape"),
    (lambda: aten.gather.default(torch.randn(4, 6), 1, torch.tensor([[0, 9]])), "out of bounds"),
    (lambda: aten.gru_cell.default(torch.randn(3, 5), torch.randn(1, 6), torch.randn(18, 5),
                                   torch.randn(18, 6), None, None), "batch size"),
    (lambda: aten.rnn_tanh.input(torch.randn(4, 3, 5), torch.randn(1, 1, 6),
                                 [torch.randn(6, 5), torch.randn(6, 6)], False, 1, 0.0, False, False,
                                 False), "shape"),
])
def test_kernels_that_check_what_a_graph_sets(call: Any, match: str) -> None:
    with pytest.raises((RuntimeError, IndexError), match=match):
        call()


def test_grid_sampler_with_nan_and_huge_grids_reads_only_the_input() -> None:
    """NaN, infinite and huge grid coordinates, every mode: outputs from the input or zero (NaN
    from the NaN coordinates themselves), never another value."""
    torch.manual_seed(0)
    x = torch.arange(1.0, 51.0).reshape(1, 2, 5, 5)
    for value in (float("nan"), float("inf"), -float("inf"), 1e30, -1e18):
        grid = torch.full((1, 4, 4, 2), value)
        for mode in (0, 2):  # bilinear and bicubic interpolate; nearest picks
            for padding in (0, 1, 2):
                y = aten.grid_sampler_2d.default(x, grid, mode, padding, False)
                assert not (y.abs() > 1e4).any(), (value, mode, padding)
        y = aten.grid_sampler_2d.default(x, grid, 1, 1, False)
        assert set(y.flatten().tolist()) <= set(x.flatten().tolist()) | {0.0}, value


def test_the_math_attention_kernel_runs_behind_attentions_guard() -> None:
    """``_scaled_dot_product_attention_math`` is on the allowlist (memory-safe: its products
    check their shapes; a review) and runs behind the same guard as the public op: grouped-query
    heads and a key of other rows than the value are refused before it runs."""
    doc = _doc([("k", "aten.slice.Tensor", ["@x", 2, 0, 2]),
                ("a", "aten._scaled_dot_product_attention_math.default", ["@x", "@k", "@x"]),
                ("y", "operator.getitem", ["@a", 0])], "y")
    with pytest.raises(RuntimeError, match="same rows"):
        _run(doc, torch.randn(1, 1, 6, 8))
    honest = _doc([("a", "aten._scaled_dot_product_attention_math.default", ["@x", "@x", "@x"]),
                   ("y", "operator.getitem", ["@a", 0])], "y")
    x = torch.randn(1, 2, 6, 8)
    program, _ = build_graph(honest, CPU)
    assert torch.equal(program(x)[0], aten._scaled_dot_product_attention_math.default(x, x, x)[0])
