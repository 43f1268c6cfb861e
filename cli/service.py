"""Service subcommands: ``serve``, ``worker``, ``migrate``, ``backup``, ``restore``, ``keys``,
``track register|deprecate|vouch|unvouch``.

Imports the web stack and the worker lazily, so the API process never loads
torch: ``serve`` runs the worker as its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url.removeprefix("sqla+")).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]


def cmd_migrate(settings: Settings) -> int:
    """``alembic upgrade head`` on the configured database."""
    from app.migrate import upgrade_head

    upgrade_head(settings)
    print(f"database at head: {_safe_url(settings.database_url)}")
    return 0


def cmd_backup_restore(args: argparse.Namespace, settings: Settings) -> int:
    """``backup DEST`` / ``restore SOURCE [--force]``: print the manifest; exit 1 with the reason."""
    from app import backup

    try:
        if args.command == "backup":
            manifest = backup.backup(settings, Path(args.dest))
        else:
            manifest = backup.restore(settings, Path(args.source), force=args.force)
    except backup.BackupError as exc:
        print(f"{args.command} failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(backup.describe(manifest), indent=2))
    if args.command == "restore":
        print(f"restored into {_safe_url(settings.database_url)}; run `ideabench migrate` if the backup is "
              "of an older schema", file=sys.stderr)
    return 0


def _session(settings: Settings) -> Session:
    from app.db import make_engine, make_sessionmaker

    return make_sessionmaker(make_engine(settings.database_url))()


def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    """Create, list or revoke API keys; ``create`` prints the key alone on its last line."""
    from app.keys import repository, service

    if settings.embedded:  # a fresh embedded setup has no tables yet
        from app.migrate import upgrade_head

        upgrade_head(settings)
    with _session(settings) as session:
        if args.keys_command == "create":
            new = service.create_key(session, args.role, args.name)
            session.commit()
            print(f"created {new.key.role} key {new.key.id}; store it now, it is not shown again:",
                  file=sys.stderr)
            print(new.token)
            return 0
        if args.keys_command == "list":
            for key in repository.list_keys(session):
                state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
                print(f"{key.id}  {key.role:<8}  {state:<18}  {key.name or ''}")
            return 0
        revoked = service.revoke_key(session, args.key_id)
        if revoked is None:
            print(f"no key with id {args.key_id!r}", file=sys.stderr)
            return 1
        session.commit()
        print(f"revoked {revoked.id}")
        return 0


def cmd_track(args: argparse.Namespace, settings: Settings) -> int:
    """Register a custom track file (validated here, in the sandbox), or deprecate, vouch for or
    withdraw the vouch for a version (as an operator).

    Works on the configured database directly, like ``keys``: run it where the
    worker's sandbox is available. Exit 0 when the track is active, 2 when rejected.
    """
    import getpass

    from app.keys.deps import Caller
    from app.keys.roles import Role
    from app.tracks import service
    from app.tracks.models import TrackStatus
    from bench.errors import BenchError

    if len(args.words) != 2:
        print(f"usage: ideabench track {args.words[0]} {'FILE' if args.words[0] == 'register' else 'NAME@VERSION'}",
              file=sys.stderr)
        return 2
    if settings.embedded:
        from app.migrate import upgrade_head

        upgrade_head(settings)
    with _session(settings) as session:
        try:
            if args.words[0] in {"deprecate", "vouch", "unvouch"}:
                operator = Caller(f"cli:{getpass.getuser()}", Role.OPERATOR)
                if args.words[0] == "deprecate":
                    row = service.deprecate(session, args.words[1], operator)
                else:
                    row = service.vouch(session, args.words[1], operator, args.words[0] == "vouch")
                session.commit()
                print(json.dumps(service.custom_view(row).model_dump(mode="json", exclude_none=True), indent=2))
                return 0
            path = Path(args.words[1])
            try:
                source = path.read_text()
            except OSError as exc:
                print(f"error: cannot read {path}: {exc.strerror}", file=sys.stderr)
                return 2
            author = args.author or f"cli:{getpass.getuser()}"
            registered = service.register(session, source, author, path.name, may_take_over=True).row
            session.commit()
            track_id, status = registered.id, registered.status
        except BenchError as exc:
            print(f"error [{exc.code.value}]: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
            return 2
    if status == TrackStatus.VALIDATING.value:
        from workers.context import WorkerContext
        from workers.tracks import execute_validation

        print(f"validating {track_id} in the sandbox ...", file=sys.stderr)
        ctx = WorkerContext.create(settings)
        try:
            if execute_validation(ctx, track_id) == "refused":
                print("not validated here: this host's seed secret is not the deployment's current epoch; "
                      "a worker will validate it", file=sys.stderr)
        finally:
            ctx.close()
    with _session(settings) as session:
        stored = service.get(session, track_id)
        assert stored is not None
        view = service.custom_view(stored)
    print(json.dumps(view.model_dump(mode="json", exclude_none=True), indent=2))
    return 0 if view.status == TrackStatus.ACTIVE else 2


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """Run one Celery worker (queue from the device unless --queues)."""
    from workers.main import run_worker

    queues = [q.strip() for q in args.queues.split(",") if q.strip()] if args.queues else None
    return run_worker(settings, queues=queues, concurrency=args.concurrency)


def _first_operator_key(settings: Settings) -> str | None:
    """In embedded mode with no keys yet, create an operator key and return it."""
    from app.keys import repository, service

    with _session(settings) as session:
        if repository.count_keys(session) > 0:
            return None
        new = service.create_key(session, "operator", "first operator key (ideabench serve)")
        session.commit()
        return new.token


def _example_body(settings: Settings) -> Path | None:
    """Write the smoke example idea as a ready POST body under the data dir."""
    from bench.catalog import get_card

    try:
        card = get_card("smoke")
    except Exception:
        return None
    path = settings.data_dir / "example_idea.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"track": "smoke", "code": card["example_idea"], "name": "smoke example"}))
    return path


def _die_with_parent() -> None:
    """In the worker child: get SIGTERM when ``serve`` dies, however it dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _start_worker(settings: Settings) -> subprocess.Popen[bytes]:
    env = dict(os.environ, DATABASE_URL=settings.database_url, BROKER_URL=settings.broker_url,
               IDEABENCH_DATA_DIR=str(settings.data_dir))
    return subprocess.Popen([sys.executable, "-m", "cli.main", "worker"], env=env,
                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)


