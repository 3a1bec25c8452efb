"""Commands on Work: submit, accept, retry, release, cancel, inject, interrupt, capacity,
work show, work list (`rota run` is rota.cli.run)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, get_args

import msgspec

from rota.application.queries.work_views import WorkSummary, WorkView
from rota.cli.app import app_option
from rota.cli.common import UsageError, open_rota, print_json, read_input
from rota.domain.errors import DomainCode, RotaError
from rota.domain.state import WorkStateName
from rota.embedded.submission_values import Submission
from rota.projections.work_pages import MAX_LIMIT
from rota.scheduler import Scheduler

STATE_ORDER: tuple[str, ...] = get_args(WorkStateName)
INPUT_HELP = "the input payload: JSON, @FILE (a JSON file) or - (JSON on stdin)"

# -- reading Work ------------------------------------------------------------------------


def work_view(scheduler: Scheduler, work_id: str) -> WorkView:
    """`Scheduler.work`, or `unknown_work`."""
    view = scheduler.work(work_id)
    if view is None:
        raise RotaError(f"no Work {work_id!r} in this store", code=DomainCode.UNKNOWN_WORK)
    return view


def states(counts: Counter[str]) -> dict[str, int]:
    """Works per state, in the states' order."""
    return {state: counts[state] for state in STATE_ORDER if state in counts}


def state_line(counts: Counter[str]) -> str:
    total = sum(counts.values())
    if not total:
        return "no Work"
    listed = ", ".join(f"{n} {state}" for state, n in states(counts).items())
    return f"{total} Work: {listed}"


def _describe(view: WorkView) -> list[str]:
    """A readable rendering of one Work view."""
    lines = [
        f"{view.id}: {view.state}  (binding {view.binding}, scope {view.scope}, "
        f"{view.kind}, submitted {view.submitted_at})"
    ]
    if view.pending:
        keys = ", ".join(p.key for p in view.pending)
        lines.append(f"  pending input: {keys}")
    for attempt in view.attempts:
        line = f"  attempt {attempt.number} (epoch {attempt.epoch}): {attempt.state}"
        if attempt.outcome:
            line += f", {attempt.outcome}"
        elif attempt.released:
            line += " (lease released)"
        if attempt.error:
            line += f", {attempt.error.code}: {attempt.error.message}"
        lines.append(line)
        if attempt.data is not None:
            lines.append(f"    data: {msgspec.json.encode(attempt.data).decode()}")
    retry = view.retry
    if retry.blocked_reason == "permanent_failure":
        # The domain counts a permanent failure as the whole budget spent (no retry is
        # left), but the line reads as attempts made of attempts allowed: all it got.
        made = len(view.attempts)
        lines.append(f"  failures: {made} of {made} (permanent: not retried)")
    elif retry.failures:
        budget = f" of {retry.budget}" if retry.budget else ""
        lines.append(f"  failures: {retry.failures}{budget}")
    if retry.next_due:
        lines.append(f"  retry due: {retry.next_due}")
    if retry.blocked_reason:
        lines.append(f"  blocked: {retry.blocked_reason}")
    if view.waiting:
        lines.append(f"  waiting: {view.waiting.code}: {view.waiting.detail}")
    return lines


# -- commands ----------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace) -> int:
    submission = Submission(
        args.work,
        binding=args.binding,
        input=read_input(args.input) if args.input is not None else msgspec.UNSET,
        input_key=args.input_key,
        correlation_key=args.correlation_key,
        scope=args.scope,
        kind=args.kind,
        trigger=args.trigger,
        safety=args.safety,
    )
    with open_rota(args, runs=True) as scheduler:
        before = scheduler.store.head().position
        scheduler.submit_one(submission)
        written = scheduler.store.head().position - before
        view = work_view(scheduler, args.work)
    if args.json:
        print_json(view)
        return 0
    what = "submitted" if written else "unchanged"
    line = f"{view.id}: {what}, {view.state} (binding {view.binding}, "
    line += f"scope {view.scope}, {len(view.pending)} pending input)"
    if view.waiting:
        line += f"; waiting: {view.waiting.code}"
    print(line)
    return 0


def cmd_accept(args: argparse.Namespace) -> int:
    payload = read_input(args.input) if args.input is not None else None
    with open_rota(args) as scheduler:
        position = scheduler.accept(
            args.work, payload, key=args.input_key, correlation_key=args.correlation_key
        )
        view = work_view(scheduler, args.work)
    if args.json:
        print_json({"position": position, "work": view})
    else:
        print(f"{args.work}: input at position {position}; {view.state}")
    return 0


