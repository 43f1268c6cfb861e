"""Seeds of the protocol: sweep and final seeds are disjoint, and each seed
expands into independent streams for the data split, the data order and the init.

Pair i of the two arms shares all three streams; an arm with more parameters
draws more init numbers from its own generator and cannot shift the other's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SWEEP_SEED_BASE = 0
FINAL_SEED_BASE = 1000


@dataclass(frozen=True)
class RunSeeds:
    """The three independent 31-bit seeds of one protocol seed."""

    seed: int
    split: int
    order: int
    init: int


def sweep_seeds(n: int) -> list[int]:
    """Protocol seeds of the sweep: ``0 .. n-1``."""
    return [SWEEP_SEED_BASE + i for i in range(n)]


def final_seeds(n: int) -> list[int]:
    """Fresh protocol seeds of the final runs, disjoint from every sweep seed."""
    return [FINAL_SEED_BASE + i for i in range(n)]


def run_seeds(seed: int) -> RunSeeds:
    """Expand one protocol seed into split / order / init seeds (SeedSequence spawn)."""
    split, order, init = (
        int(child.generate_state(1)[0] & 0x7FFFFFFF)
        for child in np.random.SeedSequence(seed).spawn(3)
    )
    return RunSeeds(seed=seed, split=split, order=order, init=init)
