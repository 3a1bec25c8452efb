"""In-process executor: run a Python callable as an attempt (the embedded case).

`fn(ctx)` receives the `LaunchContext`: `ctx.inputs` (the consumed input payloads, oldest
first), `ctx.trigger`, `ctx.config` (the binding's config), `ctx.cancel` (a
`threading.Event` set when the lease is lost, the attempt interrupted or the scheduler
stops; `ctx.cancel_reason` says why), `ctx.phase(name)` and `ctx.persist_recovery(...)`.

What it returns decides the outcome:
- a `rota.Result`: used as it is (validated), its `artifacts` after those the callable
  added with `ctx.add_artifact(...)` (which a failure keeps too);
- any other JSON-serializable value: a completed attempt whose data is that value;
- raising `rota.Fail(code, message, permanent=..., retry_at=..., retry_unknown=...)`:
  a failed attempt with that operation error's code and message;
- raising anything else: a failed attempt with code `unhandled_exception` and the
  exception's class name only (its text may carry provider output and is never stored;
  the traceback goes to the `rota.executor` logger).

Calls run on a thread pool (`max_workers`), or inline on the launching thread with
`inline=True` for tiny callables. A running call cannot be killed: `stop()` reports
`stopped` only once the call has returned, and for a call whose recovery here found its
owning process possibly alive (on another host, or a live process here), only once that
process is gone (`owner_gone`). A returned call's result is kept until the log
has it (`forget`), so a result refused because the lease lapsed (a clock jump, a stalled
host) is handed to the recovery that adopts the attempt (`recover`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any

import msgspec

from rota.application.errors import PortCode
from rota.application.ports import Done, Executor, LaunchContext, Recovery, StopEvidence
from rota.domain.artifacts import Artifact
from rota.domain.errors import InvalidCommand, RotaError
from rota.domain.failures import FailureCode
from rota.domain.results import Result, validate_result

log = logging.getLogger("rota.executor")


class Fail(RotaError):
    """Raise from an in-process callable to fail the attempt with an operation error."""

    code = PortCode.FAILED

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        permanent: bool = False,
        retry_at: datetime | None = None,
        retry_unknown: bool = False,
    ) -> None:
        super().__init__(message or code, code=code)
        self.error_message = message
        self.permanent = permanent
        self.retry_at = retry_at
        self.retry_unknown = retry_unknown


def to_result(value: Any, artifacts: Sequence[Artifact] = ()) -> Result:
    """The Result a callable's return value stands for (validated), with the artifact
    references it added through `ctx.add_artifact` first."""
    # The value is stored exactly or refused: `validate_result` checks that the data is a
    # JSON value (a set, a tuple, bytes, a datetime or NaN is `invalid_result`, not changed).
    result = value if isinstance(value, Result) else Result(outcome="completed", data=value)
    if artifacts:
        result = msgspec.structs.replace(result, artifacts=[*artifacts, *result.artifacts])
    try:
        return validate_result(result)
    except InvalidCommand as refusal:
        return Result(
            outcome="failed", error_code=FailureCode.INVALID_RESULT, error_message=refusal.message
        )


def failure_result(exc: BaseException, artifacts: Sequence[Artifact] = ()) -> Result:
    if isinstance(exc, Fail):
        return to_result(
            Result(
                outcome="failed",
                error_code=exc.code,
                error_message=exc.error_message,
                permanent=exc.permanent,
                retry_at=exc.retry_at,
                retry_unknown=exc.retry_unknown,
            ),
            artifacts,
        )
    return Result(
        outcome="failed",
        error_code=FailureCode.UNHANDLED_EXCEPTION,
        error_message=type(exc).__name__,
    )


def owner_gone(owner: str) -> bool:
    """Whether the process an owner string (`host:pid:suffix`) names is known to be gone:
    a process of this host that no longer exists, or this very process (whose calls are
    known here). An owner on another host, or one alive here, may still run its calls."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class InProcessExecutor(Executor):
    """Runs one Python callable per attempt."""

    capabilities = frozenset({"stop", "interrupt", "inject"})
    quick_forget = True  # `forget` drops a kept result from a dict: called on the loop

    def __init__(
        self,
        name: str,
        fn: Callable[[LaunchContext], Any],
        *,
        pool: str = "agents",
        inline: bool = False,
        max_workers: int = 8,
    ) -> None:
        self.name = name
        self.fn = fn
        self.pool = pool
        self.inline = inline
        self._max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None
        self._running: dict[str, tuple[int, Future[None] | None, threading.Event]] = {}
        self._adopted: dict[str, Done] = {}
        self._contexts: dict[str, LaunchContext] = {}
        self._finished: dict[str, Result] = {}  # results reported, not yet durable
        # Attempts whose recovery found their owner possibly alive (on another host, or a
        # live process here): their stop is verified only once that owner is gone.
        self._elsewhere: dict[str, str] = {}
        self._lock = threading.Lock()

    def _call(self, ctx: LaunchContext, done: Done) -> None:
        result: Result | None = None
        try:
            result = to_result(self.fn(ctx), ctx.artifacts)
        except BaseException as exc:
            if not isinstance(exc, Fail):
                log.warning("attempt %s raised", ctx.execution_id, exc_info=True)
            result = failure_result(exc, ctx.artifacts)
        finally:
            if result is None:  # (only if building the failure itself failed)
                result = Result(outcome="failed", error_code=FailureCode.UNHANDLED_EXCEPTION)
            with self._lock:
                self._running.pop(ctx.execution_id, None)
                self._contexts.pop(ctx.execution_id, None)
                adopted = self._adopted.pop(ctx.execution_id, None)
                # Kept until the outcome is durable (`forget`) or the attempt ended
                # (`stop`): a result the log refused (the lease lapsed, as after a clock
                # jump) is handed to the recovery that adopts the attempt.
                self._finished[ctx.execution_id] = result
        # A recovery that adopted the call reports through its own callback (new epoch).
        (adopted or done)(result)

    def launch(self, ctx: LaunchContext, done: Done) -> None:
        if self.inline:
            with self._lock:
                self._contexts[ctx.execution_id] = ctx
                self._running[ctx.execution_id] = (ctx.epoch, None, ctx.cancel)
            self._call(ctx, done)
            return
        with self._lock:
            self._contexts[ctx.execution_id] = ctx
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self._max_workers, thread_name_prefix=f"rota-{self.name}"
                )
            future = self._pool.submit(self._call, ctx, done)
            self._running[ctx.execution_id] = (ctx.epoch, future, ctx.cancel)

    def recover(self, ctx: LaunchContext, metadata: Any, done: Done) -> Recovery:
        """A call still running in this process is adopted, and so is one that returned here
        and whose result is not durable yet; one in a dead process is gone.

        Evidence from this process is what it runs: a call it still runs, or finished with
        a result the log has not recorded (refused because the lease lapsed, as after a
        clock jump), is "attached" and reports through the new `done`. A callable cannot
        outlive its process: if the previous owner was a process on this host that no
        longer exists, nothing of the attempt runs ("stopped"). A previous owner that is
        alive elsewhere (or on another host) gives no evidence ("unknown").
        """
        with self._lock:
            entry = self._running.get(ctx.execution_id)
            if entry is not None:
                _, future, cancel = entry
                self._running[ctx.execution_id] = (ctx.epoch, future, cancel)
                self._adopted[ctx.execution_id] = done
                return "attached"
            finished = self._finished.get(ctx.execution_id)
        if finished is not None:
            done(finished)
            return "attached"
        owner = ctx.previous_owner or ""
        if owner_gone(owner):
            return "stopped"
        with self._lock:
            self._elsewhere[ctx.execution_id] = owner
        return "unknown"

    def forget(self, execution_id: str, epoch: int) -> None:
        """The outcome is durable (or the attempt is over): drop the kept result."""
        with self._lock:
            self._finished.pop(execution_id, None)
            self._elsewhere.pop(execution_id, None)

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> StopEvidence:
        """A call of this process is cancelled, and stopped once it returned. A call this
        process never ran is stopped, unless its recovery here found its owner possibly
        alive (`recover` answered "unknown"): then only once that owner is gone, since
        the call may still run there (the host failed that recovery and asks for a stop)."""
        with self._lock:
            self._finished.pop(execution_id, None)  # the attempt ended: its result is moot
            entry = self._running.get(execution_id)
            elsewhere = self._elsewhere.get(execution_id)
        if entry is None:
            if elsewhere is not None and not owner_gone(elsewhere):
                return "unknown"
            with self._lock:
                self._elsewhere.pop(execution_id, None)
            return "stopped"
        _, future, cancel = entry
        cancel.set()
        # Never block the host: a call that has not returned yet is "unknown", and the
        # host asks again on its next pass.
        if future is not None and future.done():
            return "stopped"
        return "unknown"

    def interrupt(self, execution_id: str, epoch: int) -> bool:
        """Set the call's `ctx.cancel` (reason: interrupted); True when it was running."""
        with self._lock:
            entry = self._running.get(execution_id)
            ctx = self._contexts.get(execution_id)
        if entry is None or entry[0] != epoch:
            return False
        if ctx is not None:
            ctx.cancel_reason = RotaError("the attempt was interrupted", code=PortCode.INTERRUPTED)
        entry[2].set()
        return True

    def inject(self, execution_id: str, epoch: int, position: int, payload: Any) -> str:
        """Queue the input on the running call's `ctx.injected` (see `take_injected`)."""
        with self._lock:
            entry = self._running.get(execution_id)
            ctx = self._contexts.get(execution_id)
        if entry is None or ctx is None or entry[0] != epoch:
            return "not_accepting"
        ctx.injected.put((position, payload))
        return "accepted"

    def close(self) -> None:
        with self._lock:
            for _, _, cancel in self._running.values():
                cancel.set()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
