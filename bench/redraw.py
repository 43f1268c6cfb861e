"""The bench draws every model's initial parameter values (PROTOCOL.md 1; issue 25.4).

A file's ``build_model`` chooses the architecture and the *scheme* of its initial values; the
values themselves are the bench's. The red team trained the track's own baseline architecture
offline on the public digits, through the track's own redraw, and shipped those 1,898 weights as
the "initial" values of an idea: trained by the bench from there, it got ``worked / helps`` on
vision@2 (0.041 against the baseline's 0.251, confirmed), as a copy of any track's baseline
pretrained on its public generator would. Parameter parity bounds how many weights a file ships,
not what they learned, so the trusted trainer replaces them:

- each parameter tensor whose entries are not all equal is redrawn from a normal distribution
  with the submitted tensor's own mean and standard deviation, from a generator seeded by the
  model's init seed: a scheme (Kaiming, a small scale, an offset) survives as its first two
  moments; positions, structure and anything learned do not (an orthogonal or identity init is
  a structure: build it in ``forward`` from a buffer or ``torch.eye``, with a parameter that
  starts at zero);
- a constant tensor (zeros, ones, one value: biases, norm gains, a gate or a temperature) is
  kept exactly;
- what survives is two numbers per tensor (one for a constant), so the number of parameter
  tensors is bounded too (``bench.decide.max_tensors``): a file cannot ship a network as a thousand
  two-entry constants.

Buffers, tensor constants and literals are not redrawn: they are counted against the track's
buffer cap instead, by what they hold (``bench.graph.info_words``: a constant tensor one word,
another its compressed size), and the default cap is the baseline's own plus 1,024 bits
(bench.decide.counts_error): a cap of 273 words held vision's pretrained baseline quantized to
3 bits a weight (red team: worked / helps, 0.078 vs 0.248).
"""

from __future__ import annotations

import torch

from bench.errors import BenchError, ErrorCode

SCHEME = "normal-moments/v1"  # in the baseline cache's key: a new scheme is a new model


def redraw(tensors: dict[str, torch.Tensor], parameters: list[str], init_seed: int) -> dict[str, torch.Tensor]:
    """``tensors`` with each non-constant tensor named in ``parameters`` (in graph order, which
    fixes the draws) replaced by a fresh normal draw of its mean and standard deviation."""
    generator = torch.Generator().manual_seed(int(init_seed) * 2_654_435_761 % 2**63 + 1)
    out = dict(tensors)
    for name in parameters:
        value = tensors[name]
        flat = value.detach().to(torch.float64).flatten()
        if not bool(torch.isfinite(flat).all()):
            # a non-finite entry would make a tensor's moments meaningless, and skipping it kept a
            # pretrained network whole behind one +inf the forward sliced off (red team)
            raise BenchError(ErrorCode.NOT_CAPTURABLE, f"A parameter ({name[:80]}) holds a non-finite initial "
                             "value.", "Initialise every parameter to finite numbers.")
        if flat.numel() < 2 or bool((flat == flat[0]).all()):
            continue  # a constant is kept
        fresh = torch.randn(value.shape, generator=generator, dtype=torch.float64)
        out[name] = (fresh * flat.std(unbiased=False) + flat.mean()).to(value.dtype)
    return out