def _stop(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """Migrate, start one worker process and serve the API until interrupted."""
    import uvicorn

    from app.main import create_app
    from app.migrate import upgrade_head
    from app.queue import prepare_broker

    upgrade_head(settings)
    prepare_broker(settings.broker_url)
    token = _first_operator_key(settings) if settings.embedded else None
    body = _example_body(settings)
    worker = None if args.no_worker else _start_worker(settings)
    url = f"http://{args.host}:{args.port}"
    print(f"ideabench API: {url}  (docs: {url}/docs; dashboard: {url}/dashboard, sign in with a key)")
    print(f"database: {_safe_url(settings.database_url)}  broker: {_safe_url(settings.broker_url)}")
    if token:
        print("first operator key (store it now, it is not shown again):")
        print(f"  export IDEABENCH_KEY={token}")
    else:
        print("create a key with: ideabench keys create --role agent   (then export IDEABENCH_KEY=...)")
    if body is not None:
        print("submit the smoke track's example idea:")
        print(f"  curl -s -X POST {url}/v1/ideas -H \"Authorization: Bearer $IDEABENCH_KEY\" "
              f"-H 'Content-Type: application/json' --data @{body}")
    sys.stdout.flush()
    # uvicorn re-raises SIGTERM after its graceful shutdown; make that an exit
    # that runs the finally below (stopping the worker) instead of a hard kill.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        from app.logs import configure

        configure(settings.log_format)
        uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info", log_config=None)
    finally:
        if worker is not None:
            _stop(worker)
    return 0


def dispatch(args: argparse.Namespace) -> int:
    """Run a service subcommand."""
    settings = Settings()
    if args.command == "serve":
        return cmd_serve(args, settings)
    if args.command == "worker":
        return cmd_worker(args, settings)
    if args.command == "migrate":
        return cmd_migrate(settings)
    if args.command in ("backup", "restore"):
        return cmd_backup_restore(args, settings)
    if args.command == "keys":
        return cmd_keys(args, settings)
    if args.command == "track":
        return cmd_track(args, settings)
    raise SystemExit(f"unknown command {args.command!r}")
