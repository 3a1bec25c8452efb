"""The daemon in the foreground, as `rota run` runs it and `rota.daemon.run` offers it to an
embedding program: the scheduler's loop on a worker thread, SIGTERM/SIGINT handled (the
first stops gracefully, a second forces), the status lines (`running`, `stopped`) and every
record (the decision lines included) on stderr in the chosen format (docs/operator.md,
"Logs"; docs/guide.md, "Running the daemon from your program").
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from rota.infrastructure.decision_lines import FIELDS_ATTRIBUTE
from rota.infrastructure.logging import JsonFormatter, LogSettings, configured, log_settings

if TYPE_CHECKING:
    from rota.scheduler import Scheduler


def json_record(logger: str, level: str, message: str, **fields: Any) -> str:
    """One JSON log line (as `JsonFormatter` writes them) for a line the command writes
    itself: its status lines, and its refusal under `--log-format json`."""
    record = logging.makeLogRecord(
        {"name": logger, "levelname": level, "levelno": logging.getLevelName(level),
         "msg": message, FIELDS_ATTRIBUTE: fields}
    )  # fmt: skip
    return JsonFormatter().format(record)


class Status:
    """The daemon's status lines (running, stopped, a forced stop) in the run's format.

    A line is written whole, in one write under the run's log handler's lock: a record
    that another thread logs meanwhile (a launch refused as the daemon stops) comes before
    or after it, never between the line and its newline."""

    def __init__(self, settings: LogSettings, handler: logging.Handler | None = None) -> None:
        self.settings = settings
        self.handler = handler

    def say(self, text: str, message: str, **fields: Any) -> None:
        """`rota: <text>` on stderr in the text format; a record `message` in JSON."""
        line = f"rota: {text}"
        if self.settings.format == "json":
            # Shown whatever the level, as the text lines are: an operator waits for them.
            line = json_record("rota.daemon", "INFO", message, kind="daemon", **fields)
        handler = self.handler
        if handler is not None:
            handler.acquire()
        try:
            with contextlib.suppress(OSError):
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        finally:
            if handler is not None:
                handler.release()


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


def wait_for(worker: threading.Thread, ended: threading.Event, wake: int) -> None:
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


def until_stopped(stop: threading.Event) -> None:
    """Block the main thread until a signal handler sets `stop`, whichever thread the kernel
    delivered the signal to (as `wait_for`: a wait on the signal wakeup pipe, which the
    signal's C handler writes to in any thread; `Event.wait` is a lock wait only the main
    thread's own signals interrupt, so a SIGTERM taken by uvicorn's thread went unseen)."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write)
    try:
        while not stop.is_set():
            select.select([read], [], [])
            with contextlib.suppress(BlockingIOError):
                os.read(read, 512)
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)


def run_in_foreground(scheduler: Scheduler, status: Status, *, drain: float = 0.0) -> None:
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
        pid, bindings = os.getpid(), len(scheduler.service.bindings)
        # Before the loop starts, so no decision line comes first (the handlers are set).
        status.say(
            f"running (pid {pid}, {bindings} bindings); SIGTERM or Ctrl-C stops",
            "running", pid=pid, bindings=bindings,
        )  # fmt: skip
        worker.start()
        wait_for(worker, ended, wake_read)
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


def run(
    scheduler: Scheduler,
    *,
    log_format: str | None = None,
    log_level: str | None = None,
    drain: float = 0.0,
) -> None:
    """Run `scheduler`'s daemon loop until SIGTERM or SIGINT, as `rota run` does.

    Every record goes to stderr in `log_format` (`text` or `json`; default
    `$ROTA_LOG_FORMAT`, else text) at `log_level` and above (`debug`, `info`, `warning`,
    `error`; default `$ROTA_LOG_LEVEL`, else info): the decision lines, the status lines
    (`rota: running (...)`, `rota: stopped`) and other libraries' warnings; the handler is
    removed when it returns. Signals are handled as by `rota run` (the first stops
    gracefully, after `drain` seconds at most; a second forces the stop) when called from
    the main thread; from another thread it runs until `scheduler.stop()`. The audit
    checkpoints of `[audit]` are written as the loop runs, as by `Scheduler.run`."""
    settings = log_settings(log_format, log_level)
    with configured(settings) as handler:
        status = Status(settings, handler)
        if threading.current_thread() is threading.main_thread():
            run_in_foreground(scheduler, status, drain=drain)
        else:
            status.say("running (no signal handlers: not the main thread)", "running")
            scheduler.run(drain=drain)
            status.say("stopped", "stopped")


__all__ = [
    "Status",
    "json_record",
    "run",
    "run_in_foreground",
    "stop_on_signals",
    "until_stopped",
    "wait_for",
]
