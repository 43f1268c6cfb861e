"""The ``ideabench`` command: a thin face over the engine and the service.

Each subcommand imports its side lazily, so ``ideabench tracks`` never loads the
web stack and ``ideabench serve`` never loads torch in the API process.
"""

from __future__ import annotations

import argparse
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    """All subcommands and their flags."""
    parser = argparse.ArgumentParser(prog="ideabench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tracks", help="list the tracks")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser(
        "track", help="show one track; or register / deprecate / vouch for a custom track file",
        description="ideabench track NAME | ideabench track register FILE | "
        "ideabench track deprecate|vouch|unvouch NAME@VERSION (vouch: an operator read the file, and "
        "verdicts on the version count in totals, q-values and discoveries; unvouch takes that back)",
    )
    p.add_argument("words", nargs="+", metavar="NAME | register FILE | deprecate|vouch|unvouch NAME@VERSION")
    p.add_argument("--author", help="register: the author recorded on the track (default: cli:$USER)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("run", help="judge an idea locally with the stage-2 protocol")
    p.add_argument("idea", help="the idea's Python file")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--track", help="a built-in track name")
    where.add_argument("--track-file", help="a custom track file, judged without registering it")
    p.add_argument("--baseline", help="a matched baseline file (same contract)")
    p.add_argument("--seeds", type=int, help="final paired seeds per arm (default: the track's)")
    p.add_argument("--timeout", type=float, default=1800.0, help="wall-clock limit in seconds")
    p.add_argument("--memory-mb", type=int, default=6144, help="memory limit of the child")
    p.add_argument("--out", help="write the report JSON here")
    p.add_argument("--job-key", help="the key this run's confirmation seeds are drawn under (default: "
                   "a fresh one; the report's confirmation.job_key reruns it bit for bit)")
    p.add_argument("--json", action="store_true", help="print the report JSON, no progress bar")

    p = sub.add_parser(
        "seeds", help="the seed epochs: show the current commitment, rotate, reveal a retired key",
        description="Seeds derive from a deployment secret (PROTOCOL.md 2.5), kept in "
        "DATA_DIR/seed_secret.json unless IDEABENCH_SEED_SECRET is set.",
    )
    data_dir = argparse.ArgumentParser(add_help=False)
    data_dir.add_argument("--data-dir", default=None, help="default: IDEABENCH_DATA_DIR or ./var")
    seeds = p.add_subparsers(dest="seeds_command", required=True)
    seeds.add_parser("show", parents=[data_dir], help="the current epoch and its commitment (never the key)")
    seeds.add_parser("rotate", parents=[data_dir], help="retire the current epoch and start the next")
    s = seeds.add_parser("reveal", parents=[data_dir], help="print a retired epoch's key, to reproduce its runs")
    s.add_argument("epoch", type=int)

    p = sub.add_parser("serve", help="run the API and one worker (embedded SQLite by default)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-worker", action="store_true", help="API only")

    p = sub.add_parser("worker", help="run a Celery worker")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--queues", default=None, help="comma-separated queues (default: cpu)")

    p = sub.add_parser("migrate", help="upgrade the database to the latest schema")

    p = sub.add_parser("backup", help="back up the database (online) into a new directory")
    p.add_argument("dest", help="a new directory: the dump and manifest.json")
    p = sub.add_parser("restore", help="restore a backup into the configured database (stop the service first)")
    p.add_argument("source", help="a directory written by `ideabench backup`")
    p.add_argument("--force", action="store_true", help="replace a database that already holds tables")

    p = sub.add_parser("keys", help="manage API keys")
    keys = p.add_subparsers(dest="keys_command", required=True)
    k = keys.add_parser("create", help="create a key; prints it alone on the last line")
    k.add_argument("--role", required=True, choices=["agent", "operator", "viewer"])
    k.add_argument("--name", default=None)
    keys.add_parser("list", help="list keys (never the secrets)")
    k = keys.add_parser("revoke", help="revoke a key by id")
    k.add_argument("key_id")

    from cli.client import (
        add_parsers,  # the client verbs: login, check, submit, status, jobs, report, reports, cancel, mcp
    )

    add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ideabench`` command. A reader that leaves early (``ideabench reports
    | head``) ends any verb quietly with its code: stdout is flushed here, inside the ``try``, so
    a pipe's buffered tail cannot fail at interpreter exit (Python's docs, "Note on SIGPIPE")."""
    try:
        code = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush goes nowhere
        return 0
    except Exception as exc:
        problems = _settings_problems(exc)
        if problems is None:
            raise
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        print("hint: fix these settings (docs/deploy.md lists each IDEABENCH_* variable), then start again.",
              file=sys.stderr)
        return EX_CONFIG
    return code


EX_CONFIG = 78  # sysexits.h: a configuration error


def _settings_problems(exc: Exception) -> list[str] | None:
    """One line per bad setting, named by its variable, when ``exc`` is the settings refusing the
    environment (pydantic's ValidationError of ``Settings``); else None. pydantic is not imported
    here: the client's verbs run without it."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(exc, pydantic.ValidationError) or exc.title != "Settings":
        return None
    return [f"IDEABENCH_{str(e['loc'][0]).upper() if e['loc'] else '?'}={e.get('input')!r}: {e['msg']}"
            for e in exc.errors()]


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "client_verb", None):
        from cli import client

        return client.dispatch(args)
    custom_track_command = args.command == "track" and args.words[0] in {"register", "deprecate", "vouch", "unvouch"}
    if args.command in {"tracks", "track", "run", "seeds"} and not custom_track_command:
        from cli import engine

        return engine.dispatch(args)
    from cli import service

    return service.dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
