"""Executors: plugins that launch, observe, stop (and optionally inject into) attempts.

The contract is `rota.application.ports.Executor`. Built in: `shell` (command lines, in
`shell`) and in-process Python callables (`inproc`). `rota.bootstrap` instantiates the
built-in ones; `builtin_registrations` says how they register without starting any, and
`builtin_executor_types` gives their classes (the configuration checks bindings with them).
"""

from __future__ import annotations

from rota.application.executor_directory import registration_of
from rota.application.ports import Executor
from rota.domain.policy import Registration


def builtin_executor_types() -> dict[str, type[Executor]]:
    """The executors every scheduler has, by name, as classes (nothing is started)."""
    from rota.infrastructure.executors.shell import ShellExecutor

    return {ShellExecutor.name: ShellExecutor}


def builtin_registrations() -> dict[str, Registration]:
    """The registrations of the executors every scheduler has (`shell`)."""
    return {name: registration_of(name, kind) for name, kind in builtin_executor_types().items()}
