"""The typed views the embedded API returns: frozen msgspec Structs with the fields, in the
order, of the JSON the CLI prints (`rota work show --json` is `msgspec.json.encode(view)`).

`Scheduler.work()` is a `WorkView`, `works()` a list of `WorkSummary`, `executions()` a
list of `AttemptView`, `events()` a list of `EventView`. Times are RFC 3339 UTC strings
(as in the JSON), `data` and `usage` the JSON values the log holds. docs/guide.md
("Reading state") documents every field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from rota.application.ports import RecordedEvent
from rota.application.timestamps import format_timestamp
from rota.domain import waits
from rota.domain.admission import Waiting
from rota.domain.artifacts import Artifact
from rota.domain.events.work import Throttle
from rota.domain.state import AttemptState, Segment, WorkState


class View(msgspec.Struct, frozen=True, kw_only=True):
    """The base of every view: frozen, encoded by msgspec with every field."""

    def to_json(self) -> bytes:
        """The view as the CLI's `--json` prints it (without the newline)."""
        return msgspec.json.encode(self)


class PhaseView(View, frozen=True, kw_only=True):
    name: str
    began_at: str | None
    ended_at: str | None
    outcome: str | None


class SegmentView(View, frozen=True, kw_only=True):
    kind: str
    epoch: int
    started_at: str | None
    ended_at: str | None
    invoke: str | None
    isolated: bool
    wake: int | None
    phases: tuple[PhaseView, ...]


class ErrorView(View, frozen=True, kw_only=True):
    code: str
    message: str


class AttemptView(View, frozen=True, kw_only=True):
    number: int
    execution: str
    epoch: int
    state: str
    outcome: str | None
    owner: str
    lease_expires_at: str | None
    deadline: str | None
    released: bool
    stop_confirmed: bool
    executor: str
    generation: str
    grants: tuple[str, ...]
    consumed: tuple[int, ...]
    error: ErrorView | None
    permanent: bool
    usage: dict[str, float]
    data: Any
    artifacts: tuple[Artifact, ...]
    remaining_seconds: float | None
    segments: tuple[SegmentView, ...]
    dropped_segments: int
    dropped_active_seconds: float
    wait: WaitView | None = None


class WaitView(View, frozen=True, kw_only=True):
    """A parked attempt's wait predicate (rota.domain.waits)."""

    kind: str  # key, schema or named (any: a park without a predicate)
    describe: str
    predicate: Any  # the predicate as the log holds it, or None


class PendingView(View, frozen=True, kw_only=True):
    position: int
    key: str
    correlation_key: str | None
    # Why this input does not resume the parked attempt (its wait does not match it), or
    # None: it is not queued behind a wait.
    queued: str | None = None


class RetryView(View, frozen=True, kw_only=True):
    failures: int
    budget: int | None
    next_due: str | None
    blocked_reason: str | None


class WaitingView(View, frozen=True, kw_only=True):
    code: str
    detail: str


class HoldView(View, frozen=True, kw_only=True):
    kind: str
    reason: str
    holder: str
    position: int


class ControlView(View, frozen=True, kw_only=True):
    intent: str
    kind: str
    state: str
    attempt: int
    epoch: int
    dispatches: int
    input_position: int | None
    fallback: str
    position: int


class WorkView(View, frozen=True, kw_only=True):
    id: str
    state: str
    scope: str
    binding: str
    kind: str
    trigger: str
    safety: str
    grants: tuple[str, ...]
    # Flow control (`submit(priority=, keys=, cost=, throttle=)`): higher starts first;
    # the first key is the Work's flow (fair share); `cost` is the tokens a start takes
    # from each of its rate buckets.
    priority: int
    keys: tuple[str, ...]
    cost: int
    throttle: Throttle | None
    version: int
    submitted_at: str | None
    pending: tuple[PendingView, ...]
    attempts: tuple[AttemptView, ...]
    retry: RetryView
    waiting: WaitingView | None
    holds: tuple[HoldView, ...]
    controls: tuple[ControlView, ...]
    passes: tuple[str, ...]

    @property
    def settled(self) -> bool:
        """Completed, failed (permanently, or its retries exhausted) or cancelled."""
        return self.state in SETTLED


class WorkSummary(View, frozen=True, kw_only=True):
    id: str
    state: str
    scope: str
    binding: str
    kind: str
    # Flow control's fields, at what a Work that asks for none has (every field is encoded).
    priority: int = 0
    keys: tuple[str, ...] = ()
    cost: int = 1
    throttle: Throttle | None = None
    attempts: int
    last_outcome: str | None
    waiting: str | None


class EventView(View, frozen=True, kw_only=True):
    position: int
    stream: str
    version: int
    type: str
    delivery_id: str | None
    recorded_at: str
    data: Any


SETTLED = frozenset({"completed", "failed", "cancelled"})


def _time(when: datetime | None) -> str | None:
    return None if when is None else format_timestamp(when)


def segment_view(segment: Segment) -> SegmentView:
    return SegmentView(
        kind=segment.kind,
        epoch=segment.epoch,
        started_at=_time(segment.started_at),
        ended_at=_time(segment.ended_at),
        invoke=segment.invoke,
        isolated=segment.isolated,
        wake=segment.wake,
        phases=tuple(
            PhaseView(
                name=p.name,
                began_at=_time(p.began_at),
                ended_at=_time(p.ended_at),
                outcome=p.outcome,
            )
            for p in segment.phases
        ),
    )