def _act(
    args: argparse.Namespace,
    act: Callable[[Scheduler], object],
    line: Callable[[WorkView], str],
) -> int:
    """Run one operator command on `args.work`, then print its view (`--json`) or `line`."""
    with open_rota(args) as scheduler:
        act(scheduler)
        view = work_view(scheduler, args.work)
    if args.json:
        print_json(view)
    else:
        print(line(view))
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    return _act(
        args,
        lambda s: s.retry(args.work, reason=args.reason or "", requested_by=args.by),
        lambda view: f"{args.work}: retry requested; {view.state} (failures {view.retry.failures})",
    )


def cmd_release(args: argparse.Namespace) -> int:
    return _act(
        args,
        lambda s: s.release(args.work, kind=args.kind, by=args.by),
        lambda view: f"{args.work}: hold released; {view.state}",
    )


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a Work. One that is already cancelled is what was asked for: exit 0 with
    "already cancelled" (nothing recorded); a completed or failed one stays `work_terminal`."""
    with open_rota(args) as scheduler:
        try:
            scheduler.cancel(args.work, reason=args.reason or "", by=args.by)
            line = f"{args.work}: cancelled"
        except RotaError as exc:
            if exc.code != DomainCode.WORK_TERMINAL:
                raise
            if work_view(scheduler, args.work).state != "cancelled":
                raise
            line = f"{args.work}: already cancelled (nothing recorded)"
        view = work_view(scheduler, args.work)
    if args.json:
        print_json(view)
    else:
        print(line)
    return 0


def cmd_inject(args: argparse.Namespace) -> int:
    payload = read_input(args.input)
    return _act(
        args,
        lambda s: s.inject(args.work, payload, key=args.input_key, by=args.by),
        lambda view: f"{args.work}: inject requested; it is delivered by the running daemon",
    )


def cmd_interrupt(args: argparse.Namespace) -> int:
    return _act(
        args,
        lambda s: s.interrupt(args.work, by=args.by),
        lambda view: f"{args.work}: attempt fenced, Work {view.state}; the interrupt follows",
    )


def cmd_capacity(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        view = scheduler.capacity()
    if args.json:
        print_json(view)
        return 0
    for pool, numbers in view["pools"].items():
        limit = numbers["limit"] or "unbounded"  # a limit of 0 is unbounded
        print(f"{pool:<8} {numbers['in_use']}/{limit} in use, {numbers['waiting']} waiting")
    for scope, use in view["scopes"].items():
        print(f"scope {scope}: {use['in_use']}/{use['limit']} in use")
    for item in view["waiting"]:
        print(f"  {item['work']}: {item['code']}: {item['detail']}")
    return 0


def _cancelled_line(scheduler: Scheduler, work_id: str) -> str | None:
    """`cancelled by WHO at TIME: REASON`, the Work's last cancellation."""
    found = scheduler.queries.works.cancellation(work_id)
    if found is None:
        return None
    reason = " ".join(found.reason.split()) or "(no reason given)"
    return f"  cancelled by {found.by} at {found.at}: {reason}"


def cmd_work_show(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        view = work_view(scheduler, args.work)
        cancelled = _cancelled_line(scheduler, args.work) if view.state == "cancelled" else None
    if args.json:
        print_json(view)
    else:
        print("\n".join([*_describe(view), *([cancelled] if cancelled else [])]))
    return 0


HEADER = ("WORK", "STATE", "BINDING", "SCOPE", "ATTEMPTS", "LAST OUTCOME")


def _table_rows(works: list[WorkSummary]) -> list[tuple[str, ...]]:
    return [
        (w.id, w.state, w.binding, w.scope, str(w.attempts), note)
        for w in works
        for note in [w.last_outcome or w.waiting or "-"]
    ]


def _print_table(rows: list[tuple[str, ...]], widths: list[int]) -> None:
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())


def _pages(scheduler: Scheduler, args: argparse.Namespace) -> Iterator[list[WorkSummary]]:
    """The pages a listing prints: one (`--limit`) or every page from `--after` on."""
    after: str | None = args.after or ""
    while after is not None:
        page, after = scheduler.works_page(
            state=args.state,
            scope=args.scope,
            binding=args.binding,
            after=after,
            limit=args.limit or MAX_LIMIT,
        )
        args.next_cursor = after
        yield page
        if args.limit:
            return


