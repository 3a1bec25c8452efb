"""The checks of the embedded API's bindings: the fields `Scheduler.bind` takes, and whether
a registered executor runs a binding, named by the field path where it was defined."""

from __future__ import annotations

from typing import Any, get_args

from rota.application.ports import Executor
from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.policy import Binding, ControlFallback, HandoffPolicy, RetryPolicy
from rota.infrastructure.config import Config, check_binding, check_binding_name, unknown_executor


def check_timeout(binding: str, timeout_seconds: float | None) -> None:
    """A binding's timeout must be > 0 (None: the settings' default); NaN is refused too."""
    if timeout_seconds is not None and not timeout_seconds > 0:
        raise InvalidCommand(
            f"bindings.{binding}.timeout_seconds must be > 0, not {timeout_seconds!r} "
            "(None: settings.timeout_seconds)",
            code=DomainCode.INVALID_CONFIG,
        )


def define_binding(
    name: str,
    *,
    executor: str,
    config: dict[str, Any] | None,
    timeout_seconds: float | None,
    retry: RetryPolicy | None,
    control_fallback: ControlFallback,
    handoff: HandoffPolicy,
) -> Binding:
    """The binding `Scheduler.bind` defines, each field checked (`invalid_config`, naming
    the field's path `bindings.<name>.<field>`)."""
    check_binding_name(name)
    where = f"bindings.{name}"
    check_timeout(name, timeout_seconds)
    policy = retry or RetryPolicy()
    policy.validate(f"{where}.retry")
    if control_fallback not in get_args(ControlFallback):
        raise InvalidCommand(
            f'{where}.control_fallback must be "queue" or "drop", not {control_fallback!r}',
            code=DomainCode.INVALID_CONFIG,
        )
    if handoff not in get_args(HandoffPolicy):
        raise InvalidCommand(
            f'{where}.handoff must be "stop" or "continue", not {handoff!r}',
            code=DomainCode.INVALID_CONFIG,
        )
    return Binding(
        name=name,
        executor=executor,
        config=dict(config or {}),
        timeout_seconds=timeout_seconds,
        retry=policy,
        control_fallback=control_fallback,
        handoff=handoff,
    )


class BindingPaths:
    """Where each binding was defined, for messages: `bindings[0]` (the config file) or
    `bindings.<name>` (`bind()`)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.paths: dict[str, str] = dict(config.binding_paths)

    def where(self, binding_name: str) -> tuple[str, str]:
        """The binding's field path, and the config file's name when it was defined there."""
        where = self.paths.get(binding_name, f"bindings.{binding_name}")
        from_file = self.config.binding_paths.get(binding_name) == where
        return where, self.config.source if from_file else ""

    def check(self, binding: Binding, executor: Executor) -> None:
        """The binding meets its executor's config rules (`check_binding`)."""
        check_binding(binding, executor, *self.where(binding.name))

    def require_executor(self, binding: Binding | None, executors: dict[str, Executor]) -> None:
        """Refuse (`unknown_executor`) a binding whose executor is not registered."""
        if binding is None or binding.executor in executors:
            return  # an unknown binding waits (`unknown_binding`) until one is defined
        raise unknown_executor(binding, executors, *self.where(binding.name))
