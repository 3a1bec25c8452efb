"""The `rota` command line: `rota [--store URL] <command> ...`.

Each command prints its result on stdout (JSON with `--json`), exits 0 on success, and on
failure exits non-zero with one line on stderr: `rota: <code>: <what was wrong>`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from rota.domain.errors import RotaError

from .store import EventStore, RecordedEvent
from .stores import open_store

DEFAULT_STORE = "sqlite://rota.db"
Command = Callable[[argparse.Namespace], int]


class UsageError(RotaError):
    code = "usage"


def event_json(recorded: RecordedEvent) -> dict[str, Any]:
    """The JSON contract of one event: position, stream, version, type, identity, time, data."""
    return {
        "position": recorded.position,
        "stream": recorded.stream,
        "version": recorded.version,
        "type": recorded.type,
        "delivery_id": recorded.delivery_id,
        "recorded_at": recorded.recorded_at,
        "data": msgspec.to_builtins(recorded.event),
    }


def _store(args: argparse.Namespace) -> EventStore:
    url = args.store or os.environ.get("ROTA_STORE") or DEFAULT_STORE
    return open_store(url)


def cmd_events(args: argparse.Namespace) -> int:
    with _store(args) as store:
        position, rows = args.after, []
        while batch := store.read(position, 5000):
            rows.extend(batch)
            position = batch[-1].position
            if args.limit and len(rows) >= args.limit:
                rows = rows[: args.limit]
                break
    if args.json:
        sys.stdout.write(msgspec.json.encode([event_json(r) for r in rows]).decode() + "\n")
    else:
        for r in rows:
            data = msgspec.json.encode(msgspec.to_builtins(r.event)).decode()
            print(f"{r.position:>8}  {r.recorded_at}  {r.stream}@{r.version}  {data}")
    return 0


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from rota.replay.audit import verify_chain

    with _store(args) as store:
        report = verify_chain(store)
    if args.json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    elif report.ok:
        print(f"ok: {report.checked} events, head {report.head_position} {report.head_hash}")
    else:
        print(f"FAILED at position {report.first_bad_position}: {report.reason}")
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rota", description=__doc__.splitlines()[0])
    parser.add_argument("--store", help=f"store URL (default: $ROTA_STORE or {DEFAULT_STORE})")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    events = commands.add_parser("events", help="print the log")
    events.add_argument("--after", type=int, default=0, help="only events after this position")
    events.add_argument("--limit", type=int, default=0, help="at most this many events")
    events.add_argument("--json", action="store_true", help="a JSON list")
    events.set_defaults(handler=cmd_events)

    audit = commands.add_parser("audit", help="prove the log was not altered")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True, metavar="COMMAND")
    verify = audit_commands.add_parser("verify", help="check the hash chain and stream versions")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=cmd_audit_verify)
    return parser


def run(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    handler: Command = args.handler
    try:
        return handler(args)
    except RotaError as exc:
        print(f"rota: {exc.code}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rota: interrupted", file=sys.stderr)
        return 130
