"""The embedded API's own refusals: waiting on a handle, and registering an executor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rota.domain.errors import ErrorCode, RotaError

if TYPE_CHECKING:
    from rota.application.queries.work_views import ErrorView, WorkView


class ApiCode(ErrorCode):
    """The embedded API's codes: what a `WorkHandle` reports, and what `register()` refuses."""

    WAIT_TIMEOUT = "wait_timeout"
    """`WorkHandle.wait()` or `result()` timed out before the Work settled; it may settle
    later (nothing was cancelled): wait again, or look at `handle.view()`."""
    WORK_FAILED = "work_failed"
    """The Work a handle waits on failed (permanently, or its retries are exhausted): the
    error's `attempt_error` is the failed attempt's code and message."""
    WORK_CANCELLED = "work_cancelled"
    """The Work a handle waits on was cancelled before it produced a result."""
    NOT_CALLABLE = "not_callable"
    """`register()` was given something that is not callable, or a callable that cannot
    take the one positional argument (the `LaunchContext`) an attempt is called with."""
    ALREADY_REGISTERED = "already_registered"
    """`register()` was given a name already registered: pass `replace=True` to replace it
    (attempts already running keep the implementation they started with)."""


class WaitTimeout(RotaError, TimeoutError):
    """The Work did not settle within the timeout (`wait_timeout`); also a `TimeoutError`."""

    code = ApiCode.WAIT_TIMEOUT


class WorkFailed(RotaError):
    """The Work failed (`work_failed`); `view` is its view, `attempt_error` the error of the
    attempt that failed it (None when none carries one)."""

    code = ApiCode.WORK_FAILED

    def __init__(
        self, message: str, *, view: WorkView, attempt_error: ErrorView | None = None
    ) -> None:
        super().__init__(message)
        self.view = view
        self.attempt_error = attempt_error


class WorkCancelled(RotaError):
    """The Work was cancelled (`work_cancelled`); `view` is its view."""

    code = ApiCode.WORK_CANCELLED

    def __init__(self, message: str, *, view: WorkView) -> None:
        super().__init__(message)
        self.view = view


class RegistrationError(RotaError):
    """`register()` refused an executor (`not_callable`, `already_registered`)."""


__all__ = [
    "ApiCode",
    "RegistrationError",
    "WaitTimeout",
    "WorkCancelled",
    "WorkFailed",
]
