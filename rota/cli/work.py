"""Commands on Work: submit, accept, retry, release, cancel, inject, interrupt, capacity,
and the registration of work show and work list (rota.cli.work_reads; `rota run` is
rota.cli.run_command)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import msgspec

from rota.application.commands.requests import Receipt
from rota.application.commands.waits import InjectAnswer
from rota.application.queries.work_views import WorkView
from rota.cli.app import app_option
from rota.cli.coalescing_options import add_coalescing_options, coalescing
from rota.cli.common import open_rota, print_json, read_input
from rota.cli.flow_options import flow_number, flow_options, throttle_option
from rota.cli.work_reads import STATE_ORDER, cmd_work_list, cmd_work_show, flow_line, work_view
from rota.domain.errors import DomainCode, RotaError
from rota.embedded.submission_values import Submission
from rota.projections.work_pages import MAX_LIMIT
from rota.scheduler import Scheduler

INPUT_HELP = "the input payload: JSON, @FILE (a JSON file) or - (JSON on stdin)"

# -- commands on Work ----------------------------------------------------------------------


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
        grants=tuple(args.grant or ()),
        priority=flow_number(args.priority, "--priority", 0),
        keys=tuple(args.key or ()),
        cost=flow_number(args.cost, "--cost", 1),
        throttle=throttle_option(args.throttle),
        personal=tuple(args.personal or ()),
    )
    submission = msgspec.structs.replace(submission, **coalescing(args))
    with open_rota(args, runs=True) as scheduler:
        before = scheduler.store.head().position
        went_to = scheduler.submit_one(submission).work_id  # (merged or suppressed: another)
        written = scheduler.store.head().position - before
        view = work_view(scheduler, went_to)
    if args.json:
        print_json(view)
        return 0
    what = "submitted" if written else "unchanged"
    if went_to != args.work:
        what = f"took the submit of {args.work}"
    line = f"{view.id}: {what}, {view.state} (binding {view.binding}, "
    line += f"scope {view.scope}, {len(view.pending)} pending input)"
    if flow := flow_line(view):
        line += f"; flow: {flow}"
    if view.waiting:
        line += f"; waiting: {view.waiting.code}"
    print(line)
    return 0


def cmd_accept(args: argparse.Namespace) -> int:
    payload = read_input(args.input) if args.input is not None else None
    with open_rota(args) as scheduler:
        position = scheduler.accept(
            args.work,
            payload,
            key=args.input_key,
            correlation_key=args.correlation_key,
            personal=tuple(args.personal or ()),
        )
        view = work_view(scheduler, args.work)
    if args.json:
        print_json({"position": position, "work": view})
    else:
        print(f"{args.work}: input at position {position}; {view.state}")
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    """Forget a Work's personal data (its key destroyed, `core.work.forgotten` recorded once)."""
    with open_rota(args) as scheduler:
        position = scheduler.forget(args.work, by=args.by, reason=args.reason or "")
    if args.json:
        print_json({"work": args.work, "forgotten": True, "position": position})
    else:
        print(f"{args.work}: personal data forgotten (recorded at position {position})")
    return 0


def _act(
    args: argparse.Namespace,
    act: Callable[[Scheduler], object],
    line: Callable[[WorkView], str],
) -> int:
    """Run one operator command on `args.work`, then print its view (`--json`) or `line`
    (and, for a repeated `--request-id`, what recorded it first)."""
    with open_rota(args) as scheduler:
        done = act(scheduler)
        view = work_view(scheduler, args.work)
    if args.json:
        print_json(view)
    else:
        print(line(view) + _repeated(done))
    return 0


def _repeated(done: object) -> str:
    """` (request R was recorded at position N; nothing new recorded)` for a repeat."""
    if isinstance(done, Receipt) and done.repeated and done.request_id is not None:
        return (
            f" (request {done.request_id} was recorded at position {done.position}; "
            "nothing new recorded)"
        )
    return ""


def cmd_retry(args: argparse.Namespace) -> int:
    return _act(
        args,
        lambda s: s.retry(
            args.work,
            reason=args.reason or "",
            requested_by=args.by,
            request_id=args.request_id,
        ),
        lambda view: f"{args.work}: retry requested; {view.state} (failures {view.retry.failures})",
    )


