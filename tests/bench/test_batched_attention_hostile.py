"""A hostile review of e1cb68b: the batched attention form (``bench.batched_ops.scaled_dot_product_attention``).

A submitted graph's ``aten.scaled_dot_product_attention.default`` runs in the trusted trainer as
this form, behind its guard (``bench.graph._attention_shapes``, through ``build_graph``'s
``_guarded``), where query, key and value are batched by the trainer's one plain vmap level. The
graph document is the submitter's: any allowlisted op before it (a cast to half, a slice to no
width, a product that overflows), any literal scale that type-checks. Every call the form takes
must give each run what aten's math kernel gives that run alone (what every child computes) to
float rounding, values and gradients; any other call must be aten's; no run's result may depend
on another run's data.

Findings, each fixed in ``bench/batched_ops.py`` (the tests were written failing; each docstring
says how):

- a float16 or bfloat16 attention (a graph casts with ``_to_copy``) ran the products and the
  softmax in half: aten's math kernel computes them in float and rounds the result. Scores past
  65504 (inputs of 200, width 4) gave NaN where each run alone gives finite values (a captured
  model that casts to half before attention trained as a group to NaN, every run diverged, and
  alone trained), and ordinary scores were 14 units of the dtype off. Only float and double take
  the form now (a change to ``bench.graph`` beside this review refuses a graph that names
  float16, which closes the graph's way there too; either suffices, and the graph tests here
  pass with or without it);
- a row whose scores all overflow to -inf (finite inputs of 1e20 and -1e20) had NaN gradients for
  the query and the key: ``_safe_softmax``'s ``where`` sent 0 times the NaN of ``e / e.sum()``
  (0 / 0) back, where aten's ``_safe_softmax`` gives 0. The row is now shifted by 0 and divided
  by at least 1 (every other row's sum is 1 or more), so nothing is masked;
- a query of no width (a graph slices it to 0 columns) raised ZeroDivisionError in Python's
  ``1 / sqrt(0)`` where aten answers (its scale is inf, the products empty);
- a literal int scale past the doubles (``10**400``, which ``check_call`` lets through as a float)
  raised OverflowError in the form before aten judged it; now aten's own refusal.

Stopped (held, tested below): every dtype, layout (transposed, expanded runs, expanded rows, the
runs' dimension anywhere), broadcast leading dimension, size (no query rows, one key row, no
value width, no heads, 300 rows either side, 2-D inputs), scale (int, subnormal, 1e-45, 1e300,
inf, NaN, 0, negative) and special value (NaN, +-inf, +-1e30, 3e38, denormals) through
``build_graph`` and directly: the math kernel's values and gradients to rounding, or aten's
refusal; no run reaches another (outputs and gradients bit for bit) under any of them, in
float, double and half; a forward without grad and one under ``vjp`` (the evaluation's) as the
training step's; the form is taken where it claims and nowhere else.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - torch's name
from torch import nn
from torch.func import vjp, vmap

from bench import batched_ops, vectorized
from bench.errors import BenchError
from bench.graph import build_graph
from bench.trainer import RunConfig, train
from tests.capture_helpers import close_to_rounding, count_calls, runs_of, through_capture

aten = torch.ops.aten
SDPA = aten.scaled_dot_product_attention.default
CPU = torch.device("cpu")
RUNS = 3

pytestmark = pytest.mark.usefixtures("one_thread")  # as in the children (tests/conftest.py)


def _math(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with attention on the math kernel, as every child runs it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def call(*args: Any, **kwargs: Any) -> Any:
        with sdpa_kernel(SDPBackend.MATH):
            return fn(*args, **kwargs)
    return call


def _encode(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": str(value)}
    return value


def _doc(kwargs: dict[str, Any] | None = None, cast: str | None = None) -> dict[str, Any]:
    """A graph document as a capture child could write it: the query the user input, the key
    and the value parameters, their attention (``kwargs`` its literal keywords), each cast to
    ``cast`` first and the result back to float32 if given."""
    nodes: list[dict[str, Any]] = [{"name": n, "op": "placeholder"} for n in ("q", "k", "v")]
    names = ["q", "k", "v"]
    if cast is not None:
        nodes += [{"name": f"{n}_cast", "op": "call_function", "target": "aten._to_copy.default",
                   "args": [{"$node": n}], "kwargs": {"dtype": {"$dtype": cast}}} for n in names]
        names = [f"{n}_cast" for n in names]
    nodes.append({"name": "y", "op": "call_function", "target": "aten.scaled_dot_product_attention.default",
                  "args": [{"$node": n} for n in names], "kwargs": {k: _encode(v) for k, v in (kwargs or {}).items()}})
    out = "y"
    if cast is not None:
        nodes.append({"name": "back", "op": "call_function", "target": "aten._to_copy.default",
                      "args": [{"$node": "y"}], "kwargs": {"dtype": {"$dtype": "float32"}}})
        out = "back"
    nodes.append({"name": "output", "op": "output", "args": [[{"$node": out}]]})
    return {"format": 1, "inputs": [{"kind": "user", "name": "q", "target": ""},
                                    {"kind": "parameter", "name": "k", "target": "key"},
                                    {"kind": "parameter", "name": "v", "target": "value"}],
            "outputs": [{"kind": "user", "target": out}], "nodes": nodes}


def _graph(kwargs: dict[str, Any] | None = None, cast: str | None = None) -> Callable[..., torch.Tensor]:
    """The graph built as the trusted trainer builds it (the guard, then the faster form)."""
    program, _ = build_graph(_doc(kwargs, cast), CPU)
    return lambda q, k, v: program(q, k, v)[0]


def _half_refused(build: Callable[[], Any]) -> Any:
    """``build()``, or None where ``bench.graph`` refuses the graph for computing in float16 (a
    helper's change beside this review: a graph may name no half dtype). Either holds: a half
    attention never reaches the trainer, or it is each run's own (the form leaves it to aten)."""
    try:
        return build()
    except BenchError as exc:
        assert "float16" in str(exc), exc
        return None


def _batched(fn: Callable[..., torch.Tensor], in_dims: Any = 0) -> Callable[..., torch.Tensor]:
    """``fn`` over the runs under one plain vmap level (the trainer's training step); the result
    with the runs first."""
    return lambda *parts: vmap(fn, in_dims=in_dims)(*parts)


def _alone(fn: Callable[..., torch.Tensor], in_dims: Any = 0) -> Callable[..., torch.Tensor]:
    """``fn`` one run at a time on the math kernel (what each run computes in a child)."""
    def call(*parts: torch.Tensor) -> torch.Tensor:
        dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(parts)
        return torch.stack([_math(fn)(*(t.select(d, r) for t, d in zip(parts, dims, strict=True)))
                            for r in range(RUNS)])
    return call


Outcome = tuple[torch.Tensor, tuple[torch.Tensor, ...]] | BaseException


def _outcome(fn: Callable[..., torch.Tensor], parts: list[torch.Tensor]) -> Outcome:
    """``fn``'s output and the gradients of a weighted sum of it for the parts (or its refusal)."""
    # detached, not cloned: the layouts (stride 0, transposed) as they are
    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in parts]
    try:
        out = fn(*leaves)
        if not out.requires_grad:
            return out.detach(), ()
        weights = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype).reshape(out.shape)
        grads = torch.autograd.grad((out * weights).sum(), leaves, allow_unused=True)
    except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError, BenchError) as exc:
        return exc
    return out.detach(), tuple(torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads, strict=True))


