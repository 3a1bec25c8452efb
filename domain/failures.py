"""The codes a failed attempt carries (`AttemptFailed.error_code`, an attempt view's
`error.code`), one `FailureCode` member each, rendered into docs/errors.md.

These are not errors raised to a caller (those are the `ErrorCode` enums): they say why an
attempt ended failed, in the log, `rota work show`, the HTTP API and a `WorkFailed`'s
`attempt_error`. The strings are the ones the log has always held; a member is never
renamed. Two members name a family (`exit_<n>`, `signal_<n>`: a shell command's exit status
or the signal that killed it); `FailureCode.of` maps a concrete code to its member. A code
that is no member is the Work's own: what a callable raised with `rota.Fail(code)`.
"""

from __future__ import annotations

import re
from enum import StrEnum


class FailureCode(StrEnum):
    """The codes rota itself gives a failed attempt (a callable's own `rota.Fail` code is
    none of them)."""

    FAILED = "failed"
    """The attempt reported a failure without a code: look at its message and the Work's logs."""
    TIMED_OUT = "timed_out"
    """The attempt ran past its timeout and was stopped: raise `timeout_seconds`, or make the
    work faster."""
    LOST = "lost"
    """The lease expired and recovery proved nothing runs and no result exists: retried only
    for Work declared idempotent or deduplicated with `RetryPolicy(retry_on_lost=True)`."""
    CANCELLED = "cancelled"
    """A shell command was stopped because its lease was lost or its Work was cancelled or
    interrupted: nothing to do (the message says which)."""
    KILLED = "killed"
    """A shell command's wrapper was killed (SIGKILL, OOM) and left no exit status: check the
    host's memory and what kills processes."""
    EXIT = "exit_<n>"
    """A shell command exited with status n (not 0, not 78): its stderr tail in the attempt's data
    says why."""
    SIGNAL = "signal_<n>"
    """A shell command was killed by signal n: check what sent it (the OOM killer, an operator)."""
    INVALID_CONFIG = "invalid_config"
    """Permanent: the executor refused the binding's config at launch, or a shell command exited 78
    (EX_CONFIG): fix the binding or input, then retry the Work (`rota retry`)."""
    INVALID_RESULT = "invalid_result"
    """What the attempt returned is not a valid result (data not a JSON value, a bad `rota.result`
    line, a secret in its data): fix what it returns."""
    REPORTED_FAILURE = "reported_failure"
    """A shell command exited 0 but its `rota.result` line reported outcome `failed`: see its
    data."""
    UNHANDLED_EXCEPTION = "unhandled_exception"
    """An in-process callable raised an exception other than `rota.Fail` (the message is its type;
    the host logs the traceback): fix the callable or raise `rota.Fail`."""
    INVALID_RETRY_HINT = "invalid_retry_hint"
    """The attempt failed with a retry time that was not in the future or more than 7 days ahead;
    the hint was ignored: return a sound `retry_at`."""
    INPUT_FORGOTTEN = "input_forgotten"
    """Permanent: the Work's personal input was forgotten (`rota forget`) before the attempt
    launched; nothing ran. Submit a new Work with the data if it must run."""
    INPUT_UNREADABLE = "input_unreadable"
    """Permanent: a sealed personal value of the input does not open under the Work's key (a
    changed ciphertext); nothing ran. Run `rota audit verify`."""
    EXECUTOR_ERROR = "executor_error"
    """The executor could not launch the attempt (nothing started; the host logs why): check the
    executor's logs and resources, then retry."""
    LAUNCH_AMBIGUOUS = "launch_ambiguous"
    """The executor failed while launching, so something may have started: the slot is kept until a
    stop is verified (or `Scheduler.confirm_stopped` once you checked)."""
    LAUNCH_UNACKNOWLEDGED = "launch_unacknowledged"
    """The executor returned from its launch without persisting recovery metadata: the slot is kept
    until a stop is verified, as for `launch_ambiguous`."""
    RECOVERY_FAILED = "recovery_failed"
    """The lease was lost and recovery's executor found no evidence of the attempt (it answered
    `unknown` or failed): the host stops it and keeps the slot until the stop is verified (or
    `Scheduler.confirm_stopped` once you checked); then the retry policy applies. After
    `settings.recovery_failure_limit` in a row the Work is held (`recovery_exhausted`)."""
    ENVIRONMENT_UNAVAILABLE = "environment_unavailable"
    """The run environment (secrets, environment hook) could not be prepared; nothing was launched:
    check the configuration and the hook's logs."""
    UNSUPPORTED_GENERATION = "unsupported_generation"
    """No executor in this process serves the configuration generation the attempt was pinned to:
    register it with `register_historical`."""

    @classmethod
    def of(cls, code: str) -> FailureCode | None:
        """The member a concrete code belongs to (`exit_3` is `EXIT`), or None for a code of
        the Work's own (`rota.Fail`)."""
        try:
            return cls(code)
        except ValueError:
            pass
        family = _FAMILY.fullmatch(code)
        if family is None:
            return None
        return cls.EXIT if family.group(1) == "exit" else cls.SIGNAL

    def concrete(self, n: int) -> str:
        """The code of family member `EXIT` or `SIGNAL` for status or signal `n`."""
        if self not in (FailureCode.EXIT, FailureCode.SIGNAL):
            raise ValueError(f"{self.name} is not a family")
        return self.value.replace("<n>", str(n))


_FAMILY = re.compile(r"(exit|signal)_(\d+)")

__all__ = ["FailureCode"]
