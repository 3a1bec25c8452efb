"""rota for asyncio services: `await rota.aio.open(...)` returns an `AsyncScheduler`.

```python
import rota.aio

async def main() -> None:
    async with await rota.aio.open("app.db") as scheduler:
        async def greet(ctx):                       # an async executor
            return {"hello": ctx.trigger["name"]}
        scheduler.register("greet", greet)
        scheduler.start()                           # the daemon loop, on a thread
        handle = await scheduler.submit("greet-ada", binding="greet", input={"name": "Ada"})
        print(await handle.result(timeout=10))      # {'hello': 'Ada'}
```

The same semantics as the sync `Scheduler` (it is one, underneath: `scheduler.sync`):
every call that touches the store runs in a worker thread (`asyncio.to_thread`), so the
event loop never blocks on SQLite or PostgreSQL; configuration calls that do no I/O
(`register`, `register_gate`, `bind`) stay plain methods. A handle's `wait()` and
`result()` never hold a thread while they wait: one watcher thread per scheduler follows
the log's commits (the store's `wait_for_commit`) and wakes every waiting coroutine on
the loop, which re-reads its view (and at least every `RECHECK_SECONDS`).

`async def` executors run on the scheduler's own event loop thread
(`rota-async-executors`, see `rota.embedded.async_executors`), never on the caller's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar, Unpack, overload

from rota.api_errors import WaitTimeout
from rota.application.commands.requests import Receipt
from rota.application.commands.waits import InjectAnswer
from rota.application.host import TickReport
from rota.application.ports import (
    Clock,
    Environment,
    EventStore,
    Gate,
    LaunchContext,
    WaitCheck,
)
from rota.application.queries.capacity import CapacityDict
from rota.application.queries.work_views import AttemptView, EventView, WorkSummary, WorkView
from rota.domain.policy import ControlFallback, HandoffPolicy, RetryPolicy
from rota.domain.results import Result
from rota.embedded.flow_api import AsyncFlowControl
from rota.embedded.handles import RECHECK_SECONDS, WorkHandle, outcome_of
from rota.embedded.opening import open as open_sync
from rota.embedded.registering import RegisterOptions, TypedBinding
from rota.embedded.submission_values import Submission, SubmissionFields, SubmitOptions
from rota.infrastructure.config import Config
from rota.scheduler import Scheduler


async def open(
    path_or_url: str | os.PathLike[str] | None = None,
    *,
    config: Config | str | os.PathLike[str] | dict[str, Any] | None = None,
    clock: Clock | None = None,
    owner: str | None = None,
    environment: Environment | None = None,
    projections: str | os.PathLike[str] | bool = True,
) -> AsyncScheduler:
    """`rota.open` in a worker thread; the same arguments."""
    scheduler = await asyncio.to_thread(
        open_sync,
        path_or_url,
        config=config,
        clock=clock,
        owner=owner,
        environment=environment,
        projections=projections,
    )
    return AsyncScheduler(scheduler)


class _Commits:
    """Wakes the coroutines waiting on handles when the log gets a commit (one thread)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def subscribe(self) -> asyncio.Event:
        event = asyncio.Event()
        with self._lock:
            self._waiters.add((asyncio.get_running_loop(), event))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._follow, name="rota-aio-commits", daemon=True
                )
                self._thread.start()
        return event

    def unsubscribe(self, event: asyncio.Event) -> None:
        with self._lock:
            self._waiters = {w for w in self._waiters if w[1] is not event}

    def _follow(self) -> None:
        position = self.store.head().position
        while not self._stop.is_set():
            if self.store.wait_for_commit(position, 0.5):
                position = self.store.head().position
                with self._lock:
                    waiters = list(self._waiters)
                for loop, event in waiters:
                    if not loop.is_closed():
                        loop.call_soon_threadsafe(event.set)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)


T = TypeVar("T")


