"""What each allowed pointwise op costs an element, forward and backward, at its slowest values:
the measurement behind ``bench.cost.ELEMENT_PRICES`` (session 34; a third red team of the count
found complex ``acosh`` at 150-240 ns an element and float32 ``gammaln`` at 20, each counted as
an ``add``'s two reads and writes).

For every op of ``bench.oplist``'s pointwise and complex kinds, in float32, float64, complex64
and complex128 where the op takes them, on several value ranges (normal, large, huge, tiny,
near one, negative huge), one torch thread, denormals flushed as in the children
(``bench.child.torch_settings``): the nanoseconds an element of a forward and its backward
(where the op has one; a complex output's backward through ``abs``, about 20 ns of it), the
dearest range's. It prints one line per op and dtype at or over ``--min-ns`` and, last, a JSON
object ``{op: {dtype: ns}}``. The reference: an ``add`` measures 2-3 ns an element so, and the
count prices it at about 3 (its reads and writes).

    .venv/bin/python benchmarks/pointwise_prices.py [--elements 32768] [--min-ns 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.child import torch_settings  # noqa: E402
from bench.oplist import ALLOWED_OPS  # noqa: E402

DTYPES = {"float32": torch.float32, "float64": torch.float64, "complex64": torch.complex64,
          "complex128": torch.complex128}
RANGES = {
    "normal": lambda x: x, "large": lambda x: x * 100, "huge": lambda x: x * 1e30,
    "tiny": lambda x: x * 1e-30, "near_one": lambda x: 1 + x * 1e-6, "negative_huge": lambda x: -abs(x) * 1e30,
    "half": lambda x: x * 0.5 + 2.5,
}


def _calls(x: torch.Tensor, y: torch.Tensor) -> list[tuple[Any, ...]]:
    """The argument lists to try, first that works wins: (x), (x, y), (x, 2.5), (2.5, x)."""
    return [(x,), (x, y), (x, 2.5), (2.5, x), (x, 2)]


def _time(fn: Any, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure(op: Any, dtype: torch.dtype, n: int) -> float | None:
    """The dearest range's ns an element, forward and backward; None if the op takes no such call."""
    gen = torch.Generator().manual_seed(0)
    base_x, base_y = torch.randn(n, generator=gen, dtype=torch.float64), torch.randn(n, generator=gen, dtype=torch.float64)
    worst = None
    for make in RANGES.values():
        x, y = make(base_x).to(dtype), make(base_y).to(dtype)
        for args in _calls(x, y):
            leaves = [a.detach().requires_grad_(a.is_floating_point() or a.is_complex()) if isinstance(a, torch.Tensor)
                      else a for a in args]
            try:
                out = op(*leaves)
            except Exception:  # noqa: BLE001 - not this call
                continue
            if not isinstance(out, torch.Tensor):
                break
            grad = out.requires_grad and (out.is_floating_point() or out.is_complex())

            def step(leaves: list[Any] = leaves, grad: bool = grad) -> None:
                value = op(*leaves)
                if grad:
                    value.abs().sum().backward() if value.is_complex() else value.sum().backward()

            def forward(leaves: list[Any] = leaves) -> None:
                with torch.no_grad():
                    op(*leaves)

            try:
                ns = _time(step) / n * 1e9
            except Exception:  # noqa: BLE001 - no backward for this call: forward alone
                ns = _time(forward) / n * 1e9
            worst = ns if worst is None else max(worst, ns)
            break
    return worst


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--elements", type=int, default=2**15)
    parser.add_argument("--min-ns", type=float, default=4.0)
    args = parser.parse_args()
    torch_settings()
    warnings.simplefilter("ignore")
    table: dict[str, dict[str, float]] = {}
    for kind in ("pointwise", "complex"):
        for name in sorted(ALLOWED_OPS[kind]):
            _, packet, overload = name.split(".")
            op = getattr(getattr(torch.ops.aten, packet), overload)
            for cls, dtype in DTYPES.items():
                found = measure(op, dtype, args.elements)
                if found is not None:
                    table.setdefault(f"aten.{packet}", {})[cls] = round(max(found, table.get(
                        f"aten.{packet}", {}).get(cls, 0.0)), 1)
    for op, prices in sorted(table.items()):
        for cls, ns in prices.items():
            if ns >= args.min_ns:
                print(f"{op:40s} {cls:8s} {ns:8.1f} ns an element")
    print(json.dumps(table, sort_keys=True))


if __name__ == "__main__":
    main()
