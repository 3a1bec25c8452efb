"""`rota schedule apply | list | show | next | history | pause | resume | remove | trigger |
backfill`, and `rota explain schedule NAME --at TIME`.

`apply` defines every `[[schedules]]` table of the config (an event per change; unchanged
ones write nothing), names the schedules a config defined that this one no longer has, and
with `--prune` removes them (`--dry-run`: what it would do). The others name one
schedule. Times are ISO 8601 (`2026-03-08T07:00Z`; without an offset, UTC). Every command
prints JSON with `--json`.
"""

from __future__ import annotations

import argparse
import logging
from datetime import UTC, datetime
from typing import Any

from msgspec import UnsetType

from rota.application.errors import PortCode
from rota.application.queries.schedule_views import ScheduleApplyPlan, ScheduleView
from rota.cli.common import UsageError, config_path, count, load_config, open_rota, print_json
from rota.domain.errors import RotaError
from rota.domain.schedule_specs import rfc3339
from rota.infrastructure.config import DEFAULT_CONFIG, Config, EntryCode
from rota.infrastructure.decision_lines import FIELDS_ATTRIBUTE
from rota.scheduler import Scheduler

log = logging.getLogger("rota.schedules")


def parse_time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(f"{text!r} is not an ISO 8601 time (2026-03-08T07:00Z)") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _print(value: Any, as_json: bool, lines: list[str]) -> int:
    if as_json:
        print_json(value)
    else:
        print("\n".join(lines) if lines else "(nothing)")
    return 0


def _line(view: ScheduleView) -> str:
    extra = f" ({view.quarantined})" if view.quarantined else ""
    stuck = f"; STUCK: {view.health_reason}" if view.health == "stuck" else ""
    return (
        f"{view.name}: {view.state}{extra}, v{view.version} {view.spec!r} "
        f"{view.timezone} -> {view.binding}, boundary {view.boundary}, "
        f"{view.fired} fired, {view.skipped} skipped{stuck}"
    )


def cmd_apply(args: argparse.Namespace) -> int:
    config = load_config(args)
    if args.prune and config_path(args)[0] is None and not DEFAULT_CONFIG.exists():
        raise RotaError(
            f"--prune reads no config file here (no --config, no $ROTA_CONFIG, no "
            f"./{DEFAULT_CONFIG}), so it would remove every schedule a config defined: "
            "name the file with --config FILE",
            code=EntryCode.NO_CONFIG_FILE,
        )
    if args.dry_run:
        plan = _plan(args, config)
        lines = [f"{name}: new" for name in plan.new]
        lines += [f"{name}: changed" for name in plan.changed]
        lines += [f"{name}: unchanged" for name in plan.unchanged]
        verb = "would be removed" if args.prune else "would stay (add --prune to remove it)"
        lines += [f"{name}: not in the config: {verb}" for name in plan.not_in_config]
        lines.append("dry run: nothing written")
        return _print(plan, args.json, lines)
    with open_rota(args, runs=True) as scheduler:
        before = scheduler.store.head().position
        versions = scheduler.schedules.apply(config.schedules, actor=args.actor)
        pruned = (
            scheduler.schedules.prune(
                config.schedules,
                actor=args.actor,
                reason=f"not in {config.source}'s [[schedules]] (rota schedule apply --prune)",
            )
            if args.prune
            else []
        )
        stale = scheduler.schedules.not_in_config(config.schedules)
        written = scheduler.store.head().position - before
    lines = [f"{name}: version {v}" for name, v in versions.items()]
    lines += [f"{name}: removed (not in the config)" for name in pruned]
    lines += [not_in_config_line(name) for name in stale]
    lines.append(f"{len(versions)} schedule(s) applied, {written} event(s) written")
    result = {"versions": versions, "written": written, "pruned": pruned, "not_in_config": stale}
    return _print(result, args.json, lines)


def _plan(args: argparse.Namespace, config: Config) -> ScheduleApplyPlan:
    """What applying `config` would do; a store that does not exist yet has nothing."""
    try:
        with open_rota(args, read_only=True) as scheduler:
            return scheduler.schedules.apply_plan(config.schedules)
    except RotaError as exc:
        if exc.code != PortCode.STORE_NOT_FOUND:
            raise
    return ScheduleApplyPlan(
        new=sorted(config.schedules), changed=[], unchanged=[], not_in_config=[]
    )


def not_in_config_line(name: str) -> str:
    """What `rota schedule apply`, `rota config validate` and `rota run` say of a schedule
    a config defined that the config no longer has."""
    return (
        f"schedule {name} is in the store but not in the config; run `rota schedule apply "
        "--prune` to remove it"
    )