def _rel(dtype: torch.dtype) -> float:
    return {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 4 * torch.finfo(dtype).eps)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to float rounding, shapes and dtypes included, NaN and infinities where the other
    has them."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not (torch.equal(a.isnan(), b.isnan()) and torch.equal(a == math.inf, b == math.inf)
            and torch.equal(a == -math.inf, b == -math.inf)):
        return False
    finite = a.isfinite()
    return close_to_rounding(a[finite].double(), b[finite].double(), _rel(a.dtype))


def _agree(got: Outcome, expected: Outcome) -> str | None:
    """Why ``got`` is not ``expected`` (None: it is): values and every gradient to rounding."""
    if isinstance(expected, BaseException) or isinstance(got, BaseException):
        if isinstance(expected, BaseException) != isinstance(got, BaseException):
            return f"aten: {expected!r:.200}; the trainer: {got!r:.200}"
        return None
    if not _same(got[0], expected[0]):
        return "the values differ"
    for name, a, b in zip("qkv", got[1], expected[1], strict=True):
        if not _same(a, b):
            return f"the gradients of {name} differ"
    return None


def _qkv(rows: tuple[int, int] = (5, 7), width: int = 4, value_width: int = 4, lead: tuple[int, ...] = (2,),
         dtype: torch.dtype = torch.float32, seed: int = 0, spread: float = 1.0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shapes = [(RUNS, *lead, rows[0], width), (RUNS, *lead, rows[1], width), (RUNS, *lead, rows[1], value_width)]
    return [(torch.randn(*s, generator=gen, dtype=torch.float64) * (spread if i < 2 else 1.0)).to(dtype)
            for i, s in enumerate(shapes)]


# -- findings ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_attention_is_the_math_kernels_float_arithmetic(dtype: torch.dtype) -> None:
    """aten's math kernel computes a half or bfloat16 attention in float and rounds the result
    (``query_.to(at::kFloat)``). The form computed in half: inputs of 200 (scores of 8e4, past
    float16's 65504) gave NaN where each run alone gives finite values, and ordinary scores (inputs
    of 10) were off by about 14 units of the dtype (failed before: the form's half arithmetic)."""
    q = torch.full((RUNS, 2, 2, 4), 200.0).to(dtype)
    big = _batched(batched_ops.scaled_dot_product_attention)(q, q, q)
    assert _same(big, _alone(SDPA)(q, q, q)) and not big.isnan().any()
    for seed in range(3):
        parts = _qkv(dtype=dtype, seed=seed, spread=10.0)
        assert _agree(_outcome(_batched(batched_ops.scaled_dot_product_attention), parts),
                      _outcome(_alone(SDPA), parts)) is None


def test_a_graph_that_casts_to_half_before_attention_gives_each_run_its_own_result() -> None:
    """Through ``build_graph`` (``_to_copy`` to float16 is on the allowlist; the guard lets one
    dtype through): the batched graph gave NaN for every run at scores past 65504, each run's
    graph alone finite values (failed before)."""
    fn = _half_refused(lambda: _graph(cast="float16"))
    if fn is None:
        return
    parts = [torch.full((RUNS, 2, 4), 200.0) + torch.arange(RUNS).view(RUNS, 1, 1) for _ in range(3)]
    assert _agree(_outcome(_batched(fn), parts), _outcome(_alone(fn), parts)) is None


def test_a_captured_model_attending_in_half_trains_as_a_group_as_one_at_a_time() -> None:
    """A captured model that casts its embedding (times 200) to half for attention: each run
    alone trains to finite predictions; as a group (``vectorized.train_group``) every run was
    NaN and diverged (failed before). Now the group's predictions are each run's to rounding."""
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = nn.Linear(3, 8), nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.embed(x) * 200
            h = z.half()
            out: torch.Tensor = self.head(F.scaled_dot_product_attention(h, h, h).float()[:, -1] / 200)
            return out

    torch.manual_seed(0)
    captured = _half_refused(lambda: through_capture(Net(), [6, 3]))
    if captured is None:
        return
    models = runs_of(captured, RUNS)
    gen = torch.Generator().manual_seed(1)
    x, y, x_eval = torch.randn(32, 6, 3, generator=gen), torch.randn(32, 2, generator=gen), torch.randn(9, 6, 3, generator=gen)
    config = RunConfig(lr=0.01, epochs=1, batch_size=16)
    alone = [_math(train)(copy.deepcopy(m), config, x, y, x_eval, order_seed=r) for r, m in enumerate(models)]
    group = vectorized.train_group(models, [config] * RUNS, [(x, y, x_eval)], [0] * RUNS, list(range(RUNS)))
    assert not any(r.diverged for r in alone)
    for a, b in zip(alone, group, strict=True):
        assert not b.diverged and close_to_rounding(a.predictions, b.predictions, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_row_of_scores_that_overflow_to_minus_infinity_has_aten_s_gradients(dtype: torch.dtype) -> None:
    """Finite inputs whose products overflow: query row 0 of 1e20 (1e200 in double) against keys
    of -1e20 to -2e20, every score of the row -inf. aten's ``_safe_softmax`` gives the row 0 and
    sends 0 back; the form's ``where`` sent back 0 times the NaN of 0 / 0: the query's and the
    key's gradients NaN (failed before), through the graph as the trainer builds it."""
    big = 1e20 if dtype == torch.float32 else 1e200
    q, k, v = _qkv(dtype=dtype, seed=3)
    q[:, 0, 0] = big
    k[:, 0] = -big * (1 + torch.rand(k[:, 0].shape, generator=torch.Generator().manual_seed(4), dtype=dtype))
    fn = _graph()
    got, expected = _outcome(_batched(fn), [q, k, v]), _outcome(_alone(fn), [q, k, v])
    assert not isinstance(got, BaseException) and torch.equal(got[0][:, 0, 0], torch.zeros_like(got[0][:, 0, 0]))
    assert all(g.isfinite().all() for g in got[1])
    assert _agree(got, expected) is None


def test_a_query_of_no_width_is_aten_s() -> None:
    """A query and key of no columns (a graph slices them so): aten's scale is 1 / sqrt(0) = inf
    over empty products, every row the value's mean. The form raised ZeroDivisionError (failed
    before); a scale given was always the math kernel's."""
    parts = _qkv(width=0)
    for kwargs in ({}, {"scale": 0.5}):
        fn = _graph(kwargs)
        assert _agree(_outcome(_batched(fn), parts), _outcome(_alone(fn), parts)) is None


def test_a_scale_past_the_doubles_is_aten_s_to_refuse() -> None:
    """``scale=10**400``: ``check_call`` takes an int for a float; Python's ``float`` raised
    OverflowError in the form (failed before) where aten refuses the call (RuntimeError)."""
    fn = _graph({"scale": 10**400})
    parts = _qkv()
    with pytest.raises(RuntimeError):
        _batched(fn)(*parts)
    with pytest.raises(RuntimeError):
        _alone(fn)(*parts)


# -- what holds ------------------------------------------------------------------------------------

def _layouts() -> dict[str, tuple[list[torch.Tensor], Any]]:
    """(query, key, value with the runs' dimension at in_dims): odd memory layouts and sizes."""
    gen = torch.Generator().manual_seed(5)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)
    q, k, v = _qkv(seed=6)
    return {
        "plain": ([q, k, v], 0),
        "transposed": ([r(RUNS, 2, 4, 5).transpose(-1, -2), r(RUNS, 2, 4, 7).transpose(-1, -2), r(RUNS, 2, 7, 4)], 0),
        "runs expanded (stride 0)": ([r(1, 2, 5, 4).expand(RUNS, 2, 5, 4), r(1, 2, 7, 4).expand(RUNS, 2, 7, 4),
                                      r(1, 2, 7, 4).expand(RUNS, 2, 7, 4)], 0),
        "rows expanded (stride 0)": ([r(RUNS, 2, 1, 4).expand(RUNS, 2, 5, 4), r(RUNS, 2, 1, 4).expand(RUNS, 2, 7, 4),
                                      r(RUNS, 2, 1, 4).expand(RUNS, 2, 7, 4)], 0),
        "runs last": ([t.movedim(0, -1).contiguous() for t in (q, k, v)], -1),
        "runs in the middle": ([t.movedim(0, 2).contiguous() for t in (q, k, v)], 2),
        "runs at different places": ([q, k.movedim(0, 1).contiguous(), v.movedim(0, -1).contiguous()], (0, 1, -1)),
        "strided slices": ([r(RUNS, 4, 10, 8)[:, ::2, ::2, ::2], r(RUNS, 4, 14, 8)[:, ::2, ::2, ::2],
                            r(RUNS, 2, 7, 9)[..., ::2]], 0),
        "query heads broadcast": ([r(RUNS, 1, 5, 4), r(RUNS, 3, 7, 4), r(RUNS, 3, 7, 4)], 0),
        "key and value heads broadcast": ([r(RUNS, 3, 5, 4), r(RUNS, 1, 7, 4), r(RUNS, 1, 7, 4)], 0),
        "value heads broadcast": ([r(RUNS, 1, 5, 4), r(RUNS, 1, 7, 4), r(RUNS, 3, 7, 4)], 0),
        "heads that do not broadcast": ([r(RUNS, 2, 5, 4), r(RUNS, 3, 7, 4), r(RUNS, 3, 7, 4)], 0),
        "no query rows": (_qkv(rows=(0, 7)), 0),
        "one key row": (_qkv(rows=(5, 1)), 0),
        "no key rows": (_qkv(rows=(5, 0)), 0),
        "no value width": (_qkv(value_width=0), 0),
        "no heads": (_qkv(lead=(0,)), 0),
        "2-D": (_qkv(lead=()), 0),
        "1-D": ([r(RUNS, 4), r(RUNS, 4), r(RUNS, 4)], 0),
        "300 query rows, one key row": (_qkv(rows=(300, 1), lead=(1,)), 0),
        "one query row, 300 key rows": (_qkv(rows=(1, 300), lead=(1,)), 0),
        "wide": (_qkv(width=64), 0),
        "key and value rows differ": ([q, k, v[..., :6, :]], 0),
        "query and key widths differ": ([q, k[..., :3], v], 0),
        "key of another rank": ([q, k[:, 0], v[:, 0]], 0),
        "float64": (_qkv(dtype=torch.float64), 0),
        "float16": (_qkv(dtype=torch.float16), 0),
        "bfloat16": (_qkv(dtype=torch.bfloat16), 0),
        "float32 query, float64 key and value": ([q, k.double(), v.double()], 0),
        "int64": ([(t * 3).long() for t in (q, k, v)], 0),
        "bool": ([t > 0 for t in (q, k, v)], 0),
    }


@pytest.mark.parametrize("through", ["graph", "form"])
@pytest.mark.parametrize("layout", list(_layouts()))
def test_every_layout_size_and_dtype_is_the_math_kernels_or_its_refusal(layout: str, through: str) -> None:
    """Values and the gradients of query, key and value against each run alone on the math
    kernel, to rounding; a refusal only where aten refuses (directly), or where the guard does
    (through ``build_graph``: it may refuse more than aten, never answer otherwise)."""
    parts, in_dims = _layouts()[layout]
    fn = _graph() if through == "graph" else batched_ops.scaled_dot_product_attention
    expected = _outcome(_alone(SDPA, in_dims), parts)
    got = _outcome(_batched(fn, in_dims), parts)
    if through == "graph" and isinstance(got, BaseException):
        return
    if any(not t.is_floating_point() for t in parts):  # aten refuses these; the form must too
        assert isinstance(expected, BaseException) and isinstance(got, BaseException)
        return
    assert _agree(got, expected) is None, _agree(got, expected)


SCALES = [None, 2, 1, 0.3, 1e-310, 5e-324, 1e-45, 1e30, 1e300, math.inf, -math.inf, math.nan, 0.0, -0.0, -0.5, -3]


@pytest.mark.parametrize("scale", SCALES, ids=[repr(s) for s in SCALES])
def test_every_scale_is_the_math_kernels_or_its_refusal(scale: Any) -> None:
    """Each literal scale through ``build_graph`` (subnormal, tiny, huge, infinite, NaN, zero,
    negative, int): the math kernel's values and gradients to rounding (NaN where it has NaN)."""
    parts = _qkv(seed=7)
    fn = _graph({"scale": scale})
    assert _agree(_outcome(_batched(fn), parts), _outcome(_alone(fn), parts)) is None


SPECIALS = [math.nan, math.inf, -math.inf, 1e30, -1e30, 3e38, 1e-40, -1e-45]


@pytest.mark.parametrize("special", SPECIALS, ids=[repr(s) for s in SPECIALS])
@pytest.mark.parametrize("which", [0, 1, 2], ids=["query", "key", "value"])
def test_special_values_are_the_math_kernels(special: float, which: int) -> None:
    """One element of the query, key or value of every run NaN, infinite, huge or denormal:
    the math kernel's values and gradients, NaN and infinities where it has them."""
    parts = _qkv(seed=8)
    parts[which][:, 0, 1, 0] = special
    fn = _graph()
    assert _agree(_outcome(_batched(fn), parts), _outcome(_alone(fn), parts)) is None


POISONS = [math.nan, math.inf, -math.inf, 1e30, -1e30, 3e38, 1e-40, 1e20]
POISONED_LAYOUTS = ["plain", "transposed", "runs last", "runs at different places", "strided slices",
                    "key and value heads broadcast", "query heads broadcast", "float64", "float16"]


@pytest.mark.parametrize("poison", POISONS, ids=[repr(p) for p in POISONS])
@pytest.mark.parametrize("layout", POISONED_LAYOUTS)
def test_no_run_reaches_another_through_the_graph(poison: float, layout: str) -> None:
    """Run 0's query, key and value poisoned (a row of each, and one element of another key row
    negated): every other run's output and gradients bit for bit, through the graph as the
    trainer builds it, in odd layouts and dtypes (the form for float and double, aten's batching
    rules for half)."""
    results = []
    for poisoned in (False, True):
        parts, in_dims = _layouts()[layout]
        dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * 3
        if poisoned:
            for t, d in zip(parts, dims, strict=True):
                run = t.select(d, 0)
                run[..., :1, :] = poison
                run[..., 1:2, :1] = -poison
        results.append(_outcome(_batched(_graph(), in_dims), parts))
    (out_a, g_a), (out_b, g_b) = results  # type: ignore[misc]
    assert not torch.equal(out_a[0], out_b[0])
    assert torch.equal(out_a[1:], out_b[1:])
    assert all(torch.equal(a.movedim(d, 0)[1:], b.movedim(d, 0)[1:]) for a, b, d in zip(g_a, g_b, dims, strict=True))


@pytest.mark.parametrize("poison", [math.nan, math.inf, 1e20])
def test_no_run_reaches_another_through_a_cast_to_half(poison: float) -> None:
    """The same through a graph that casts to float16 and back (aten's math kernel in float)."""
    fn = _half_refused(lambda: _graph(cast="float16"))
    if fn is None:
        return
    results = []
    for poisoned in (False, True):
        parts = _qkv(seed=9)
        if poisoned:
            for t in parts:
                t[0, 1, :1] = poison
        results.append(_outcome(_batched(fn), parts))
    (out_a, g_a), (out_b, g_b) = results  # type: ignore[misc]
    assert not torch.equal(out_a[0], out_b[0])
    assert torch.equal(out_a[1:], out_b[1:]) and all(torch.equal(a[1:], b[1:]) for a, b in zip(g_a, g_b, strict=True))


def test_the_form_is_taken_where_it_claims_and_nowhere_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``build_graph``: float and double under the plain vmap level take the form (its
    softmax counted); half and bfloat16, a query of no width, a scale of 0, inf, NaN or past the
    doubles, one model at a time, and the evaluation's forward under ``vjp`` (a grad transform)
    are aten's."""
    calls = count_calls(monkeypatch, batched_ops, "_safe_softmax")

    def taken(fn: Callable[..., torch.Tensor], parts: list[torch.Tensor]) -> bool:
        calls.clear()
        try:
            fn(*parts)
        except RuntimeError:
            pass
        return bool(calls)

    graph = _graph()
    assert taken(_batched(graph), _qkv()) and taken(_batched(graph), _qkv(dtype=torch.float64))
    assert taken(_batched(_graph({"scale": 2})), _qkv())
    for dtype in (torch.float16, torch.bfloat16):
        assert not taken(_batched(graph), _qkv(dtype=dtype))
    assert not taken(_batched(graph), _qkv(width=0))
    for scale in (0.0, math.inf, math.nan, -1.0, 10**400):
        assert not taken(_batched(_graph({"scale": scale})), _qkv())
    assert not taken(graph, [t[0] for t in _qkv()])
    params = _qkv()
    assert not taken(_batched(lambda q, k, v: vjp(lambda a: graph(a, k, v), q)[0]), params)


def test_a_forward_without_grad_and_under_vjp_are_the_training_steps() -> None:
    """The evaluation's forward (``vectorized``: with grad-requiring leaves, or under ``vjp``
    after the functorch fallback) and a forward under no_grad: the same values as the training
    step's, each run's math kernel's to rounding."""
    parts = _qkv(seed=10)
    graph = _graph()
    expected = _alone(SDPA)(*parts)
    with torch.no_grad():
        assert _same(_batched(graph)(*parts), expected)
    with torch.enable_grad():
        leaves = [t.clone().requires_grad_(True) for t in parts]
        assert _same(_batched(graph)(*leaves).detach(), expected)
        assert _same(_batched(lambda q, k, v: vjp(lambda a: graph(a, k, v), q)[0])(*parts).detach(), expected)


@pytest.mark.parametrize("needs_grad", [(True, False, False), (False, True, False), (False, False, True),
                                        (False, True, True)], ids=["query", "key", "value", "key and value"])
def test_inputs_that_require_no_grad_leave_the_others_gradients_aten_s(needs_grad: tuple[bool, ...]) -> None:
    """Only some of query, key and value require grad (a graph's constants, a detached input):
    the form's gradients of the others are the math kernel's alone."""
    parts = _qkv(seed=11)
    results = []
    for fn in (_batched(_graph()), _alone(SDPA)):
        leaves = [t.clone().requires_grad_(need) for t, need in zip(parts, needs_grad, strict=True)]
        out = fn(*leaves)
        wanted = [t for t in leaves if t.requires_grad]
        results.append((out.detach(), torch.autograd.grad(out.sin().sum(), wanted)))
    (out_a, g_a), (out_b, g_b) = results
    assert _same(out_a, out_b) and all(_same(a, b) for a, b in zip(g_a, g_b, strict=True))
