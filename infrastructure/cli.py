"""The `rota` command line: `rota [--config FILE] [--store URL] <command> ...`.

The configuration is `--config FILE`, else `./rota.toml` (a missing default file means the
defaults; a missing named file is an error). The store is `--store URL`, else `$ROTA_STORE`,
else the config's `[store] url`. Bindings come from the config's `[[bindings]]`; the CLI
runs shell bindings (and any executor rota registers itself). Python callables cannot be
given here: Work bound to one stays `ready` (waiting `unknown_binding`) until a process
that registers it runs.

Each command prints its result on stdout (JSON with `--json`) and exits 0 on success. On
failure it prints one line on stderr, `rota: <code>: <what was wrong>`, and exits 2 for a
usage error or an invalid config, 1 otherwise (130 when interrupted).

`rota run` (the daemon) prints `rota: running (...)` on stderr once its SIGTERM/SIGINT
handlers are in place and `rota: stopped` when it has stopped, keeping stdout for its final
summary; the first signal stops it gracefully (leases released), a second one forces it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, get_args

import msgspec

from rota.domain.errors import RotaError
from rota.domain.state import WorkStateName
from rota.scheduler import Scheduler
from rota.scheduler import open as open_scheduler

from .config import DEFAULT_CONFIG, Config, ConfigError
from .store import EventStore
from .stores import open_store
from .views import event_json

Command = Callable[[argparse.Namespace], int]
USAGE_CODES = frozenset({"usage", ConfigError.code})
STATE_ORDER: tuple[str, ...] = get_args(WorkStateName)


class UsageError(RotaError):
    code = "usage"


class Parser(argparse.ArgumentParser):
    """argparse with rota's one-line errors (still exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"rota: usage: {message} (see '{self.prog} --help')\n")


# -- opening the config, the store and the scheduler --------------------------------------


def _config(args: argparse.Namespace) -> Config:
    return Config.load(args.config)


def _store_url(args: argparse.Namespace, config: Config) -> str:
    return args.store or os.environ.get("ROTA_STORE") or config.store_url


def _store(args: argparse.Namespace) -> EventStore:
    config = _config(args)
    return open_store(_store_url(args, config), synchronous=config.synchronous)


def _scheduler(args: argparse.Namespace) -> Scheduler:
    config = _config(args)
    return open_scheduler(_store_url(args, config), config=config)


def _print_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.encode(value).decode() + "\n")


def _parse_json(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option} is not valid JSON: {exc}") from None


# -- reading Work ------------------------------------------------------------------------


def work_view(scheduler: Scheduler, work_id: str) -> dict[str, Any]:
    """`Scheduler.work`, or `unknown_work`."""
    view = scheduler.work(work_id)
    if view is None:
        raise RotaError(f"no Work {work_id!r} in this store", code="unknown_work")
    return view


def _count_states(works: list[dict[str, Any]]) -> dict[str, int]:
    counts = Counter(w["state"] for w in works)
    return {state: counts[state] for state in STATE_ORDER if state in counts}


def _state_line(works: list[dict[str, Any]]) -> str:
    if not works:
        return "no Work"
    states = ", ".join(f"{n} {state}" for state, n in _count_states(works).items())
    return f"{len(works)} Work: {states}"


def _describe(view: dict[str, Any]) -> list[str]:
    """A readable rendering of one Work view."""
    lines = [
        f"{view['id']}: {view['state']}  (binding {view['binding']}, scope {view['scope']}, "
        f"{view['kind']}, submitted {view['submitted_at']})"
    ]
    if view["pending"]:
        keys = ", ".join(p["key"] for p in view["pending"])
        lines.append(f"  pending input: {keys}")
    for attempt in view["attempts"]:
        line = f"  attempt {attempt['number']} (epoch {attempt['epoch']}): {attempt['state']}"
        if attempt["outcome"]:
            line += f", {attempt['outcome']}"
        elif attempt["released"]:
            line += " (lease released)"
        if attempt["error"]:
            line += f", {attempt['error']['code']}: {attempt['error']['message']}"
        lines.append(line)
        if attempt["data"] is not None:
            lines.append(f"    data: {msgspec.json.encode(attempt['data']).decode()}")
    retry = view["retry"]
    if retry["failures"]:
        budget = f" of {retry['budget']}" if retry["budget"] else ""
        lines.append(f"  failures: {retry['failures']}{budget}")
    if retry["next_due"]:
        lines.append(f"  retry due: {retry['next_due']}")
    if retry["blocked_reason"]:
        lines.append(f"  blocked: {retry['blocked_reason']}")
    if view["waiting"]:
        lines.append(f"  waiting: {view['waiting']['code']}: {view['waiting']['detail']}")
    return lines


# -- commands ----------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace) -> int:
    names = ("binding", "scope", "kind", "trigger", "safety", "input_key", "correlation_key")
    options: dict[str, Any] = {name: getattr(args, name) for name in names}
    if args.input is not None:
        options["input"] = _parse_json(args.input, "--input")
    with _scheduler(args) as scheduler:
        before = scheduler.store.head().position
        scheduler.submit(args.work, **options)
        written = scheduler.store.head().position - before
        view = work_view(scheduler, args.work)
    if args.json:
        _print_json(view)
        return 0
    what = "submitted" if written else "unchanged"
    line = f"{view['id']}: {what}, {view['state']} (binding {view['binding']}, "
    line += f"scope {view['scope']}, {len(view['pending'])} pending input)"
    if view["waiting"]:
        line += f"; waiting: {view['waiting']['code']}"
    print(line)
    return 0


