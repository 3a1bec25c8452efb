"""The host's launcher under simulation: tasks wait until the world runs them.

Production gives every launch, adoption, stop check and control delivery a thread of its
own (`rota.application.task_threads.TaskThreads`). Threads interleave as the kernel likes;
here each task waits in its host's queue until the world's seeded random source picks it,
so every interleaving of launches with the cadence is one a seed names and replays.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor as Pool
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class Task:
    """One task a host handed to its launcher, not run yet."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: Future[Any]

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", "task")

    def run(self) -> Exception | None:
        """Run it as `TaskThreads` would: its exception goes to its future (and is
        returned). A simulated crash (a `BaseException`) goes on to the world."""
        if not self.future.set_running_or_notify_cancel():
            return None
        try:
            result = self.fn(*self.args, **self.kwargs)
        except Exception as exc:
            self.future.set_exception(exc)
            return exc
        self.future.set_result(result)
        return None


class SimPool(Pool):
    """A `concurrent.futures.Executor` whose tasks the world runs one at a time."""

    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.errors: list[Exception] = []  # what tasks raised (the world looks at them)
        self.closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if self.closed:
            raise RuntimeError("the launcher is closed")
        future: Future[T] = Future()
        self.tasks.append(Task(fn, args, dict(kwargs), future))
        return future

    def run(self, index: int) -> None:
        """Run the task at `index` of the queue (the world picks it)."""
        error = self.tasks.pop(index).run()
        if error is not None:
            self.errors.append(error)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.closed = True
        if cancel_futures:
            for task in self.tasks:
                task.future.cancel()
            self.tasks.clear()

    def running(self) -> int:
        return 0
