"""The host's launcher: every task on a thread of its own.

A stuck launch, run-environment hook, adoption, stop check or control delivery never
waits behind, or holds up, another Work's launch or the cadence (seed 001: a host that
must not block on a launch launches elsewhere). How many run at once is bounded by what
the log holds, not by a pool size.

A thread whose task ended waits `IDLE_SECONDS` for another before it ends, so a busy host
does not start a thread per task; a task is handed to a waiting thread only when one
waits for nothing else (there are more waiting threads than queued tasks), else a new
thread starts for it: a task still never waits behind another.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor as Pool
from concurrent.futures import Future
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("rota.host")
P = ParamSpec("P")
T = TypeVar("T")
SHUTDOWN_SECONDS = 30.0  # how long closing waits for running tasks before it gives up
IDLE_SECONDS = 5.0  # how long a thread without a task waits for one before it ends

_Task = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class TaskThreads(Pool):
    """A `concurrent.futures.Executor` that runs each task on a daemon thread of its own
    (a new one, or one that waits for work: see the module docstring)."""

    def __init__(self, name: str = "rota-launch", idle_seconds: float = IDLE_SECONDS) -> None:
        self._name = name
        self._idle_seconds = idle_seconds
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._waiting = 0  # threads waiting on `_tasks`
        self._queued = 0  # tasks put on `_tasks` and not taken yet
        self._running = 0

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        thread = None
        with self._lock:
            if self._closed:
                raise RuntimeError("the launcher is closed")
            if self._waiting <= self._queued:  # no thread free for it: a new one
                thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._threads.add(thread)
                self._waiting += 1  # counted as waiting from now: it takes a task first
            self._queued += 1
            self._tasks.put((future, fn, args, kwargs))
        if thread is not None:
            thread.start()
        return future

    def _work(self) -> None:
        try:
            while True:
                try:
                    task = self._tasks.get(timeout=self._idle_seconds)
                except queue.Empty:
                    with self._lock:
                        if self._waiting > self._queued:  # the others cover what is queued
                            self._waiting -= 1
                            return
                    continue
                with self._lock:
                    self._waiting -= 1
                    if task is None:
                        return
                    self._queued -= 1
                    self._running += 1
                future, fn, args, kwargs = task
                value: Any = None
                error: BaseException | None = None
                live = future.set_running_or_notify_cancel()  # False: it was cancelled
                if live:
                    try:
                        value = fn(*args, **kwargs)
                    except BaseException as exc:
                        error = exc
                        log.debug("a host task failed", exc_info=True)
                with self._lock:  # free before its caller learns the result: reused at once
                    self._running -= 1
                    closed = self._closed
                    if not closed:
                        self._waiting += 1
                if live and error is None:
                    future.set_result(value)
                elif live:
                    future.set_exception(error)
                if closed:
                    return
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new tasks; with `wait`, wait (at most SHUTDOWN_SECONDS) for running ones."""
        with self._lock:
            self._closed = True
            running = list(self._threads)
            for _ in range(self._waiting):  # queued tasks still run: the ends come after
                self._tasks.put(None)
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
            return self._running
