"""Every sandboxed child computes with denormal floats flushed, for its whole life
(``bench.child.torch_settings``): training runs far faster where a model's values underflow,
and no graph can tell training from the checks after it by the mode (docs/performance.md,
"Session 31"); through a real child: tests/security/test_capture.py)."""

from __future__ import annotations

import torch

from bench.child import torch_settings


def test_the_childs_settings_flush_denormals() -> None:
    threads = torch.get_num_threads()
    try:
        torch_settings()
        assert float(torch.full((1,), 1e-30) * 1e-9) == 0.0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(threads)
    assert float(torch.full((1,), 1e-30) * 1e-9) > 0.0  # this test process's own mode, restored