class AsyncWorkHandle(Generic[T]):
    """`WorkHandle` for coroutines: `work_id`, `await view()`, `await wait()`,
    `await result()` (the same rules and errors; `T` as `WorkHandle[T]`)."""

    def __init__(self, handle: WorkHandle[T], commits: _Commits) -> None:
        self.sync = handle
        self.work_id = handle.work_id
        self._commits = commits

    def __repr__(self) -> str:
        return f"Async{self.sync!r}"

    async def view(self) -> WorkView:
        return await asyncio.to_thread(self.sync.view)

    async def wait(self, timeout: float | None = None) -> WorkView:
        """Until the Work settles (`WorkHandle.wait`), without blocking the loop."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        changed = self._commits.subscribe()
        try:
            while True:
                changed.clear()  # before reading: a commit after this wakes the wait below
                view = await self.view()
                if self.sync.settled(view):
                    return view
                pause = RECHECK_SECONDS
                if deadline is not None:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise WaitTimeout(
                            f"Work {self.work_id!r} is still {view.state} after {timeout} s"
                        )
                    pause = min(pause, remaining)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), pause)
        finally:
            self._commits.unsubscribe(changed)

    async def result(self, timeout: float | None = None) -> T:
        """The completed attempt's result value, or `WorkFailed`/`WorkCancelled`/
        `WaitTimeout`, as `WorkHandle.result`."""
        value: T = outcome_of(self.sync, await self.wait(timeout))
        return value


class AsyncScheduler:
    """The embedded scheduler's API as coroutines (see the module docstring)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.sync = scheduler
        self._commits = _Commits(scheduler.store)
        self._runner: threading.Thread | None = None
        self.flow = AsyncFlowControl(scheduler.flow)  # pause, resume, paused, reprioritize

    # -- configuration (no I/O: plain methods) ------------------------------------------

    @overload
    def register(
        self,
        name: str,
        fn: Callable[[LaunchContext], Result | Awaitable[Result]],
        **options: Unpack[RegisterOptions],
    ) -> TypedBinding[Any]: ...
    @overload
    def register(
        self,
        name: str,
        fn: Callable[[LaunchContext], Awaitable[T]],
        **options: Unpack[RegisterOptions],
    ) -> TypedBinding[T]: ...
    @overload
    def register(
        self, name: str, fn: Callable[[LaunchContext], T], **options: Unpack[RegisterOptions]
    ) -> TypedBinding[T]: ...
    @overload
    def register(
        self, name: str, fn: None = None, **options: Unpack[RegisterOptions]
    ) -> TypedBinding[Any]: ...
    def register(
        self,
        name: str,
        fn: Callable[[LaunchContext], object] | None = None,
        **options: Unpack[RegisterOptions],
    ) -> TypedBinding[Any]:
        """`Scheduler.register` (an `async def fn` runs on rota's own loop thread)."""
        return self.sync.register(name, fn, **options)

    def bind(
        self,
        name: str,
        *,
        executor: str,
        config: dict[str, Any] | None = None,
        timeout_seconds: float | None = None,
        retry: RetryPolicy | None = None,
        control_fallback: ControlFallback = "queue",
        handoff: HandoffPolicy = "stop",
    ) -> None:
        self.sync.bind(
            name,
            executor=executor,
            config=config,
            timeout_seconds=timeout_seconds,
            retry=retry,
            control_fallback=control_fallback,
            handoff=handoff,
        )

    def grant(
        self,
        name: str,
        *,
        config: dict[str, Any] | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        """`Scheduler.grant`: define (or redefine) a binding grant."""
        self.sync.grant(name, config=config, environment=environment)

    def register_gate(self, name: str, gate: Gate) -> None:
        self.sync.register_gate(name, gate)

    # -- commands -------------------------------------------------------------------------

    def _handle(self, handle: WorkHandle[T]) -> AsyncWorkHandle[T]:
        return AsyncWorkHandle(handle, self._commits)

    @overload
    async def submit(
        self, work_id: str, *, binding: TypedBinding[T], **options: Unpack[SubmitOptions]
    ) -> AsyncWorkHandle[T]: ...
    @overload
    async def submit(
        self, work_id: str, *, binding: str, **options: Unpack[SubmitOptions]
    ) -> AsyncWorkHandle[Any]: ...
    async def submit(
        self,
        work_id: str,
        *,
        binding: str | TypedBinding[Any],
        **options: Unpack[SubmitOptions],
    ) -> AsyncWorkHandle[Any]:
        """`Scheduler.submit` (group-committed with concurrent submits)."""
        name = binding.name if isinstance(binding, TypedBinding) else binding
        handle = await asyncio.to_thread(lambda: self.sync.submit(work_id, binding=name, **options))
        return self._handle(handle)

    async def submit_one(self, submission: Submission) -> AsyncWorkHandle[Any]:
        """`Scheduler.submit_one`."""
        return self._handle(await asyncio.to_thread(self.sync.submit_one, submission))

    async def submit_many(
        self, works: Iterable[Submission | SubmissionFields]
    ) -> list[AsyncWorkHandle[Any]]:
        handles = await asyncio.to_thread(self.sync.submit_many, list(works))
        return [self._handle(h) for h in handles]

    def handle(self, work_id: str) -> AsyncWorkHandle[Any]:
        return self._handle(self.sync.handle(work_id))

    async def accept(
        self,
        work_id: str,
        payload: Any = None,
        *,
        key: str | None = None,
        correlation_key: str | None = None,
        personal: Sequence[str] = (),
    ) -> int:
        return await asyncio.to_thread(
            lambda: self.sync.accept(
                work_id, payload, key=key, correlation_key=correlation_key, personal=personal
            )
        )

    async def forget(self, work_id: str, *, by: str = "operator", reason: str = "") -> int:
        """`Scheduler.forget`: destroy the Work's personal data key, record it once."""
        return await asyncio.to_thread(lambda: self.sync.forget(work_id, by=by, reason=reason))

    async def retry(
        self,
        work_id: str,
        *,
        reason: str = "",
        requested_by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        """`Scheduler.retry` (a `request_id` makes a repeat return the first receipt)."""
        return await asyncio.to_thread(
            lambda: self.sync.retry(
                work_id, reason=reason, requested_by=requested_by, request_id=request_id
            )
        )

    async def cancel(
        self,
        work_id: str,
        *,
        reason: str = "",
        by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        return await asyncio.to_thread(
            lambda: self.sync.cancel(work_id, reason=reason, by=by, request_id=request_id)
        )

    async def release(
        self,
        work_id: str,
        *,
        kind: str | None = None,
        by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        return await asyncio.to_thread(
            lambda: self.sync.release(work_id, kind=kind, by=by, request_id=request_id)
        )

    async def inject(
        self,
        work_id: str,
        payload: Any,
        *,
        key: str | None = None,
        by: str = "operator",
        request_id: str | None = None,
    ) -> InjectAnswer:
        """`Scheduler.inject` (a `request_id` makes a repeat answer as the first did)."""
        return await asyncio.to_thread(
            lambda: self.sync.inject(work_id, payload, key=key, by=by, request_id=request_id)
        )

    async def register_wait_predicate(self, name: str, check: WaitCheck) -> None:
        await asyncio.to_thread(lambda: self.sync.register_wait_predicate(name, check))

    async def interrupt(
        self, work_id: str, *, by: str = "operator", request_id: str | None = None
    ) -> Receipt:
        return await asyncio.to_thread(
            lambda: self.sync.interrupt(work_id, by=by, request_id=request_id)
        )

    async def settle_gate(
        self,
        work_id: str,
        registration: str,
        *,
        admit: bool,
        reason: str = "",
        request_id: str | None = None,
    ) -> Receipt:
        return await asyncio.to_thread(
            lambda: self.sync.settle_gate(
                work_id, registration, admit=admit, reason=reason, request_id=request_id
            )
        )

    # -- reading ----------------------------------------------------------------------------

    async def work(self, work_id: str) -> WorkView | None:
        return await asyncio.to_thread(self.sync.work, work_id)

    async def works(self) -> list[WorkSummary]:
        return await asyncio.to_thread(self.sync.works)

    async def executions(self, work_id: str) -> list[AttemptView]:
        return await asyncio.to_thread(self.sync.executions, work_id)

    async def events(self, after: int = 0, limit: int = 1000) -> list[EventView]:
        return await asyncio.to_thread(self.sync.events, after, limit)

    async def capacity(self) -> CapacityDict:
        return await asyncio.to_thread(self.sync.capacity)

    # -- the cadence ------------------------------------------------------------------------

    async def tick(self) -> TickReport:
        return await asyncio.to_thread(self.sync.tick)

    async def run_until_idle(self, timeout: float | None = None) -> TickReport:
        return await asyncio.to_thread(self.sync.run_until_idle, timeout)

    def start(self, *, drain: float = 0.0) -> None:
        """Run the daemon loop (`Scheduler.run`) on a thread of its own until `stop()`."""
        if self._runner is not None:
            return
        self._runner = threading.Thread(
            target=self.sync.run, kwargs={"drain": drain}, name="rota-aio-run", daemon=True
        )
        self._runner.start()

    async def stop(self) -> None:
        """Stop the daemon loop `start()` began (gracefully) and wait for it."""
        runner, self._runner = self._runner, None
        if runner is not None:
            self.sync.stop()
            await asyncio.to_thread(runner.join)

    async def close(self) -> None:
        await self.stop()
        await asyncio.to_thread(self._commits.close)
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncScheduler:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncScheduler", "AsyncWorkHandle", "open"]
