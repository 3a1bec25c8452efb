"""`rota run`: the daemon loop (or one run until idle) in the foreground, stopped by
SIGTERM/SIGINT, optionally serving the HTTP API, with a summary of the Works at the end."""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from rota.cli.common import UsageError, open_rota, positive_seconds
from rota.cli.ops import daemon_lock
from rota.cli.run_logs import Status, log_options, run_logging
from rota.cli.schedule import warn_not_in_config
from rota.cli.work_reads import state_line, states
from rota.scheduler import Scheduler


def cmd_run(args: argparse.Namespace) -> int:
    if args.timeout is not None and not args.until_idle:
        raise UsageError("--timeout only applies with --until-idle")
    if args.drain is not None and (args.until_idle or args.drain < 0):
        raise UsageError("--drain takes a number of seconds >= 0, without --until-idle")
    if args.http is not None:
        from rota.cli.serve import check_http

        check_http(args, args.http)  # before the store is opened
    with run_logging(args) as status, daemon_lock(args), open_rota(args, runs=True) as scheduler:
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
                _daemon(scheduler, status, drain=args.drain or 0.0)
        finally:
            if server is not None:
                server.stop()
        _run_summary(scheduler, as_json=args.json)
    return 0


def _wait_for(worker: threading.Thread, ended: threading.Event, wake: int) -> None:
    """Join `worker` without polling, and run signal handlers whichever thread the kernel
    delivered the signal to.

    Python runs a signal's handler only in the main thread, when it next executes Python
    code. The kernel may deliver a process's SIGTERM to any thread that does not block it;
    while the main thread sat in `Thread.join` (a lock wait that only its own signals
    interrupt), a SIGTERM taken by another thread left the handler waiting, and the daemon
    running, until a second signal came (seen under load: `rota run` ignored its first
    SIGTERM). So the main thread waits on a pipe instead: the signal's C handler writes to
    it in whatever thread it runs (`signal.set_wakeup_fd`), and the worker writes once it
    ends (`ended` is set first)."""
    while not ended.is_set():
        select.select([wake], [], [])
        with contextlib.suppress(BlockingIOError):
            os.read(wake, 512)
    worker.join()


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


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM/SIGINT call `stop` (a graceful stop: the leases are released on the way
    out, shell jobs keep running); the previous handlers come back after."""
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.getsignal(sig) or signal.SIG_DFL for sig in signals}
    for sig in signals:
        signal.signal(sig, lambda signum, frame: stop())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _daemon(scheduler: Scheduler, status: Status, *, drain: float = 0.0) -> None:
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

    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)

    ended = threading.Event()

    def loop() -> None:
        try:
            scheduler.run(stop, drain=drain)
        except BaseException as exc:
            failure.append(exc)
        finally:
            ended.set()  # before the byte: a wait that read it sees the loop ended
            with contextlib.suppress(OSError):
                os.write(wake_write, b"\0")  # the main thread's wait ends

    worker = threading.Thread(target=loop, name="rota-run", daemon=True)
    for sig in signals:
        signal.signal(sig, on_signal)
    previous_wakeup = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    try:
        pid, bindings = os.getpid(), len(scheduler.config.bindings)
        # Before the loop starts, so no decision line comes first (the handlers are set).
        status.say(
            f"running (pid {pid}, {bindings} bindings); SIGTERM or Ctrl-C stops",
            "running", pid=pid, bindings=bindings,
        )  # fmt: skip
        worker.start()
        _wait_for(worker, ended, wake_read)
    except KeyboardInterrupt:
        status.say("interrupted: forced stop; held leases expire on their own", "forced stop")
        sys.stdout.flush()
        os._exit(130)
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        restore()
        os.close(wake_read)
        os.close(wake_write)
    if failure:
        raise failure[0]
    status.say("stopped", "stopped")


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
    run.add_argument("--json", action="store_true", help="print the final summary as JSON")
    log_options(run)
    run.set_defaults(handler=cmd_run)