def attempt_view(attempt: AttemptState) -> AttemptView:
    error = None
    if attempt.error_code is not None:
        error = ErrorView(code=attempt.error_code, message=attempt.error_message or "")
    return AttemptView(
        number=attempt.number,
        execution=attempt.execution_id,
        epoch=attempt.epoch,
        state=attempt.status,
        outcome=attempt.outcome,
        owner=attempt.owner,
        lease_expires_at=_time(attempt.lease_expires_at),
        deadline=_time(attempt.deadline),
        released=attempt.released,
        stop_confirmed=attempt.stop_confirmed,
        executor=attempt.pinned.registration.name,
        generation=attempt.pinned.generation,
        grants=attempt.grants,
        consumed=tuple(p.position for p in attempt.consumed),
        error=error,
        permanent=attempt.permanent,
        usage=dict(attempt.usage),
        data=attempt.data,
        artifacts=attempt.artifacts,
        remaining_seconds=attempt.remaining_seconds,
        segments=tuple(segment_view(s) for s in attempt.segments),
        dropped_segments=attempt.dropped_segments,
        dropped_active_seconds=attempt.dropped_active_seconds,
        wait=_wait(attempt),
    )


def _wait(attempt: AttemptState) -> WaitView | None:
    if attempt.status != "parked":
        return None
    wait = attempt.wait
    return WaitView(
        kind="any" if wait is None else wait.__struct_config__.tag,  # type: ignore[arg-type]
        describe=waits.describe(wait),
        predicate=None if wait is None else msgspec.to_builtins(wait),
    )


def _waiting(waiting: Waiting | None) -> WaitingView | None:
    return None if waiting is None else WaitingView(code=waiting.code, detail=waiting.detail)


def work_view(work: WorkState, waiting: Waiting | None = None) -> WorkView:
    budget = work.current.pinned.binding.retry.max_attempts if work.current else None
    current = work.current
    parked = current if current is not None and current.status == "parked" else None
    return WorkView(
        id=work.work_id,
        state=work.state,
        scope=work.scope,
        binding=work.binding,
        kind=work.kind,
        trigger=work.trigger,
        safety=work.safety,
        grants=work.grants,
        priority=work.priority,
        keys=work.keys,
        cost=work.cost,
        throttle=work.throttle,
        version=work.version,
        submitted_at=_time(work.submitted_at),
        pending=tuple(
            PendingView(
                position=p.position,
                key=p.key,
                correlation_key=p.correlation_key,
                queued=None if parked is None else waits.queued_reason(parked, p),
            )
            for p in work.pending
        ),
        attempts=tuple(attempt_view(a) for a in work.attempts),
        retry=RetryView(
            failures=work.retry.failures,
            budget=budget,
            next_due=_time(work.retry.next_due),
            blocked_reason=work.retry.blocked_reason,
        ),
        waiting=_waiting(waiting),
        holds=tuple(
            HoldView(kind=h.kind, reason=h.reason, holder=h.holder, position=h.position)
            for h in work.holds
        ),
        controls=tuple(
            ControlView(
                intent=c.intent,
                kind=c.kind,
                state=c.state,
                attempt=c.attempt,
                epoch=c.epoch,
                dispatches=c.dispatches,
                input_position=c.input_position,
                fallback=c.fallback,
                position=c.position,
            )
            for c in work.controls
        ),
        passes=tuple(
            name for name, on in (("budget", work.budget_pass), ("gate", work.gate_pass)) if on
        ),
    )


def work_summary(work: WorkState, waiting: Waiting | None = None) -> WorkSummary:
    current, flow = work.current, work.flow
    summary = WorkSummary(
        id=work.work_id,
        state=work.state,
        scope=work.scope,
        binding=work.binding,
        kind=work.kind,
        attempts=len(work.attempts),
        last_outcome=current.outcome if current else None,
        waiting=None if waiting is None else waiting.code,
    )
    if flow is None:  # (the defaults: no flow control asked)
        return summary
    return msgspec.structs.replace(
        summary, priority=flow.priority, keys=flow.keys, cost=flow.cost, throttle=flow.throttle
    )


def json_value(view: View) -> Any:
    """The view as the JSON value its `to_json` encodes: dicts, lists, strings, numbers
    (`rota replay at --json` folds Works into these)."""
    return msgspec.json.decode(view.to_json())


def event_view(recorded: RecordedEvent) -> EventView:
    return EventView(
        position=recorded.position,
        stream=recorded.stream,
        version=recorded.version,
        type=recorded.type,
        delivery_id=recorded.delivery_id,
        recorded_at=recorded.recorded_at,
        data=event_data(recorded.event),
    )


def event_data(value: Any) -> Any:
    """An event as JSON values with every field, those at their defaults too: the stored
    form of the newer versions leaves defaults out, a view of the event shows them all
    (as the event reads), whichever version wrote it."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        out: dict[str, Any] = {}
        if isinstance(config.tag, str):
            out[config.tag_field or "type"] = config.tag
        for field in msgspec.structs.fields(value):
            out[field.encode_name] = event_data(getattr(value, field.name))
        return out
    if isinstance(value, list):
        return [event_data(item) for item in value]
    if isinstance(value, tuple):  # (as `msgspec.to_builtins` gives it)
        return tuple(event_data(item) for item in value)
    if isinstance(value, dict):
        return {key: event_data(item) for key, item in value.items()}
    return msgspec.to_builtins(value)


__all__ = [
    "AttemptView",
    "ControlView",
    "ErrorView",
    "EventView",
    "HoldView",
    "PendingView",
    "PhaseView",
    "RetryView",
    "SegmentView",
    "View",
    "WaitView",
    "WaitingView",
    "WorkSummary",
    "WorkView",
    "attempt_view",
    "event_data",
    "event_view",
    "json_value",
    "work_summary",
    "work_view",
]
