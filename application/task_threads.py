"""The host's launcher: every task on a thread of its own.

A stuck launch, run-environment hook, adoption, stop check or control delivery never
waits behind, or holds up, another Work's launch or the cadence (seed 001: a host that
must not block on a launch launches elsewhere). How many run at once is bounded by what
the log holds, not by a pool size.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor as Pool
from concurrent.futures import Future
from typing import ParamSpec, TypeVar

log = logging.getLogger("rota.host")
P = ParamSpec("P")
T = TypeVar("T")
SHUTDOWN_SECONDS = 30.0  # how long closing waits for running tasks before it gives up


class TaskThreads(Pool):
    """A `concurrent.futures.Executor` that runs each task on a new daemon thread."""

    def __init__(self, name: str = "rota-launch") -> None:
        self._name = name
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args, **kwargs))
                    except BaseException as exc:
                        future.set_exception(exc)
                        log.debug("a host task failed", exc_info=True)
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        with self._lock:
            if self._closed:
                raise RuntimeError("the launcher is closed")
            thread = threading.Thread(target=run, name=self._name, daemon=True)
            self._threads.add(thread)
        thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new tasks; with `wait`, wait (at most SHUTDOWN_SECONDS) for running ones."""
        with self._lock:
            self._closed = True
            running = list(self._threads)
        if not wait:
            return
        until = time.monotonic() + SHUTDOWN_SECONDS
        for thread in running:
            thread.join(max(0.0, until - time.monotonic()))
        stuck = [t for t in running if t.is_alive()]
        if stuck:
            log.warning(
                "%d host tasks still running at close; left to end on their own", len(stuck)
            )

    def running(self) -> int:
        """How many tasks are running now."""
        with self._lock:
            return len(self._threads)
