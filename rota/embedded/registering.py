"""Registration on an embedded scheduler: `Scheduler.register`, `register_historical`,
`bind` and `check_bindings` over its executors, service and host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypedDict, TypeVar

import msgspec

from rota.application.executor_directory import registration_of
from rota.application.host import Host
from rota.application.ports import Executor, LaunchContext
from rota.application.service import SchedulerService
from rota.domain.grants import Grant, check_grant
from rota.domain.policy import ControlFallback, HandoffPolicy, RetryPolicy
from rota.embedded.async_executors import AsyncCallables
from rota.embedded.bindings import BindingPaths, check_timeout, define_binding
from rota.embedded.registration_checks import executor_of, refuse_second
from rota.infrastructure.config import check_binding, check_binding_name, unknown_executor

UNBOUNDED_POOL_THREADS = 64  # a callable's threads when its pool's limit is 0 (unbounded)

T = TypeVar("T")


class RegisterOptions(TypedDict, total=False):
    """`Scheduler.register`'s keyword arguments (their meaning and defaults are there)."""

    executor: Executor | None
    pool: str
    inline: bool
    binding: bool
    timeout_seconds: float | None
    retry: RetryPolicy | None
    config: dict[str, Any] | None
    control_fallback: ControlFallback
    handoff: HandoffPolicy
    replace: bool


class TypedBinding(msgspec.Struct, Generic[T], frozen=True):
    """A binding registered with `Scheduler.register`, carrying the return type `T` of its
    callable: `submit(work_id, binding=typed)` then returns a `WorkHandle[T]`, whose
    `result()` is a `T` (a JSON value: what the callable returned, read back from the log).

    At run time it is only the binding's name; the type is the type checker's."""

    name: str

    def __str__(self) -> str:
        return self.name


class Registry:
    """The executors and bindings of one scheduler, registered and defined under its lock
    (see `rota.Scheduler.register` and `bind` for what each refuses)."""

    def __init__(
        self,
        service: SchedulerService,
        host: Host,
        *,
        executors: dict[str, Executor],
        binding_paths: BindingPaths,
        async_callables: AsyncCallables,
    ) -> None:
        self.service, self.host = service, host
        self.executors, self.binding_paths = executors, binding_paths
        self.async_callables = async_callables

    def register(
        self,
        name: str,
        fn: Callable[[LaunchContext], object] | None,
        *,
        executor: Executor | None,
        pool: str,
        inline: bool,
        binding: bool,
        timeout_seconds: float | None,
        retry: RetryPolicy | None,
        config: dict[str, Any] | None,
        control_fallback: ControlFallback,
        handoff: HandoffPolicy,
        replace: bool,
    ) -> None:
        """Register `fn` (or `executor`) under `name`, and a binding of that name."""
        # As many threads as the pool has slots (0: unbounded); at least 4.
        workers = max(4, self.service.settings.pool_limit(pool) or UNBOUNDED_POOL_THREADS)
        executor = executor_of(
            "register",
            name,
            fn,
            executor,
            async_callables=self.async_callables,
            pool=pool,
            max_workers=workers,
            inline=inline,
        )
        refuse_second(name, self.executors, replace)
        if binding:
            check_binding_name(name)  # before anything is registered
            check_timeout(name, timeout_seconds)
        with self.service.configuring():
            before, executors = self.service.generation, dict(self.executors)
            # The bindings already defined on this executor (in the config file, say) meet
            # its config rules now, before any Work is accepted for them.
            for defined in sorted(self.service.bindings.values(), key=lambda b: b.name):
                if defined.executor == name:
                    self.binding_paths.check(defined, executor)
            self.executors[name] = executor
            self.service.set_registration(registration_of(name, executor))
            if binding:
                self.bind(
                    name,
                    executor=name,
                    timeout_seconds=timeout_seconds,
                    retry=retry,
                    config=config,
                    control_fallback=control_fallback,
                    handoff=handoff,
                )
            # Attempts pinned to the generation this ends keep their implementation.
            self.host.keep_generation(before, executors)

    def register_historical(
        self,
        generation: str,
        name: str,
        fn: Callable[[LaunchContext], object] | None,
        *,
        executor: Executor | None,
        pool: str,
    ) -> None:
        """The implementation of `name` for attempts pinned to an older `generation`."""
        executor = executor_of(
            "register_historical",
            name,
            fn,
            executor,
            async_callables=self.async_callables,
            pool=pool,
            max_workers=max(4, self.service.settings.concurrency),
        )
        self.host.serve_historical(generation, name, executor)

    def bind(
        self,
        name: str,
        *,
        executor: str,
        config: dict[str, Any] | None,
        timeout_seconds: float | None,
        retry: RetryPolicy | None,
        control_fallback: ControlFallback,
        handoff: HandoffPolicy,
    ) -> None:
        """Define (or redefine) binding `name` on a registered executor."""
        where = f"bindings.{name}"
        binding = define_binding(
            name,
            executor=executor,
            config=config,
            timeout_seconds=timeout_seconds,
            retry=retry,
            control_fallback=control_fallback,
            handoff=handoff,
        )
        with self.service.configuring():
            registered = self.executors.get(executor)
            if registered is None:
                raise unknown_executor(binding, self.executors, where)
            check_binding(binding, registered, where)
            before, executors = self.service.generation, dict(self.executors)
            self.service.set_binding(binding)
            self.host.keep_generation(before, executors)
            self.binding_paths.paths[name] = where

    def grant(
        self, name: str, *, config: dict[str, Any] | None, environment: dict[str, str] | None
    ) -> None:
        """Define (or redefine) binding grant `name` (rota.domain.grants)."""
        grant = check_grant(Grant(name=name, config=dict(config or {})))
        self.service.set_grant(grant, environment)

    def record_served(self) -> int:
        """Record (`core.binding.served`, once per name ever) every binding this scheduler
        can run: defined, and its executor registered here."""
        with self.service.configuring():
            bindings = list(self.service.bindings.values())
            names = [b.name for b in bindings if b.executor in self.executors]
        return self.service.lifecycle.record_served(names)

    def check_bindings(self) -> None:
        """Refuse (`unknown_executor`) a defined binding on an unregistered executor."""
        with self.service.configuring():
            for name in sorted(self.service.bindings):
                self.binding_paths.require_executor(self.service.bindings.get(name), self.executors)


__all__ = ["UNBOUNDED_POOL_THREADS", "RegisterOptions", "Registry", "TypedBinding"]
