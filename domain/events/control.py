"""Control dispatch: inject and interrupt as durable intents with dispatch tokens."""

from typing import Any, ClassVar, Literal

from rota.domain.events.base import Event

ControlKind = Literal["inject", "interrupt"]
Settlement = Literal["not_accepting", "failed", "ambiguous", "superseded"]


class ControlRequested(Event, tag="core.control.requested", frozen=True, kw_only=True):
    """An operator or service asked to inject input into, or interrupt, a Work's attempt.

    The intent is durable: it is dispatched (possibly several times, each with a new token)
    until it settles. An inject's input is accepted for the Work at the same time and stays
    pending until an attempt consumes it; `fallback` (pinned from the binding: `queue` or
    `drop`) says what happens to it if delivery fails. An interrupt requested with a
    request id is recorded under `request/<id>` (an inject's request id is its input key).
    """

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "control/<work>/<intent> | request/<id>"

    work_id: str
    intent: str
    kind: ControlKind
    attempt: int
    epoch: int
    input_key: str | None = None
    fallback: Literal["queue", "drop"] = "queue"
    requested_by: str = "operator"


class AttemptInterrupted(Event, tag="core.execution.interrupted", frozen=True, kw_only=True):
    """An interrupt fenced the attempt before the control was sent; the Work is ready again.

    The attempt keeps its resource hold until its stop is verified.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int


class ControlDispatched(Event, tag="core.control.dispatched", frozen=True, kw_only=True):
    """The intent was claimed for delivery with a fresh dispatch token."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    intent: str
    token: str
    attempt: int
    epoch: int


class ControlAcknowledged(Event, tag="core.control.acknowledged", frozen=True, kw_only=True):
    """The executor accepted the control under the same live token (inject: accepted, not
    consumed: the input stays pending until an outcome consumes it)."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    intent: str
    token: str


class ControlSettled(Event, tag="core.control.settled", frozen=True, kw_only=True):
    """A dispatch ended without acknowledgement: `not_accepting` (no retry, input kept),
    `failed` (the pinned fallback applied: input queued or dropped; provider text is never
    stored), `ambiguous` (delivery unknown: the same intent is dispatched again) or
    `superseded` (the target ended or moved to another epoch first)."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    intent: str
    token: str
    outcome: Settlement
    detail: Any = None

    pruned_fields: ClassVar[tuple[str, ...]] = ("detail",)
