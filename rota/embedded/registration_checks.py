"""What `Scheduler.register` refuses, and the in-process executor it builds for a callable
(an `async def` one run on the scheduler's own event loop thread)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rota.api_errors import ApiCode, RegistrationError
from rota.application.ports import Executor, LaunchContext
from rota.domain.errors import RotaError
from rota.embedded.async_executors import AsyncCallables
from rota.infrastructure.config import EntryCode
from rota.infrastructure.executors.inproc import InProcessExecutor


def check_callable(name: str, fn: Any) -> None:
    """Refuse (`not_callable`) what an attempt could not call as `fn(ctx)`."""
    if not callable(fn):
        raise RegistrationError(
            f"register({name!r}): {type(fn).__name__} {fn!r} is not callable",
            code=ApiCode.NOT_CALLABLE,
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no introspectable signature (some builtins): taken as it is
    try:
        signature.bind(None)
    except TypeError as exc:
        raise RegistrationError(
            f"register({name!r}): {getattr(fn, '__qualname__', fn)!r}{signature} cannot be "
            f"called with the one positional argument an attempt passes (the LaunchContext): "
            f"{exc}",
            code=ApiCode.NOT_CALLABLE,
        ) from None


def refuse_second(name: str, executors: dict[str, Executor], replace: bool) -> None:
    """Refuse (`already_registered`) a name already registered, unless `replace`."""
    if not replace and name in executors:
        raise RegistrationError(
            f"an executor named {name!r} is already registered; pass replace=True to replace it",
            code=ApiCode.ALREADY_REGISTERED,
        )


def executor_of(
    what: str,
    name: str,
    fn: Callable[[LaunchContext], object] | None,
    executor: Executor | None,
    *,
    async_callables: AsyncCallables,
    pool: str,
    max_workers: int,
    inline: bool = False,
) -> Executor:
    """`executor`, or an `InProcessExecutor` running `fn` (exactly one of them; `what`
    names the method for the message)."""
    if (fn is None) == (executor is None):
        raise RotaError(f"{what} needs exactly one of fn or executor", code=EntryCode.USAGE)
    if executor is not None:
        return executor
    assert fn is not None
    check_callable(name, fn)
    return InProcessExecutor(
        name, async_callables.wrap(fn), pool=pool, inline=inline, max_workers=max_workers
    )


__all__ = ["check_callable", "executor_of", "refuse_second"]
