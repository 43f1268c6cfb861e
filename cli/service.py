"""Service subcommands (serve, worker, migrate, keys): not part of this build yet."""

from __future__ import annotations

import argparse
import sys


def dispatch(args: argparse.Namespace) -> int:
    """Explain that the service is not built yet."""
    print(f"ideabench {args.command}: the service is not part of this build yet", file=sys.stderr)
    return 2
