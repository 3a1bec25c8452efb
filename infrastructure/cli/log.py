"""Commands on the log itself: events, audit verify."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from ..views import event_json
from .common import open_log, print_json


def cmd_events(args: argparse.Namespace) -> int:
    with open_log(args) as store:
        position, rows = args.after, []
        while batch := store.read(position, 5000):
            rows.extend(batch)
            position = batch[-1].position
            if args.limit and len(rows) >= args.limit:
                rows = rows[: args.limit]
                break
    if args.json:
        print_json([event_json(r) for r in rows])
    else:
        for r in rows:
            data = msgspec.json.encode(msgspec.to_builtins(r.event)).decode()
            print(f"{r.position:>8}  {r.recorded_at}  {r.stream}@{r.version}  {data}")
    return 0


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from rota.replay.audit import verify_chain

    with open_log(args) as store:
        report = verify_chain(store)
    if args.json:
        print_json(report)
    elif report.ok:
        print(f"ok: {report.checked} events, head {report.head_position} {report.head_hash}")
    else:
        print(f"FAILED at position {report.first_bad_position}: {report.reason}")
    return 0 if report.ok else 1


def register(commands: Any) -> None:
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