def cmd_list(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        views = scheduler.schedules.list()
    return _print(views, args.json, [_line(v) for v in views])


def cmd_show(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        view = scheduler.schedules.show(args.name)
    lines = [_line(view)]
    lines += [
        f"  v{v.version} since {v.since}: {v.spec!r} {v.timezone} -> "
        f"{v.binding} (by {v.actor or '?'}{': ' + v.reason if v.reason else ''})"
        for v in view.versions or []
    ]
    return _print(view, args.json, lines)


def cmd_next(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        found = scheduler.schedules.next(args.name, args.n)
    lines = [
        f"{t.nominal}  ({t.local})  due {t.due}"
        + (f"  [dst {t.dst}]" if t.dst else "")
        + ("  [paused]" if t.paused else "")
        for t in found
    ]
    return _print(found, args.json, lines)


def cmd_history(args: argparse.Namespace) -> int:
    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    with open_rota(args) as scheduler:
        found = scheduler.schedules.history(args.name, since=since, until=until, limit=args.limit)
    lines = []
    for e in found:
        if e.status == "fired":
            lines.append(f"{e.nominal}  fired   {e.work} {e.outcome or ''} @{e.position}")
        else:
            lines.append(f"{e.nominal}  {e.status}  {e.reason} @{e.position}")
    return _print(found, args.json, lines)


def _change(what: str) -> Any:
    def cmd(args: argparse.Namespace) -> int:
        with open_rota(args) as scheduler:
            getattr(scheduler.schedules, what)(args.name, actor=args.actor, reason=args.reason)
            view = None if what == "remove" else scheduler.schedules.show(args.name)
        if view is None:
            return _print(
                {"name": args.name, "removed": True}, args.json, [f"{args.name}: removed"]
            )
        return _print(view, args.json, [_line(view)])

    return cmd


def cmd_trigger(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        fired = scheduler.schedules.trigger_now(
            args.name, key=args.key, actor=args.actor, request_id=args.request_id
        )
    if fired is None:
        line = f"{args.name}: that key fired already"
    elif fired.repeated:
        line = (
            f"{args.name}: {fired.identity} fired already (position {fired.position}); nothing new"
        )
    else:
        line = f"{args.name}: fired {fired.identity}"
    return _print(fired, args.json, [line])


def cmd_backfill(args: argparse.Namespace) -> int:
    start, end = parse_time(args.start), parse_time(args.end)
    with open_rota(args) as scheduler:
        done = scheduler.schedules.backfill(args.name, start, end)
    line = f"{args.name}: {done.fired} fired, {done.already_fired} had fired already"
    return _print(done, args.json, [line])


def cmd_explain_schedule(args: argparse.Namespace) -> int:
    at = parse_time(args.at) if args.at else None
    with open_rota(args) as scheduler:
        found = scheduler.schedules.explain(args.name, at or scheduler.queries.state.now())
    nominal = found.at if isinstance(found.nominal, UnsetType) else found.nominal
    lines = [f"{found.schedule} at {nominal}: {found.verdict}"]
    lines.append(f"  {found.why}")
    if not isinstance(found.note, UnsetType):
        lines.append(f"  ({found.note})")
    if not isinstance(found.position, UnsetType):
        lines.append(f"  event at position {found.position}")
    return _print(found, args.json, lines)


def warn_not_in_config(scheduler: Scheduler) -> None:
    """`rota run` at start: a warning line for each schedule a config defined that this
    config no longer has (it keeps firing until `rota schedule apply --prune`)."""
    for name in scheduler.schedules.not_in_config(scheduler.config.schedules):
        fields = {"kind": "schedule", "schedule": name}
        log.warning(not_in_config_line(name), extra={FIELDS_ATTRIBUTE: fields})


def register(commands: Any) -> None:
    schedule = commands.add_parser("schedule", help="define, pause, trigger and look at schedules")
    sub = schedule.add_subparsers(dest="schedule_command", required=True, metavar="COMMAND")

    def add(name: str, handler: Any, help: str, *, named: bool = True) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(name, help=help)
        if named:
            parser.add_argument("name", metavar="NAME")
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.set_defaults(handler=handler)
        return parser

    apply = add("apply", cmd_apply, "define every [[schedules]] table of the config", named=False)
    apply.add_argument("--actor", default="config", help="recorded as who applied them")
    apply.add_argument(
        "--prune",
        action="store_true",
        help="also remove the schedules a config defined that this config no longer has "
        "(never those defined through the API)",
    )
    apply.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be defined, changed and removed; write nothing",
    )
    add("list", cmd_list, "every schedule with its state and boundary", named=False)
    add("show", cmd_show, "one schedule and its versions")
    nxt = add("next", cmd_next, "the next nominal times, with DST and jitter flags")
    nxt.add_argument("-n", type=count, default=10, help="how many (default 10)")
    hist = add("history", cmd_history, "every nominal time: fired (Work, outcome) or skipped")
    hist.add_argument("--since", metavar="TIME")
    hist.add_argument("--until", metavar="TIME")
    hist.add_argument("--limit", type=count, default=100, help="the newest N (default 100)")
    for what, help in (
        ("pause", "pause it"),
        ("resume", "resume it (or release a quarantine)"),
        ("remove", "remove it (fires made stay)"),
    ):
        change = add(what, _change(what), help)
        change.add_argument("--actor", default="cli", help="recorded as who did it")
        change.add_argument("--reason", default="", help="recorded with the change")
    trigger = add("trigger", cmd_trigger, "fire now (its own identity)")
    trigger.add_argument("--key", help="the fire's key (default: now); a repeated key is a no-op")
    trigger.add_argument("--actor", default="cli", help="recorded as who triggered it")
    trigger.add_argument(
        "--request-id",
        metavar="ID",
        help="the fire's key, as a request: a repeat prints the first fire (exit 0)",
    )
    backfill = add("backfill", cmd_backfill, "fire every nominal time in a range (live identities)")
    backfill.add_argument("start", metavar="START")
    backfill.add_argument("end", metavar="END")


__all__ = ["cmd_explain_schedule", "parse_time", "register", "rfc3339"]
