"""`async def` callables as in-process executors: each scheduler runs them on one event
loop of its own, in a daemon thread (`rota-async-executors`) started at the first one.

The in-process executor calls `fn(ctx)` on its thread pool; for a coroutine function that
call submits the coroutine to this loop and waits for it, so the outcome rules are those
of a plain callable (its return value, `rota.Fail`, another exception). When `ctx.cancel`
is set (lease lost, interrupt, stop) the coroutine's task is cancelled (within
`CANCEL_CHECK_SECONDS`); a job that ends on that `CancelledError` fails with
`unhandled_exception` (`CancelledError`), as a sync job that raises does. The loop is
never the caller's (an asyncio service's own loop runs none of rota's jobs, so a slow job
cannot stall it) and is closed with the scheduler.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from rota.application.ports import LaunchContext

CANCEL_CHECK_SECONDS = 0.2


def is_async(fn: Any) -> bool:
    """Whether calling `fn` returns a coroutine (an `async def`, a partial of one, or an
    object whose `__call__` is one)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - the method itself is inspected
    return call is not None and inspect.iscoroutinefunction(call)


class AsyncCallables:
    """One event loop thread for a scheduler's `async def` executors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def wrap(self, fn: Callable[[LaunchContext], Any]) -> Callable[[LaunchContext], Any]:
        """`fn` itself, or for a coroutine function a sync callable running it here."""
        if not is_async(fn):
            return fn

        @functools.wraps(fn)
        def run(ctx: LaunchContext) -> Any:
            return self.run(fn(ctx), ctx)

        return run

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="rota-async-executors", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coroutine: Coroutine[Any, Any, Any], ctx: LaunchContext) -> Any:
        """Run `coroutine` on the loop; its task is cancelled when `ctx.cancel` is set."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._started())
        while True:
            try:
                # The result is taken the moment it is ready; the cancel is looked at
                # between waits (`CANCEL_CHECK_SECONDS`).
                return future.result(timeout=CANCEL_CHECK_SECONDS)
            except concurrent.futures.TimeoutError:
                if ctx.cancel.is_set():
                    future.cancel()  # cancels the task on the loop

    def close(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()


__all__ = ["AsyncCallables", "is_async"]
