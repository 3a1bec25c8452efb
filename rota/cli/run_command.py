"""`rota run`: the daemon loop (or one run until idle) in the foreground, stopped by
SIGTERM/SIGINT, optionally serving the HTTP API, with a summary of the Works at the end.

A store that cannot be reached when `rota run` starts (a PostgreSQL server down, starting,
read-only, or behind a failover that lost events: `store_unavailable`, `store_read_only`,
`log_regressed`) is waited for, with backoff (0.5 s doubling to 10 s), saying so once and
again when the reason changes or a minute passed, until it opens, SIGTERM/SIGINT, or
`--store-wait SECONDS` ran out (then exit 1 with the last reason, as without waiting)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgspec

from rota.application.errors import LogRegressed, StoreUnavailable
from rota.cli.app import app_option, load_app
from rota.cli.common import UsageError, load_config, open_rota, positive_seconds
from rota.cli.ops import daemon_lock
from rota.cli.run_logs import log_options, run_logging
from rota.cli.schedule import warn_not_in_config
from rota.cli.work_reads import state_line, states
from rota.foreground import run_in_foreground, stop_on_signals
from rota.scheduler import Scheduler

log = logging.getLogger("rota.store")
WAIT_FIRST, WAIT_MAX, SAY_AGAIN = 0.5, 10.0, 60.0  # seconds


def cmd_run(args: argparse.Namespace) -> int:
    if args.timeout is not None and not args.until_idle:
        raise UsageError("--timeout only applies with --until-idle")
    if args.store_wait is not None and args.store_wait < 0:
        raise UsageError("--store-wait takes a number of seconds >= 0")
    if args.drain is not None and (args.until_idle or args.drain < 0):
        raise UsageError("--drain takes a number of seconds >= 0, without --until-idle")
    if args.http is not None:
        from rota.cli.serve import check_http

        check_http(args, args.http)  # before the store is opened
    app = load_app(args, load_config(args))  # a bad --app fails before anything is opened
    with run_logging(args) as status, daemon_lock(args), _opened(args) as scheduler:
        if scheduler is None:
            status.say("stopped before the store could be opened", "stopped")
            return 0
        scheduler.schedules.apply(scheduler.config.schedules)  # [[schedules]]: no-op if same
        warn_not_in_config(scheduler)  # those the config defined and no longer has
        server = None
        if args.http is not None:
            from rota.cli.serve import start_http

            server = start_http(scheduler, args, args.http, status, read_only=False)
        try:
            if args.until_idle:
                with stop_on_signals(scheduler.stop):
                    scheduler.run_until_idle(timeout=args.timeout)
            else:
                run_in_foreground(scheduler, status, drain=args.drain or 0.0)
        finally:
            if server is not None:
                server.stop()
        _run_summary(scheduler, as_json=args.json)
        if app is not None:
            # The app's in-process callables still running die with the process (their
            # leases were released: the next daemon recovers them), as the guide says;
            # closing the scheduler would wait for their threads to return, for ever
            # if one never does. The log is already durable; the projections are saved.
            scheduler.service.save_projections()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    return 0


@contextlib.contextmanager
def _opened(args: argparse.Namespace) -> Iterator[Scheduler | None]:
    """The scheduler `rota run` runs, once its store can be opened (see the module
    docstring); None when a signal stopped the wait."""
    stop = threading.Event()
    started, pause, said, last = time.monotonic(), WAIT_FIRST, 0.0, ""
    with stop_on_signals(stop.set):
        while True:
            try:
                scheduler = open_rota(args, runs=True)
                break
            except (StoreUnavailable, LogRegressed) as exc:
                waited = time.monotonic() - started
                if args.store_wait is not None and waited + pause > args.store_wait:
                    raise
                now = time.monotonic()
                if str(exc.code) != last or now - said >= SAY_AGAIN:
                    log.warning(
                        "waiting for the store (%.0f s so far): %s: %s", waited, exc.code, exc
                    )
                    said, last = now, str(exc.code)
                if stop.wait(pause):
                    yield None
                    return
                pause = min(pause * 2, WAIT_MAX)
        if last:
            log.warning("store opened after %.1f s of waiting", time.monotonic() - started)
    with scheduler:
        yield scheduler


def _run_summary(scheduler: Scheduler, *, as_json: bool) -> None:
    """What `rota run` prints at the end: the count of Works per state (with `--json`,
    then every Work), read a page at a time, so it never holds every Work."""
    counts: Counter[str] = Counter(w.state for w in scheduler.iter_works())
    if not as_json:
        print(state_line(counts))
        return
    sys.stdout.write('{"states":' + msgspec.json.encode(states(counts)).decode() + ',"works":[')
    for n, work in enumerate(scheduler.iter_works()):
        sys.stdout.write(("," if n else "") + msgspec.json.encode(work).decode())
    sys.stdout.write("]}\n")


def register(commands: Any) -> None:
    run = commands.add_parser("run", help="run the scheduler (the daemon loop)")
    run.add_argument(
        "--until-idle",
        action="store_true",
        help="return once nothing is ready or running and no retry timer is due now",
    )
    run.add_argument(
        "--timeout",
        type=positive_seconds,
        metavar="SECONDS",
        help="with --until-idle: give up (exit 1, timeout) after this many seconds (> 0)",
    )
    run.add_argument(
        "--drain",
        type=float,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, first wait (at most this long) for running attempts to end; "
        "then release the leases, leaving shell jobs running for the next daemon to adopt",
    )
    run.add_argument(
        "--http",
        metavar="ADDR",
        help="also serve the HTTP API on HOST:PORT (loopback: 127.0.0.1:8470; needs "
        "'rota[http]', docs/http.md)",
    )
    run.add_argument("--tokens", metavar="FILE", help="with --http: the token file")
    run.add_argument(
        "--store-wait",
        type=float,
        metavar="SECONDS",
        help="wait at most this long for a store that cannot be opened yet (PostgreSQL down, "
        "read-only, or missing events after a failover) before exit 1; default: for ever",
    )
    run.add_argument("--json", action="store_true", help="print the final summary as JSON")
    app_option(run)
    log_options(run)
    run.set_defaults(handler=cmd_run)
