"""Engine subcommands: ``tracks``, ``track NAME``, ``run IDEA.py``."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.errors import BenchError


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def cmd_tracks(args: argparse.Namespace) -> int:
    """List the tracks (name@version, task, metric, baseline)."""
    from bench.catalog import list_cards

    cards = list_cards()
    if args.json:
        _print_json([{k: v for k, v in c.items() if k != "example_idea"} for c in cards])
        return 0
    for c in cards:
        print(f"{c['id']:<22} {c['task']:<15} {c['metric']['name']:<14} baseline: {c['baseline']['name']}")
        print(f"{'':<22} {c['title']}")
    return 0


def cmd_track(args: argparse.Namespace) -> int:
    """Show one track's card and its example idea."""
    from bench.catalog import get_card

    if len(args.words) != 1:
        print("usage: ideabench track NAME | register FILE | deprecate|vouch|unvouch NAME@VERSION", file=sys.stderr)
        return 2
    card = get_card(args.words[0])
    if args.json:
        _print_json(card)
        return 0
    print(f"{card['id']}: {card['title']}\n\n{card['description']}\n")
    print("spec:     ", json.dumps(card["spec"]))
    print("metric:   ", json.dumps(card["metric"]))
    print("defaults: ", json.dumps(card["defaults"]))
    print(f"param_cap: {card['param_cap']}   baseline: {card['baseline']['description']}")
    print("\n# example idea\n" + card["example_idea"])
    return 0


class _Bar:
    """A one-line progress bar on stderr: stage, runs done/total, time left."""

    def __init__(self) -> None:
        self.last = 0.0
        self.interactive = sys.stderr.isatty()

    def __call__(self, p: Any) -> None:
        now = time.monotonic()
        if now - self.last < 0.2 and p.done < p.total:
            return
        self.last = now
        width = 24
        filled = int(width * p.done / p.total) if p.total else 0
        eta = f"{p.eta_s:5.0f}s left" if p.eta_s is not None else "  ...    "
        if p.eta_max_s is not None and p.at_most is not None and p.at_most > p.total:
            eta += f" (up to {p.eta_max_s:.0f}s, {p.at_most} runs)"
        line = f"[{'#' * filled}{'.' * (width - filled)}] {p.stage:<12} {p.done:>3}/{p.total:<3} {eta}"
        end = "\r" if self.interactive else "\n"
        print(line, end=end, file=sys.stderr, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    """Judge an idea file locally; exit 0 when judged, 2 with the error code otherwise."""
    from app.settings import Settings
    from bench import options
    from bench.custom_track import CustomTrack
    from bench.judge import JudgeRequest, judge

    # this host's options (IDEABENCH_* settings: caches, seed secret, the sandbox's policy)
    options.configure(Settings().host_options())

    try:
        idea = Path(args.idea).read_text()
        baseline = Path(args.baseline).read_text() if args.baseline else None
        track_source = Path(args.track_file).read_text() if args.track_file else None
    except OSError as exc:
        print(f"error: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    custom = None
    if track_source is not None:
        custom = CustomTrack.from_source(track_source, file=Path(args.track_file).name, author="local")
    request = JudgeRequest(
        track=custom.id if custom else args.track, custom_track=custom, idea_code=idea, baseline_code=baseline, n_seeds=args.seeds,
        timeout_s=args.timeout, memory_mb=args.memory_mb, name=Path(args.idea).stem, job_key=args.job_key,
    )
    try:
        report = judge(request, on_progress=None if args.json else _Bar(),
                       cancel=threading.Event()).model_dump(mode="json")
    except BenchError as exc:
        if args.json:
            _print_json({"error": exc.to_dict()})
        print(f"\nerror [{exc.code.value}]: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    if args.json:
        _print_json(report)
        return 0
    br = report["bench_report"]
    print(file=sys.stderr)
    print(f"track {br['track_id']}  system_verdict={report['system_verdict']}  "
          f"practical_verdict={report['practical_verdict']}  mechanism_ok={report['mechanism_ok']}")
    for arm in ("baseline", "idea"):
        print(f"  {arm:<8} {report['metrics'][arm]}")
    for warning in br["warnings"]:
        print(f"  warning: {warning}")
    print("\n" + report["summary"])
    if args.out:
        print(f"\nreport written to {args.out}")
    return 0


def cmd_seeds(args: argparse.Namespace) -> int:
    """``seeds show | rotate | reveal EPOCH`` on the deployment's seed secret file."""
    from app.settings import Settings
    from bench.seeding import SECRET_FILE, SecretStore

    settings = Settings()
    if settings.seed_secret.get_secret_value():
        print("error: IDEABENCH_SEED_SECRET is set: this deployment's epochs are managed where that "
              "variable is set, not in a file.", file=sys.stderr)
        return 2
    store = SecretStore(Path(args.data_dir or settings.data_dir) / SECRET_FILE)
    if args.seeds_command == "reveal":
        try:
            secret = store.reveal(args.epoch)
        except LookupError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        _print_json({**secret.report_block(), "key": secret.key.hex()})
        return 0
    secret = store.rotate() if args.seeds_command == "rotate" else store.current()
    _print_json(secret.report_block())
    return 0


def dispatch(args: argparse.Namespace) -> int:
    """Run one engine subcommand."""
    handlers = {"tracks": cmd_tracks, "track": cmd_track, "run": cmd_run, "seeds": cmd_seeds}
    try:
        return handlers[args.command](args)
    except BenchError as exc:
        print(f"error [{exc.code.value}]: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return 2