def cmd_accept(args: argparse.Namespace) -> int:
    payload = _parse_json(args.input, "--input") if args.input is not None else None
    with _scheduler(args) as scheduler:
        position = scheduler.accept(
            args.work, payload, key=args.input_key, correlation_key=args.correlation_key
        )
        view = work_view(scheduler, args.work)
    if args.json:
        _print_json({"position": position, "work": view})
    else:
        print(f"{args.work}: input at position {position}; {view['state']}")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    with _scheduler(args) as scheduler:
        scheduler.retry(args.work, reason=args.reason or "", requested_by=args.by)
        view = work_view(scheduler, args.work)
    if args.json:
        _print_json(view)
    else:
        retry = view["retry"]
        print(f"{args.work}: retry requested; {view['state']} (failures {retry['failures']})")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if args.timeout is not None and not args.until_idle:
        raise UsageError("--timeout only applies with --until-idle")
    with _scheduler(args) as scheduler:
        if args.until_idle:
            scheduler.run_until_idle(timeout=args.timeout)
        else:
            _daemon(scheduler)
        works = scheduler.works()
    if args.json:
        _print_json({"states": _count_states(works), "works": works})
    else:
        print(_state_line(works))
    return 0


def _daemon(scheduler: Scheduler) -> None:
    """`Scheduler.run` on a worker thread until SIGTERM/SIGINT; handlers restored after."""
    stop = threading.Event()
    failure: list[BaseException] = []
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.getsignal(sig) or signal.SIG_DFL for sig in signals}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def on_signal(signum: int, frame: object) -> None:
        # The main thread only joins the worker, so setting these events cannot deadlock.
        stop.set()
        scheduler.host.wake.set()
        restore()  # a second signal is not graceful

    def loop() -> None:
        try:
            scheduler.run(stop)
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=loop, name="rota-run", daemon=True)
    for sig in signals:
        signal.signal(sig, on_signal)
    try:
        worker.start()
        print(
            f"rota: running (pid {os.getpid()}, {len(scheduler.config.bindings)} bindings); "
            "SIGTERM or Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        worker.join()
    except KeyboardInterrupt:
        print("rota: interrupted: forced stop; held leases expire on their own", file=sys.stderr)
        sys.stdout.flush()
        os._exit(130)
    finally:
        restore()
    if failure:
        raise failure[0]
    print("rota: stopped", file=sys.stderr, flush=True)


def cmd_work_show(args: argparse.Namespace) -> int:
    with _scheduler(args) as scheduler:
        view = work_view(scheduler, args.work)
    if args.json:
        _print_json(view)
    else:
        print("\n".join(_describe(view)))
    return 0


def cmd_work_list(args: argparse.Namespace) -> int:
    with _scheduler(args) as scheduler:
        works = scheduler.works()
    if args.json:
        _print_json(works)
        return 0
    header = ("WORK", "STATE", "BINDING", "SCOPE", "ATTEMPTS", "LAST OUTCOME")
    rows = [
        (w["id"], w["state"], w["binding"], w["scope"], str(w["attempts"]), note)
        for w in works
        for note in [w["last_outcome"] or w["waiting"] or "-"]
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())
    print(_state_line(works))
    return 0


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
        _print_json([event_json(r) for r in rows])
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
        _print_json(report)
    elif report.ok:
        print(f"ok: {report.checked} events, head {report.head_position} {report.head_hash}")
    else:
        print(f"FAILED at position {report.first_bad_position}: {report.reason}")
    return 0 if report.ok else 1


# -- the parser --------------------------------------------------------------------------


def _input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", metavar="JSON", help="the input payload, as JSON")
    parser.add_argument(
        "--input-key", metavar="KEY", help="the input's idempotency key (default: derived)"
    )
    parser.add_argument("--correlation-key", metavar="KEY", help="carried with the input")
    parser.add_argument("--json", action="store_true", help="print JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rota", description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--config", metavar="FILE", help=f"the config file (default: ./{DEFAULT_CONFIG})"
    )
    parser.add_argument(
        "--store", metavar="URL", help="store URL (default: $ROTA_STORE, else the config's)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    retry.add_argument("--by", default="operator", help="who asks (recorded in the log)")
    retry.add_argument("--json", action="store_true")
    retry.set_defaults(handler=cmd_retry)

    run = commands.add_parser("run", help="run the scheduler (the daemon loop)")
    run.add_argument(
        "--until-idle",
        action="store_true",
        help="return once nothing is ready or running and no retry timer is due now",
    )
    run.add_argument("--timeout", type=float, metavar="SECONDS", help="with --until-idle")
    run.add_argument("--json", action="store_true", help="print the final summary as JSON")
    run.set_defaults(handler=cmd_run)

    work = commands.add_parser("work", help="read Work")
    work_commands = work.add_subparsers(dest="work_command", required=True, metavar="COMMAND")
    show = work_commands.add_parser("show", help="one Work with its attempts")
    show.add_argument("work", metavar="WORK")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_work_show)
    listing = work_commands.add_parser("list", help="every Work")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_work_list)

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
        message = " ".join(str(exc).split())  # one line, whatever the message holds
        print(f"rota: {exc.code}: {message}", file=sys.stderr)
        return 2 if exc.code in USAGE_CODES else 1
    except KeyboardInterrupt:
        print("rota: interrupted", file=sys.stderr)
        return 130
