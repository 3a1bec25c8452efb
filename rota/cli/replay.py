"""Commands on projections: replay verify, replay rebuild, replay at, explain.

The projection store is `--projections FILE`, else `<log file>.projections` beside an
SQLite log, or the PostgreSQL log's own schema (`rota.bootstrap.projection_store`).
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from rota import bootstrap
from rota.application.errors import PortCode
from rota.application.ports import EventStore, ProjectionStore
from rota.application.service import SchedulerService
from rota.application.timestamps import parse_timestamp
from rota.cli.common import (
    UsageError,
    load_config,
    open_log,
    print_json,
    projections_option,
)
from rota.cli.run_logs import log_options, progress_logging
from rota.domain.errors import RotaError


def _projections(
    args: argparse.Namespace, store: EventStore, *, must_exist: bool
) -> ProjectionStore:
    """The projection store of `store` (`--projections` overrides; see the docstring)."""
    found = bootstrap.projection_store(store, args.projections or None, must_exist=must_exist)
    if found is None:
        raise UsageError("this store keeps no projections: name a file (--projections)")
    return found


def _service(args: argparse.Namespace, store: EventStore) -> SchedulerService:
    """A read-only service with the config's settings and bindings (as `rota run` has)."""
    return bootstrap.read_only_service(store, load_config(args))


def cmd_verify(args: argparse.Namespace) -> int:
    from rota.replay.rebuild import verify

    with (
        progress_logging(args) as progress,
        open_log(args) as store,
        _projections(args, store, must_exist=True) as projections,
    ):
        report = verify(store, projections, progress=progress)
        where = projections.where
    if args.json:
        print_json({**msgspec.to_builtins(report), "path": where})
        return 0 if report.ok else 1
    for v in report.projections:
        at = f" at position {v.position}" if v.position is not None else ""
        line = f"{v.name}: {v.status}{at}"
        if v.first_key:
            line += f", first differing key {v.first_key}"
        if v.detail:
            line += f" ({v.detail})"
        print(line)
    drift = report.drift
    if drift is not None:
        print(f"DRIFT in {drift.name}: 'rota replay rebuild' rebuilds it from the log")
    return 0 if report.ok else 1


def cmd_rebuild(args: argparse.Namespace) -> int:
    from rota.replay.rebuild import rebuild

    with (
        progress_logging(args) as progress,
        open_log(args) as store,
        _projections(args, store, must_exist=False) as projections,
    ):
        try:
            report = rebuild(store, projections, args.projection, progress=progress)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        where = projections.where
    if args.json:
        print_json({**msgspec.to_builtins(report), "path": where})
    else:
        names = ", ".join(report.projections)
        print(f"rebuilt {names} at position {report.position} in {report.seconds:.3f} s: {where}")
    return 0


def cmd_at(args: argparse.Namespace) -> int:
    from rota.replay.timetravel import state_at

    when = None
    if args.time is not None:
        try:
            when = parse_timestamp(args.time)
        except ValueError as exc:
            raise UsageError(f"--time {args.time!r}: {exc} (e.g. 2026-07-01T12:00:00Z)") from None
    config = load_config(args)
    with open_log(args) as store:
        state = state_at(store, position=args.position, time=when, settings=config.settings)
    if args.json:
        print_json(state)
    else:
        _print_state(state)
    return 0


def _print_state(state: dict[str, Any]) -> None:
    print(f"position {state['position']} (recorded {state['recorded_at'] or '-'})")
    works = state["scheduler"]["works"]
    print(f"{len(works)} Work")
    for work_id, view in works.items():
        print(f"  {work_id}: {view['state']} ({len(view['attempts'])} attempts)")
    for pool, cap in state["capacity"]["pools"].items():
        limit = "?" if cap["limit"] is None else cap["limit"] or "unbounded"
        holders = ", ".join(cap["holders"])
        print(f"pool {pool}: {cap['in_use']}/{limit}" + (f" ({holders})" if holders else ""))
    for hold in state["holds"]:
        print(
            f"held {hold['work']}: {hold['kind']} by {hold['holder']} at position "
            f"{hold['position']}: {hold['reason']}"
        )
    for note in state.get("pruned", []):
        print(f"positions {note['first']}..{note['last']}: {note['text']}")


def cmd_explain(args: argparse.Namespace) -> int:
    from rota.replay.explain import explain

    if args.name is not None:  # `rota explain schedule NAME --at TIME`
        if args.work != "schedule":
            raise UsageError("explain takes WORK, or: schedule NAME [--at TIME]")
        from rota.cli.schedule import cmd_explain_schedule

        return cmd_explain_schedule(args)

    with open_log(args) as store:
        service = _service(args, store)
        try:
            projections: ProjectionStore | None = _projections(args, store, must_exist=True)
        except RotaError as exc:
            if exc.code != PortCode.NO_PROJECTION_STORE:
                raise
            projections = None  # explain folds the log instead
        try:
            found = explain(store, args.work, service=service, projections=projections)
        finally:
            if projections is not None:
                projections.close()
    if args.json:
        print_json(found)
    else:
        print("\n".join(found.lines()))
    return 0


def register(commands: Any) -> None:
    replay = commands.add_parser("replay", help="verify, rebuild and travel through projections")
    sub = replay.add_subparsers(dest="replay_command", required=True, metavar="COMMAND")

    verify = sub.add_parser(
        "verify",
        help="compare stored projections with a rebuild (exit 1 on drift)",
        description="Fold the log from position 0 into scratch projections and compare their "
        "digests with the stored ones; on drift name the projection and the first key.",
    )
    projections_option(verify)
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    log_options(verify)
    verify.set_defaults(handler=cmd_verify)

    rebuild = sub.add_parser(
        "rebuild", help="rebuild stored projections from the log and swap them in atomically"
    )
    rebuild.add_argument("--projection", metavar="NAME", help="only this projection")
    projections_option(rebuild)
    rebuild.add_argument("--json", action="store_true", help="print the report as JSON")
    log_options(rebuild)
    rebuild.set_defaults(handler=cmd_rebuild)

    at = sub.add_parser(
        "at", help="the scheduler, capacity and holds state as of a position or a time"
    )
    when = at.add_mutually_exclusive_group(required=True)
    when.add_argument("--position", type=int, metavar="N", help="as of log position N")
    when.add_argument(
        "--time", metavar="ISO8601", help="as of the last event recorded at or before then"
    )
    at.add_argument("--json", action="store_true", help="print the state as JSON")
    at.set_defaults(handler=cmd_at)

    explain = commands.add_parser(
        "explain", help="why a Work is waiting, held, retrying or failed, citing positions"
    )
    explain.add_argument("work", metavar="WORK", help="a Work id, or `schedule` and its NAME")
    explain.add_argument("name", metavar="NAME", nargs="?", help=argparse.SUPPRESS)
    explain.add_argument("--at", metavar="TIME", help="with `schedule NAME`: the nominal time")
    projections_option(explain)
    explain.add_argument("--json", action="store_true", help="print the explanation as JSON")
    explain.set_defaults(handler=cmd_explain)
