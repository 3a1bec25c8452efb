"""Calling an executor's launch, and what the host does with how it returned.

`call_launch` runs one `Executor.launch` (on a task thread of its own, or on the loop for
an inline executor); `call_launch_many` runs a batch of one executor's launches
(`Executor.launch_many`, for an executor that declares `batch_launch`) as one task of the
host's launch pool, a fixed small pool (`LAUNCH_POOL_THREADS` threads). Either way each
launch ends in `launched`: a definite refusal fails the attempt (`executor_error`,
`invalid_config`), a lost lease cancels it, anything else is ambiguous and keeps the
attempt's slot until a stop is verified, and a launch of an executor that declares
`recover` that returned without persisting its recovery metadata is unacknowledged (seed
001: missing acknowledgement records a safe failure and retains resource exclusion).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rota.application.errors import ExecutorError, InvalidExecutorConfig
from rota.application.ports import Done, Executor, Launch, LaunchContext
from rota.domain.errors import LeaseLost
from rota.domain.failures import FailureCode
from rota.domain.results import Result

if TYPE_CHECKING:
    from rota.application.launches import Held

log = logging.getLogger("rota.host")
# Threads of the host's launch pool: batched launches (`Executor.batch_launch`) run there,
# one task a pass and executor; a launch that may block runs on a thread of its own.
LAUNCH_POOL_THREADS = 2
PersistAll = Callable[[Sequence[tuple[LaunchContext, Any]]], list[BaseException | None]]
# Whether the host handled a launch's error as a write the store did not take (it takes no
# writes: `rota.application.unrecorded_launch`), so the attempt is charged nothing.
Unwritable = Callable[["Held", Executor, Exception], bool]


def call_launch(
    executor: Executor, held: Held, done: Done, unwritable: Unwritable | None = None
) -> None:
    """Call `executor.launch` for the held attempt and act on how it returned."""
    error: Exception | None = None
    try:
        executor.launch(held.ctx, done)
    except Exception as exc:
        error = exc
    finally:
        held.launching = False
    launched(executor, held, done, error, unwritable)


def call_launch_many(
    executor: Executor,
    batch: Sequence[tuple[Held, Done]],
    persist: PersistAll,
    unwritable: Unwritable | None = None,
) -> None:
    """Call `executor.launch_many` for a batch of held attempts and act on each launch."""
    items = [Launch(held.ctx, done) for held, done in batch]
    try:
        executor.launch_many(items, persist)
    except Exception as exc:  # the batch as a whole: each launch not answered is ambiguous
        log.warning("executor %s failed while launching a batch", executor.name, exc_info=True)
        for item in items:
            if item.error is None:
                item.error = exc
    for (held, done), item in zip(batch, items, strict=True):
        held.launching = False
        error = item.error
        if error is not None and not isinstance(error, Exception):
            error = RuntimeError(f"launch interrupted: {type(error).__name__}")
        launched(executor, held, done, error, unwritable)


def launched(
    executor: Executor,
    held: Held,
    done: Done,
    error: Exception | None,
    unwritable: Unwritable | None = None,
) -> None:
    """Act on how a launch returned (`error`: what it raised, None if it returned)."""
    ctx = held.ctx
    if isinstance(error, LeaseLost):
        ctx.cancel.set()
        return
    if isinstance(error, InvalidExecutorConfig):  # retrying cannot cure it: permanent
        log.warning("executor %s refused %s: %s", executor.name, ctx.execution_id, error)
        done(error.failure(executor.name))
        return
    if isinstance(error, ExecutorError):
        log.warning(
            "executor %s could not launch %s", executor.name, ctx.execution_id, exc_info=error
        )
        message = f"executor {executor.name!r} could not launch"
        done(_failure(FailureCode.EXECUTOR_ERROR, message))
        return
    if error is not None and unwritable is not None and unwritable(held, executor, error):
        return
    if error is not None:
        # Not a definite refusal: something may have started. Keep the slot until a stop is
        # verified (seed 001: missing acknowledgement or an ambiguous operation records a
        # safe failure and retains resource exclusion).
        log.warning(
            "executor %s failed while launching %s", executor.name, ctx.execution_id,
            exc_info=error,
        )  # fmt: skip
        message = f"executor {executor.name!r} failed while launching; its slot is kept"
        done(_failure(FailureCode.LAUNCH_AMBIGUOUS, message, holds_resources=True))
        return
    if "recover" in executor.capabilities and not ctx.recovery_persisted:
        if held.reported:
            return  # it finished during its launch: nothing is left to recover
        if ctx.cancel.is_set():
            return  # cancelled (a lost lease): the launch's fenced writes were refused
        log.warning(
            "executor %s returned from launching %s without persisting its recovery "
            "metadata", executor.name, ctx.execution_id,
        )  # fmt: skip
        message = (
            f"executor {executor.name!r} returned from its launch without persisting its "
            "recovery metadata; the attempt keeps its slot until its stop is verified"
        )
        done(_failure(FailureCode.LAUNCH_UNACKNOWLEDGED, message, holds_resources=True))


def _failure(code: FailureCode, message: str, *, holds_resources: bool = False) -> Result:
    return Result(
        outcome="failed",
        error_code=code,
        error_message=message,
        holds_resources=holds_resources,
    )
