"""Flow control of an operator: `rota pause pool|key|scope NAME`, `rota resume ...`,
`rota paused` and `rota priority WORK N`.

A pause deletes and re-queues nothing: the ready Work it covers waits with `flow_paused`
(`rota capacity` says which pause), running attempts go on, and the Work starts at the
daemon's first pass after the resume. Each change is one event naming who acted (`--by`)
and why (`--reason`); `--request-id` makes a repeat record nothing. Pausing what is paused
and giving a Work its own priority record nothing either (exit 0, "already"); resuming
what is not paused is `not_paused` (exit 1). Schedules have their own `rota schedule
pause|resume`.
"""

from __future__ import annotations

import argparse
from typing import Any

from rota.application.commands.requests import Receipt
from rota.cli.common import open_rota, print_json
from rota.cli.work_reads import work_view
from rota.domain.flow import MAX_PRIORITY
from rota.domain.flow_ops import TARGETS

TARGET_HELP = "pool (an executor pool: jobs, agents ...), key (tenant:acme) or scope (root/a)"


def _noted(done: Receipt, fresh: str, already: str) -> str:
    """What a command says: `fresh`, or `already` when it recorded nothing (a repeated
    request id says where its first answer is)."""
    if not done.repeated:
        return fresh
    if done.type and done.request_id is not None:
        return (
            f"{fresh} (request {done.request_id} was recorded at position {done.position}; "
            "nothing new recorded)"
        )
    return already


def _reason(reason: str) -> str:
    return f" ({reason})" if reason else ""


def cmd_pause(args: argparse.Namespace) -> int:
    reason = args.reason or ""
    with open_rota(args) as scheduler:
        done = scheduler.flow.pause(
            args.target, args.name, reason=reason, by=args.by, request_id=args.request_id
        )
        paused = scheduler.flow.paused()
    if args.json:
        print_json({"request": done, "paused": paused})
    else:
        what = f"{args.target} {args.name}"
        print(_noted(done, f"{what}: paused{_reason(reason)}", f"{what}: already paused"))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        done = scheduler.flow.resume(args.target, args.name, by=args.by, request_id=args.request_id)
        paused = scheduler.flow.paused()
    if args.json:
        print_json({"request": done, "paused": paused})
    else:
        what = f"{args.target} {args.name}"
        print(_noted(done, f"{what}: resumed", f"{what}: resumed"))
    return 0


def cmd_paused(args: argparse.Namespace) -> int:
    with open_rota(args, read_only=True) as scheduler:
        paused = scheduler.flow.paused()
    if args.json:
        print_json(paused)
    elif not paused:
        print("nothing is paused")
    else:
        for view in paused:
            since = view.since.isoformat(timespec="seconds")
            print(
                f"{view.target} {view.name}: paused since {since} (position {view.position}) "
                f"by {view.by}{_reason(view.reason)}"
            )
    return 0


def cmd_priority(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        done = scheduler.flow.reprioritize(
            args.work,
            args.priority,
            reason=args.reason or "",
            by=args.by,
            request_id=args.request_id,
        )
        view = work_view(scheduler, args.work)
    if args.json:
        print_json({"request": done, "priority": args.priority, "work": view})
    else:
        line = f"{args.work}: priority {args.priority}; {view.state}"
        print(_noted(done, line, f"{args.work}: priority is {args.priority} already"))
    return 0


def _operator(parser: argparse.ArgumentParser, who: str) -> None:
    parser.add_argument("--by", default="operator", help=f"who {who} (recorded in the log)")
    parser.add_argument(
        "--request-id",
        metavar="ID",
        help="names this request in the log: run again with the same id after a timeout or "
        "crash and nothing is recorded twice ([A-Za-z0-9._:@/-], at most 200)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", choices=TARGETS, metavar="TARGET", help=TARGET_HELP)
    parser.add_argument("name", metavar="NAME", help="the pool's, key's or scope's name")


def register(commands: Any) -> None:
    pause = commands.add_parser(
        "pause",
        help="pause a pool, a key or a scope: its ready Work waits, nothing is deleted",
        description="Hold back the ready Work of a pool, of a concurrency key (only Work "
        "carrying it) or of a scope (and the scopes below it) until `rota resume`. Running "
        "attempts go on; no Work is deleted or re-queued. For schedules: rota schedule pause.",
    )
    _target(pause)
    pause.add_argument("--reason", help="why (recorded in the log, shown on the held Work)")
    _operator(pause, "pauses")
    pause.set_defaults(handler=cmd_pause)

    resume = commands.add_parser(
        "resume",
        help="resume a paused pool, key or scope (its Work starts at the next pass)",
        description="Resume what `rota pause` paused; `not_paused` if it is not paused. "
        "For schedules: rota schedule resume.",
    )
    _target(resume)
    _operator(resume, "resumes")
    resume.set_defaults(handler=cmd_resume)

    paused = commands.add_parser(
        "paused", help="list the paused pools, keys and scopes, why and since when"
    )
    paused.add_argument("--json", action="store_true", help="print JSON")
    paused.set_defaults(handler=cmd_paused)

    priority = commands.add_parser(
        "priority",
        help="change a Work's priority (higher starts first; the next pass orders by it)",
    )
    priority.add_argument("work", metavar="WORK")
    priority.add_argument(
        "priority",
        type=int,
        metavar="N",
        help=f"an integer from {-MAX_PRIORITY} to {MAX_PRIORITY} (the default is 0)",
    )
    priority.add_argument("--reason", help="why (recorded in the log)")
    _operator(priority, "changes it")
    priority.set_defaults(handler=cmd_priority)


__all__ = ["register"]