def cmd_work_list(args: argparse.Namespace) -> int:
    """List Works in id order a page at a time, so no listing holds every Work: every
    matching Work (a JSON array with `--json`), or one page with `--limit` (a JSON object
    with the page's `works` and the `next` cursor, for `--after`)."""
    if args.limit is not None and not 1 <= args.limit <= MAX_LIMIT:
        raise UsageError(f"--limit takes 1 to {MAX_LIMIT}")
    counts: Counter[str] = Counter()
    widths: list[int] | None = None
    with open_rota(args) as scheduler:
        if args.json and args.limit:
            works = next(_pages(scheduler, args))
            print_json({"works": works, "next": args.next_cursor})
            return 0
        if args.json:
            sys.stdout.write("[")
        first = True
        for page in _pages(scheduler, args):
            counts.update(w.state for w in page)
            if args.json:
                for work in page:
                    sys.stdout.write(("" if first else ",") + msgspec.json.encode(work).decode())
                    first = False
                continue
            rows = _table_rows(page)
            if widths is None:
                widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
                rows.insert(0, HEADER)
            _print_table(rows, widths)
    if args.json:
        sys.stdout.write("]\n")
        return 0
    print(state_line(counts))
    if args.limit and args.next_cursor is not None:
        print(f"more: --after {args.next_cursor}")
    return 0


# -- registration --------------------------------------------------------------------------


def _input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", metavar="JSON", help=INPUT_HELP)
    parser.add_argument(
        "--input-key", metavar="KEY", help="the input's idempotency key (default: derived)"
    )
    parser.add_argument("--correlation-key", metavar="KEY", help="carried with the input")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _operator_options(
    parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int], who: str = "asks"
) -> None:
    """What every operator command ends with: who acts (logged), `--json`, its handler."""
    parser.add_argument("--by", default="operator", help=f"who {who} (recorded in the log)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=handler)


def register(commands: Any) -> None:
    submit = commands.add_parser("submit", help="define a Work and give it input")
    submit.add_argument("work", metavar="WORK", help="the Work id")
    submit.add_argument("--binding", required=True, help="a binding from the config")
    submit.add_argument("--scope", default="root", help="scope path (default: root)")
    submit.add_argument("--kind", choices=("run-once", "standing"), default="run-once")
    submit.add_argument("--trigger", choices=("all", "first", "last"), default="all")
    submit.add_argument(
        "--safety", choices=("undeclared", "idempotent", "deduplicated"), default="undeclared"
    )
    _input_options(submit)
    app_option(submit)
    submit.set_defaults(handler=cmd_submit)

    accept = commands.add_parser("accept", help="give an existing Work one more input")
    accept.add_argument("work", metavar="WORK")
    _input_options(accept)
    accept.set_defaults(handler=cmd_accept)

    retry = commands.add_parser(
        "retry", help="manually retry a failed Work (resets its failure budget)"
    )
    retry.add_argument("work", metavar="WORK")
    retry.add_argument("--reason", help="why (recorded in the log)")
    _operator_options(retry, cmd_retry)

    release = commands.add_parser(
        "release", help="release an operator-releasable hold (crash_loop, budget, operator)"
    )
    release.add_argument("work", metavar="WORK")
    release.add_argument("--kind", help="which hold (default: the first one)")
    _operator_options(release, cmd_release, who="releases")

    cancel = commands.add_parser("cancel", help="cancel a Work (fences its attempt and timers)")
    cancel.add_argument("work", metavar="WORK")
    cancel.add_argument("--reason", help="why (recorded in the log)")
    _operator_options(cancel, cmd_cancel, who="cancels")

    inject = commands.add_parser("inject", help="give the running attempt an input now")
    inject.add_argument("work", metavar="WORK")
    inject.add_argument("--input", required=True, metavar="JSON", help=INPUT_HELP)
    inject.add_argument("--input-key", metavar="KEY", help="idempotency key (default: derived)")
    _operator_options(inject, cmd_inject)

    interrupt = commands.add_parser("interrupt", help="fence and interrupt the running attempt")
    interrupt.add_argument("work", metavar="WORK")
    _operator_options(interrupt, cmd_interrupt)

    capacity = commands.add_parser("capacity", help="pools, scope limits and who waits why")
    capacity.add_argument("--json", action="store_true")
    capacity.set_defaults(handler=cmd_capacity)

    work = commands.add_parser("work", help="read Work")
    work_commands = work.add_subparsers(dest="work_command", required=True, metavar="COMMAND")
    show = work_commands.add_parser("show", help="one Work with its attempts")
    show.add_argument("work", metavar="WORK")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_work_show)
    listing = work_commands.add_parser("list", help="Works in id order, a page at a time")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--state", choices=STATE_ORDER, help="only Works in this state")
    listing.add_argument("--scope", help="only Works in this scope or a scope under it")
    listing.add_argument("--binding", help="only Works on this binding")
    listing.add_argument(
        "--limit", type=int, metavar="N", help=f"one page of at most N Works (1-{MAX_LIMIT})"
    )
    listing.add_argument("--after", metavar="WORK", help="start after this Work id (a cursor)")
    listing.set_defaults(handler=cmd_work_list)
