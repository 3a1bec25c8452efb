"""Retry timers: a failure arms a durable timer; firing it is an idempotent event."""

from datetime import datetime
from typing import ClassVar

from rota.domain.events.base import Event


class RetryArmed(Event, tag="core.retry.armed", frozen=True, kw_only=True):
    """A failure armed a durable retry timer.

    `generation` is the failure count it answers (kept apart from attempt numbers);
    `ancestry` the input positions the failed attempt consumed, which the retry re-presents.
    `hinted` marks a delay taken from the executor's retry hint.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    generation: int
    attempt: int
    due_at: datetime
    ancestry: list[int]
    hinted: bool = False


class RetryFired(Event, tag="core.retry.fired", frozen=True, kw_only=True):
    """A due retry timer fired: the Work is eligible again. At most once per generation."""

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "retry/<work>/<generation>"

    work_id: str
    generation: int


class _RetryRequest(Event, frozen=True, kw_only=True):
    stream_pattern: ClassVar[str] = "work/<work>"
    # `request/<id>` instead when the operator's request carried a request id.
    delivery_pattern: ClassVar[str | None] = "retry-request/<work>/<boundary> | request/<id>"

    work_id: str
    boundary: int
    requested_by: str = "operator"
    reason: str = ""


class ManualRetry(_RetryRequest, tag="core.manual.retry", frozen=True, kw_only=True):
    """An operator asked to retry a failed Work (`rota retry WORK`).

    `boundary` is the log position of the failure it answers: a request clears only that
    failure, never a later one. It resets the failure budget (not attempt numbering),
    clears `exhausted` and `permanent_failure`, and disarms a pending timer. Refused while
    an attempt or wait is live and for terminal Work. Same meaning as `core.retry.requested`.
    """


class RetryRequested(_RetryRequest, tag="core.retry.requested", frozen=True, kw_only=True):
    """Alias of `core.manual.retry` (the name other components use); handled identically."""
