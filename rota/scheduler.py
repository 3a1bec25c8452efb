"""The embedded API: `rota.open(...)` returns a `Scheduler`.

```python
import rota

with rota.open("app.db") as scheduler:
    scheduler.register("greet", lambda ctx: {"hello": ctx.trigger["name"]})
    handle = scheduler.submit("greet-ada", binding="greet", input={"name": "Ada"})
    scheduler.run_until_idle()
    print(handle.result())                        # {'hello': 'Ada'}
    print(scheduler.work("greet-ada").state)      # completed
```

A `Scheduler` is thread-safe. `tick()` runs one cadence pass; `run_until_idle()` runs
passes until nothing is ready or running and no retry timer is due now; `run()` runs the
daemon loop until stopped. Callables registered with `register()` run on a thread pool
(see `rota.infrastructure.executors.inproc` for what they receive and return); `async def`
callables run on the scheduler's own event loop thread (`rota.embedded.async_executors`).

`submit()` returns a `WorkHandle` (`rota.embedded.handles`); concurrent submits are group-
committed (`rota.application.group_commit`); reads return `rota.application.queries` views.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack, overload

import msgspec

from rota import bootstrap
from rota.application.host import TickReport
from rota.application.ports import (
    Environment,
    EventStore,
    Executor,
    LaunchContext,
    ProjectionStore,
)
from rota.application.queries import Queries
from rota.application.queries.schedule_views import ScheduleView
from rota.daemon import AuditCheckpoints, DaemonLoop
from rota.domain.events.work import Debounce, Throttle, Unique
from rota.domain.policy import POOL_AGENTS, ControlFallback, HandoffPolicy, RetryPolicy, Settings
from rota.domain.results import Result
from rota.embedded.async_executors import AsyncCallables
from rota.embedded.bindings import BindingPaths
from rota.embedded.flow_api import FlowControl
from rota.embedded.handles import WorkHandle
from rota.embedded.operations import SchedulerOperations
from rota.embedded.registering import RegisterOptions, Registry, TypedBinding
from rota.embedded.schedule_api import ScheduleDefinition, Schedules
from rota.embedded.submission_values import Submission, SubmissionFields, SubmitOptions
from rota.embedded.submitting import Submits
from rota.infrastructure.config import Config

_NO_INPUT: Any = msgspec.UNSET
T = TypeVar("T")


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Scheduler(SchedulerOperations):
    """An embedded rota scheduler over one store: its read models (`SchedulerReads`,
    `rota.embedded.reads`), its operator commands (`SchedulerOperations`,
    `rota.embedded.operations`) and the rest of its commands."""

    def __init__(
        self,
        store: EventStore,
        *,
        config: Config | None = None,
        owner: str | None = None,
        environment: Environment | None = None,
        projections: ProjectionStore | None = None,
        read_only: bool = False,
    ) -> None:
        config = config if config is not None else Config.parse({})
        self.config = config
        self.store = store
        self.executors: dict[str, Executor] = bootstrap.builtin_executors()
        self._binding_paths = BindingPaths(config)
        self.service = bootstrap.build_service(
            store,
            settings=config.settings,
            owner=owner or default_owner(),
            projections=projections,
            bindings=dict(config.bindings),
            registrations=bootstrap.registrations_of(self.executors),
        )
        for grant, values in config.grants.values():
            self.service.set_grant(grant, values)
        self.host = bootstrap.build_host(self.service, self.executors, environment=environment)
        self.host.declare_compatible(config.historical)
        self._closed = False
        self._daemon = DaemonLoop(self.host, store, self.checkpoint)
        self.queries = Queries(self.service, self.host)  # every read model
        self._submitting = Submits(
            self.service,
            self.host,
            store,
            executors=self.executors,
            binding_paths=self._binding_paths,
            read=self.work,
        )
        self._submits = self._submitting.group
        self._async = AsyncCallables()
        self._registry = Registry(
            self.service,
            self.host,
            executors=self.executors,
            binding_paths=self._binding_paths,
            async_callables=self._async,
        )
        self.schedules = Schedules(self.service)  # pause, next, history ... (schedule_api)
        self.flow = FlowControl(self.service, self.host)  # pause pools/keys/scopes, priority
        # Pinned before the first read or write: a log that lost it refuses both (log_regressed)
        self._audit = AuditCheckpoints(store, config.audit)
        self.checkpointer = self._audit.checkpointer
        self.service.catch_up()
        if not read_only:  # `rota serve` appends nothing, not even a changed [[budgets]]
            self.service.admission.configure_budgets(config.budgets)
            self.service.admission.configure_flow(config.flow)

    # -- configuration --------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.service.settings

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
        *,
        executor: Executor | None = None,
        pool: str = POOL_AGENTS,
        inline: bool = False,
        binding: bool = True,
        timeout_seconds: float | None = None,
        retry: RetryPolicy | None = None,
        config: dict[str, Any] | None = None,
        control_fallback: ControlFallback = "queue",
        handoff: HandoffPolicy = "stop",
        replace: bool = False,
    ) -> TypedBinding[Any]:
        """Register a Python callable (or an `Executor`) under `name`; returns the binding
        of that name as a `TypedBinding[T]`, `T` the callable's return type (`async def`:
        what it awaits to; `Any` for an `Executor` or a callable returning `rota.Result`).
        `submit(work_id, binding=typed)` returns a `WorkHandle[T]`.

        With `binding=True` (default) a binding of the same name is defined too (with
        `timeout_seconds`, `retry`, `config`, `control_fallback` and `handoff`, as `bind()` takes
        them), so Work can be submitted with `binding=name`.

        Refused (`not_callable`): an `fn` that is not callable, or whose signature cannot
        take one positional argument (the `LaunchContext`); a callable whose signature
        cannot be inspected (some builtins) is taken as it is. Refused
        (`already_registered`): a name already registered (the built-in `shell` too),
        unless `replace=True`. An `async def` callable runs on the scheduler's event loop
        thread (see the guide, "rota.aio").
        """
        self._registry.register(
            name,
            fn,
            executor=executor,
            pool=pool,
            inline=inline,
            binding=binding,
            timeout_seconds=timeout_seconds,
            retry=retry,
            config=config,
            control_fallback=control_fallback,
            handoff=handoff,
            replace=replace,
        )
        return TypedBinding(name)

    def register_historical(
        self,
        generation: str,
        name: str,
        fn: Callable[[LaunchContext], object] | None = None,
        *,
        executor: Executor | None = None,
        pool: str = POOL_AGENTS,
    ) -> None:
        """The implementation of registration `name` for attempts pinned to an older
        configuration `generation` (seed 001's historical executors).

        After a restart under a changed configuration, an attempt keeps the generation it
        was pinned to; a non-stable executor of another generation never serves it (its
        recovery, stop and control are then `unsupported_generation`). Register the older
        implementation here, as a callable or an `Executor`. Within one process a
        replaced registration keeps serving its attempts without this.
        """
        self._registry.register_historical(generation, name, fn, executor=executor, pool=pool)

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
        """Define (or redefine) a binding; future attempts use it, running ones keep theirs.

        `timeout_seconds` (> 0) replaces `settings.timeout_seconds` for its attempts.
        `handoff="continue"` lets a handoff outcome queue its own data as the Work's next
        input (a standing Work continues without outside input; off by default).
        `control_fallback` is what a definite failure to deliver an inject does with its
        input: `"queue"` (default; it stays pending for the next attempt) or `"drop"`. Each
        attempt pins the fallback its binding had when it started.
        """
        self._registry.bind(
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
        """Define (or redefine) binding grant `name` (as `[[grants]]` does): a Work that
        opts in (`submit(..., grants=[name])`) has `config` merged over its binding's config
        (pinned, so in the log: no secret values here) and `environment` added to its
        launch's variables (never written). Pinned attempts keep the config they took."""
        self._registry.grant(name, config=config, environment=environment)

    def check_bindings(self) -> None:
        """Refuse (`unknown_executor`, naming the binding's field path) when a defined
        binding names an executor this scheduler has not registered.

        Call it once your executors are registered, to find a binding nothing here runs
        before Work waits on it (`rota run` and `rota submit`, which register only the
        built-in executors, check the config file so before they open the store)."""
        self._registry.check_bindings()

    # -- commands -----------------------------------------------------------------------

    def schedule(self, name: str, **definition: Unpack[ScheduleDefinition]) -> ScheduleView:
        """Define or redefine a schedule (`binding=`, `every=` or `cron=`, `timezone=`,
        `input=`, `catchup=`, `overlap=`, `jitter=` ...); see rota.embedded.schedule_api."""
        return self.schedules.define(name, **definition)

    @overload
    def submit(
        self, work_id: str, *, binding: TypedBinding[T], **options: Unpack[SubmitOptions]
    ) -> WorkHandle[T]: ...
    @overload
    def submit(
        self, work_id: str, *, binding: str, **options: Unpack[SubmitOptions]
    ) -> WorkHandle[Any]: ...
    def submit(
        self,
        work_id: str,
        *,
        binding: str | TypedBinding[Any],
        input: Any = _NO_INPUT,
        input_key: str | None = None,
        correlation_key: str | None = None,
        scope: str = "root",
        kind: str = "run-once",
        trigger: str = "all",
        safety: str = "undeclared",
        grants: Sequence[str] = (),
        priority: int = 0,
        keys: Sequence[str] = (),
        cost: int = 1,
        throttle: Throttle | Mapping[str, Any] | None = None,
        debounce: Debounce | None = None,
        unique: Unique | None = None,
        personal: Sequence[str] = (),
    ) -> WorkHandle[Any]:
        """Define a Work and accept its input; returns a `WorkHandle` on it (a
        `WorkHandle[T]` for a `TypedBinding[T]` from `register`).

        Flow control (docs/guide.md, "Flow control"): higher `priority` starts first
        (-1000..1000, default 0; `flow.reprioritize` changes it); `keys` (at most 8, like
        `tenant:acme`) are the concurrency keys the Work counts under, the first its fair-
        share flow; `cost` is the tokens a start takes from each rate bucket it meets;
        `throttle=rota.Throttle(key, period)` lets one start of that key a period;
        `debounce=rota.Debounce(key, wait)` merges submits of a window into one Work and
        `unique=rota.Unique(key)` suppresses a second live Work of a key (both recorded).

        `grants` names binding grants (`grant()`, `[[grants]]`) the Work opts into (one not
        defined here is `unknown_grant`). `personal` marks fields of an object input (dotted
        paths) sealed under the Work's own key (docs/guide.md); `forget()` destroys it.

        A run-once Work submitted without input gets an empty input (it runs once); a
        standing Work without input stays idle until input arrives. Submitting the same
        definition again is a no-op; the input's key (given or derived from the payload)
        makes a retried submit queue nothing twice.

        A binding whose executor is not registered is refused (`unknown_executor`); one
        defined elsewhere is accepted once a scheduler on this store served it (its Work
        waits `unknown_binding` until one runs); one known nowhere is `unknown_binding`.
        Submits from several threads at once are group-committed (one transaction).
        """
        return self._submitting.one(
            Submission(
                work_id,
                binding=binding.name if isinstance(binding, TypedBinding) else binding,
                input=input,
                input_key=input_key,
                correlation_key=correlation_key,
                scope=scope,
                kind=kind,
                trigger=trigger,
                safety=safety,
                grants=grants,
                priority=priority,
                keys=keys,
                cost=cost,
                throttle=throttle,
                debounce=debounce,
                unique=unique,
                personal=personal,
            )
        )

    def submit_one(self, submission: Submission) -> WorkHandle[Any]:
        """`submit()` of a `rota.Submission` (the CLI's and the HTTP API's submit)."""
        return self._submitting.one(submission)

    def submit_many(self, works: Iterable[Submission | SubmissionFields]) -> list[WorkHandle[Any]]:
        """Submit several Works in ONE transaction; returns their handles, in order.

        Each item is a `rota.Submission` (or a mapping of its fields: `work_id`, `binding`,
        and optionally `input`, `input_key`, `correlation_key`, `scope`, `kind`,
        `trigger`, `safety`, `grants`, `priority`, `keys`, `cost`, `throttle`), with
        `submit()`'s meaning. All or nothing: the first refused
        item is raised and nothing is appended. Give each Work at most once.
        """
        return self._submitting.many(works)

    def handle(self, work_id: str) -> WorkHandle[Any]:
        """A handle on a Work submitted earlier (or by another process); without the
        input a submit accepted, a standing Work's handle settles only when it ends."""
        return self._submitting.handle(work_id)

    # -- the cadence --------------------------------------------------------------------

    def tick(self) -> TickReport:
        """Run one cadence pass."""
        return self.host.tick()

    def run_until_idle(self, timeout: float | None = None) -> TickReport:
        """Run passes until nothing is ready or running and no timer is due now."""
        return self._daemon.run_until_idle(timeout)

    def stop(self) -> None:
        """Ask a running `run()` loop to stop (it releases the leases it holds)."""
        self._daemon.stop()

    def run(self, stop: threading.Event | None = None, *, drain: float = 0.0) -> None:
        """The daemon loop: tick, then sleep until something can happen, until stopped.

        Stops when `stop` is set (the loop notices at once) or `Scheduler.stop()`
        is called (at once). Stopping is graceful: nothing new starts, the leases held are
        released and detached processes (shell jobs) keep running for the next host to
        adopt; with `drain` seconds it first waits, that long at most, for the attempts it
        holds to end.

        Before its first pass it records (`core.binding.served`, once per name ever) the
        bindings it can run, so that a submit from another process accepts Work on them.
        """
        self.record_served()
        self._daemon.run(stop, drain=drain)

    def record_served(self) -> int:
        """Record that this scheduler runs its bindings (`core.binding.served`, once per
        name ever), so a submit from another process accepts Work on them; `run()` does it
        before its first pass. Returns how many were new."""
        return self._registry.record_served()

    @property
    def daemon(self) -> DaemonLoop:
        """The daemon loop `run()` drives (its `passes` say when it last ticked)."""
        return self._daemon

    def checkpoint(self) -> None:
        """Write an audit checkpoint when one is due (every N events or T seconds); a log that
        no longer extends the previous one (lost commits, rewrites) is logged once as an error
        and never hidden behind a new checkpoint."""
        self._audit.write_due()

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.host.close()
            self._async.close()
        finally:
            try:
                self.service.close_projections()
            finally:
                self.store.close()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Scheduler"]
