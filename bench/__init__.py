"""ideabench's engine: the stage-2 protocol, usable without any service.

Pure modules (no torch): ``bench.stats``, ``bench.verdicts``, ``bench.report``,
``bench.catalog``, ``bench.errors``, ``bench.contract``. Everything that trains
imports torch lazily.
"""

from typing import Final

BENCH_VERSION: Final = 1