def cmd_release(args: argparse.Namespace) -> int:
    return _act(
        args,
        lambda s: s.release(args.work, kind=args.kind, by=args.by, request_id=args.request_id),
        lambda view: f"{args.work}: hold released; {view.state}",
    )


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a Work. One that is already cancelled is what was asked for: exit 0 with
    "already cancelled" (nothing recorded); a completed or failed one stays `work_terminal`."""
    with open_rota(args) as scheduler:
        try:
            done = scheduler.cancel(
                args.work, reason=args.reason or "", by=args.by, request_id=args.request_id
            )
            line = f"{args.work}: cancelled" + _repeated(done)
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
    answers: list[InjectAnswer] = []

    def act(scheduler: Scheduler) -> Receipt | None:
        answer = scheduler.inject(
            args.work, payload, key=args.input_key, by=args.by, request_id=args.request_id
        )
        answers.append(answer)
        return answer.request

    return _act(args, act, lambda view: _injected(args.work, answers[0]))


def _injected(work: str, answer: InjectAnswer) -> str:
    if answer.delivery == "wake":
        return f"{work}: input {answer.key} matches the wait; the parked attempt resumes"
    if answer.delivery == "queued":
        return f"{work}: input {answer.key} queued: {answer.queued}"
    return f"{work}: inject requested; it is delivered by the running daemon"


def cmd_interrupt(args: argparse.Namespace) -> int:
    return _act(
        args,
        lambda s: s.interrupt(args.work, by=args.by, request_id=args.request_id),
        lambda view: f"{args.work}: attempt fenced, Work {view.state}; the interrupt follows",
    )


def cmd_confirm_stopped(args: argparse.Namespace) -> int:
    """Vouch that the Work's ended attempt's processes are gone, freeing its slot (for an
    attempt whose stop no executor can verify: its host is gone for good)."""
    with open_rota(args) as scheduler:
        view = work_view(scheduler, args.work)
        attempt = view.attempts[-1] if view.attempts else None
        if attempt is None or attempt.state != "ended":
            state = "has no attempt" if attempt is None else f"'s attempt is {attempt.state}"
            raise RotaError(
                f"Work {args.work!r} {state}: only an ended attempt's stop can be confirmed",
                code=DomainCode.NOT_ENDED,
            )
        done = attempt.stop_confirmed
        if not done:
            scheduler.confirm_stopped(attempt.execution, attempt.epoch, by=args.by)
        view = work_view(scheduler, args.work)
    if args.json:
        print_json(view)
    elif done:
        print(f"{args.work}: attempt {attempt.number}'s stop was already confirmed")
    else:
        print(
            f"{args.work}: attempt {attempt.number}'s stop confirmed by {args.by}; its slot is free"
        )
    return 0


def cmd_capacity(args: argparse.Namespace) -> int:
    with open_rota(args) as scheduler:
        view = scheduler.capacity()
    if args.json:
        print_json(view)
        return 0
    # `waiting` is the daemon's last start pass: this process runs none, so it is 0 here
    # (GET /v1/capacity of `rota run` has it); the dry run's preview is what waits now.
    for pool, numbers in view["pools"].items():
        limit = numbers["limit"] or "unbounded"  # a limit of 0 is unbounded
        print(
            f"{pool:<8} {numbers['in_use']}/{limit} in use, {numbers['waiting']} waiting "
            f"(last pass), {numbers['preview']} would wait now"
        )
    for scope, use in view["scopes"].items():
        print(f"scope {scope}: {use['in_use']}/{use['limit']} in use")
    for key, held in view["keys"].items():
        print(
            f"key {key}: {held['in_use']}/{held['limit']} in use, {held['waiting']} waiting "
            f"(last pass), {held['preview']} would wait now"
        )
    for name, bucket in view["buckets"].items():
        due = f", next token at {bucket['next_token']}" if bucket["next_token"] else ""
        print(
            f"rate {name}: {bucket['rate']}, {bucket['tokens']:.1f}/{bucket['burst']} tokens{due}"
        )
    for paused in view["paused"]:
        reason = f" ({paused['reason']})" if paused["reason"] else ""
        print(f"paused: {paused['target']} {paused['name']}{reason}")
    for item in view["waiting"]:
        print(f"  {item['work']}: {item['code']}: {item['detail']}")
    for item in view["preview"]:
        print(f"  would wait: {item['work']}: {item['code']}: {item['detail']}")
    return 0


# -- registration --------------------------------------------------------------------------


def _input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", metavar="JSON", help=INPUT_HELP)
    parser.add_argument(
        "--input-key", metavar="KEY", help="the input's idempotency key (default: derived)"
    )
    parser.add_argument("--correlation-key", metavar="KEY", help="carried with the input")
    parser.add_argument(
        "--personal",
        action="append",
        metavar="PATH",
        help="a personal field of the input (a dotted path, like address.street), sealed "
        "under the Work's own key until `rota forget` (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _operator_options(
    parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int], who: str = "asks"
) -> None:
    """What every operator command ends with: who acts (logged), `--json`, its handler."""
    parser.add_argument("--by", default="operator", help=f"who {who} (recorded in the log)")
    parser.add_argument(
        "--request-id",
        metavar="ID",
        help="names this request in the log: run again with the same id after a timeout or "
        "crash and nothing is recorded twice ([A-Za-z0-9._:@/-], at most 200)",
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=handler)


def register(commands: Any) -> None:
    submit = commands.add_parser("submit", help="define a Work and give it input")
    submit.add_argument("work", metavar="WORK", help="the Work id")
    submit.add_argument("--binding", required=True, help="a binding from the config")
    submit.add_argument("--scope", default="root", help="scope path (default: root)")
    submit.add_argument(
        "--grant",
        action="append",
        metavar="NAME",
        help="a binding grant from the config's [[grants]] the Work opts into (repeatable)",
    )
    flow_options(submit)
    submit.add_argument("--kind", choices=("run-once", "standing"), default="run-once")
    submit.add_argument("--trigger", choices=("all", "first", "last"), default="all")
    submit.add_argument(
        "--safety", choices=("undeclared", "idempotent", "deduplicated"), default="undeclared"
    )
    _input_options(submit)
    add_coalescing_options(submit)
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
        "release",
        help="release an operator-releasable hold "
        "(crash_loop, recovery_exhausted, budget, operator)",
    )
    release.add_argument("work", metavar="WORK")
    release.add_argument("--kind", help="which hold (default: the first one)")
    _operator_options(release, cmd_release, who="releases")

    cancel = commands.add_parser("cancel", help="cancel a Work (fences its attempt and timers)")
    cancel.add_argument("work", metavar="WORK")
    cancel.add_argument("--reason", help="why (recorded in the log)")
    _operator_options(cancel, cmd_cancel, who="cancels")

    forget = commands.add_parser(
        "forget",
        help="forget a Work's personal input fields: destroy their key, record that it was "
        "forgotten (not what); the log and its proofs still verify",
    )
    forget.add_argument("work", metavar="WORK")
    forget.add_argument("--reason", help="why, like a ticket number (recorded in the log)")
    forget.add_argument("--by", default="operator", help="who asks (recorded in the log)")
    forget.add_argument("--json", action="store_true")
    forget.set_defaults(handler=cmd_forget)

    inject = commands.add_parser(
        "inject",
        help="give the running attempt an input now (in-process executors take it, shell "
        "does not), or a parked attempt's wait an input",
    )
    inject.add_argument("work", metavar="WORK")
    inject.add_argument("--input", required=True, metavar="JSON", help=INPUT_HELP)
    inject.add_argument("--input-key", metavar="KEY", help="idempotency key (default: derived)")
    _operator_options(inject, cmd_inject)

    interrupt = commands.add_parser("interrupt", help="fence and interrupt the running attempt")
    interrupt.add_argument("work", metavar="WORK")
    _operator_options(interrupt, cmd_interrupt)

    confirm = commands.add_parser(
        "confirm-stopped",
        help="vouch that the ended attempt's processes are gone (frees its slot)",
        description="Record that the Work's ended attempt's processes are gone (evidence "
        "'operator: BY' in core.execution.stop_confirmed), freeing its capacity slot. Only "
        "for an attempt no executor can verify the stop of (its host is gone for good): "
        "check first that nothing of it runs. See docs/operator.md.",
    )
    confirm.add_argument("work", metavar="WORK")
    confirm.add_argument("--by", default="operator", help="who vouches (recorded in the log)")
    confirm.add_argument("--json", action="store_true")
    confirm.set_defaults(handler=cmd_confirm_stopped)

    capacity = commands.add_parser(
        "capacity",
        help="pools, scope limits and who waits why (a dry run now; waiting by the last "
        "start pass is the daemon's: GET /v1/capacity)",
    )
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
