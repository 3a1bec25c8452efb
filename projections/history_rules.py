"""What each event does to a Work's history (the history projection's fold rules).

`route_for(type)` gives, for an event of a Work's stream, the function that applies it to
the projection (`HistoryProjection`) and the Work's `WorkHistory`; an event about one
attempt goes on to that attempt's step (`_ATTEMPT_RULES`). Both tables are ordered (the
first rule whose types match wins, as an isinstance chain would) and resolved once per
concrete event type, so a long fold pays a dict lookup per event. Every function here
mutates the records it is given and records the attempt rows it changes in `h.dirty`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rota.domain.events import (
    AttemptClaimed,
    AttemptFailed,
    AttemptResumed,
    AttemptTimedOut,
    Event,
    InputAccepted,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    LeaseRenewed,
    RetryArmed,
    RetryFired,
    StopConfirmed,
)
from rota.domain.events.admission import (
    BudgetHeld,
    GateHeld,
    GateRefused,
    GateReleased,
    WorkCancelled,
)
from rota.domain.events.execution import _Outcome
from rota.domain.events.recovery import AttemptLost, AttemptRecovered, HoldReleased, WorkHeld
from rota.domain.events.retry import _RetryRequest
from rota.projections.records import (
    INTERRUPTED,
    AttemptHistory,
    FailureRecord,
    HoldRecord,
    Mark,
    OutcomeRecord,
    PhaseRecord,
    RecoveryRecord,
    RequestRecord,
    RetryRecord,
    SegmentRecord,
    WorkHistory,
    close_segment,
    outcome_kind,
)

if TYPE_CHECKING:
    from rota.projections.history import HistoryProjection

ATTEMPT_ROW = "attempt/"


def attempt_row(work_id: str, number: int) -> str:
    return f"{ATTEMPT_ROW}{work_id}/{number}"


# -- what an event does to a Work's history --------------------------------------------


def _input(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: InputAccepted
) -> None:
    work.inputs += 1
    work.last_input = position


def _armed(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: RetryArmed
) -> None:
    failure = work.failures[-1].position if work.failures else None
    work.retries.append(
        RetryRecord(
            generation=event.generation,
            armed=position,
            armed_at=at,
            due_at=event.due_at,
            attempt=event.attempt,
            failure=failure,
            hinted=event.hinted,
        )
    )


def _fired(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: RetryFired
) -> None:
    for retry in work.retries:
        if retry.generation == event.generation and retry.fired is None:
            retry.fired, retry.fired_at = position, at


def _requested(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: _RetryRequest
) -> None:
    work.requests.append(
        RequestRecord(
            type=event.tag(),
            position=position,
            at=at,
            boundary=event.boundary,
            requested_by=event.requested_by,
            reason=event.reason,
        )
    )


def _hold_released(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: HoldReleased
) -> None:
    _release(work, position, at, event.released_by, lambda hold: hold.kind == event.kind)


def _gate_released(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: GateReleased
) -> None:
    holder = event.registration
    _release(work, position, at, holder, lambda hold: hold.kind == "gate" and hold.holder == holder)


def _about_attempt(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: Event
) -> None:
    number = getattr(event, "attempt", None)
    attempt = h.attempt(work.work_id, number) if isinstance(number, int) else None
    if attempt is None:
        work.marks.append(Mark(event.tag(), position, at))
        return
    h.dirty.add(attempt_row(work.work_id, attempt.number))
    step = _ATTEMPT_STEPS.get(type(event))
    if step is None:
        step = _attempt_step(type(event))
    step(h, work, attempt, position, at, event)


def _claimed(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: AttemptClaimed
) -> None:
    work.attempts = max(work.attempts, event.attempt)
    key = attempt_row(work.work_id, event.attempt)
    h.attempts[(work.work_id, event.attempt)] = AttemptHistory(
        work_id=work.work_id,
        number=event.attempt,
        claimed=position,
        claimed_at=at,
        owner=event.owner,
        epoch=event.epoch,
        lease_expires_at=event.lease_expires_at,
        deadline=event.deadline,
        consumed=list(event.consumed),
        trigger=event.trigger,
        segments=[SegmentRecord(kind="start", epoch=event.epoch, started=position, started_at=at)],
    )
    h.dirty.add(key)


def _held(
    h: HistoryProjection,
    work: WorkHistory,
    position: int,
    at: datetime,
    event: WorkHeld | BudgetHeld | GateHeld,
) -> None:
    if isinstance(event, BudgetHeld):
        kind, holder = "budget", f"budget:{event.budget}"
    elif isinstance(event, GateHeld):
        kind, holder = "gate", event.registration
    else:
        kind, holder = event.kind, event.holder
    work.holds.append(
        HoldRecord(kind=kind, reason=event.reason, holder=holder, held=position, held_at=at)
    )


def _release(
    work: WorkHistory,
    position: int,
    at: datetime,
    by: str,
    which: Callable[[HoldRecord], bool],
) -> None:
    for hold in work.holds:
        if hold.released is None and which(hold):
            hold.released, hold.released_at, hold.released_by = position, at, by


def _cancelled(
    h: HistoryProjection,
    work: WorkHistory,
    position: int,
    at: datetime,
    event: GateRefused | WorkCancelled,
) -> None:
    work.cancelled, work.cancelled_at, work.cancel_reason = position, at, event.reason
    by = event.registration if isinstance(event, GateRefused) else event.by
    _release(work, position, at, f"cancelled by {by}", lambda hold: True)
    current = h.attempt(work.work_id, work.attempts) if work.attempts else None
    if current is None:
        return
    last = current.outcome
    if last is None or last.kind == "waiting":
        # A live or parked attempt ends `cancelled` with the Work (see evolve).
        close_segment(current, position, at)
        current.outcomes.append(
            OutcomeRecord(kind="cancelled", position=position, at=at, epoch=current.epoch)
        )
        h.dirty.add(attempt_row(work.work_id, current.number))


def _outcome(
    work: WorkHistory, attempt: AttemptHistory, position: int, at: datetime, event: Event
) -> None:
    close_segment(attempt, position, at)
    record = OutcomeRecord(kind=outcome_kind(event), position=position, at=at, epoch=attempt.epoch)
    if isinstance(event, AttemptFailed):
        record.error_code, record.error_message = event.error_code, event.error_message
        record.permanent, record.retry_at = event.permanent, event.retry_at
        record.retry_unknown = event.retry_unknown
    elif isinstance(event, AttemptTimedOut):
        record.error_code, record.error_message = "timed_out", "execution timeout"
    elif isinstance(event, AttemptLost):
        record.error_code, record.error_message = "lost", f"lease lost; {event.evidence}"
    attempt.outcomes.append(record)
    if record.kind in ("failed", "timed_out", "lost"):
        work.failures.append(
            FailureRecord(
                kind=record.kind,
                position=position,
                at=at,
                attempt=attempt.number,
                code=record.error_code or record.kind,
                message=record.error_message or "",
                permanent=record.permanent,
            )
        )


# -- routing: the step for each kind of event, resolved once per event type -------------
#
# `_ROUTES` maps an event type to what it does to a Work's history; `_ATTEMPT_STEPS`, for an
# event about one attempt, to what it does to that attempt. Both are resolved from ordered
# rules (the first whose types match wins, as an isinstance chain would) and cached, so a
# long fold pays a dict lookup per event.

Route = Callable[["HistoryProjection", WorkHistory, int, datetime, Any], None]
Step = Callable[["HistoryProjection", WorkHistory, AttemptHistory, int, datetime, Any], None]


def _open_segment(attempt: AttemptHistory) -> SegmentRecord | None:
    segment = attempt.segments[-1] if attempt.segments else None
    return segment if segment is not None and segment.ended is None else None


def _invoked(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LaunchInvoked,
) -> None:
    if (segment := _open_segment(attempt)) is not None:
        segment.invoked, segment.isolated = position, event.isolated


def _phase_began(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LaunchPhaseBegan,
) -> None:
    if (segment := _open_segment(attempt)) is not None:
        segment.phases.append(PhaseRecord(name=event.phase, began=position, began_at=at))


def _phase_ended(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LaunchPhaseEnded,
) -> None:
    if (segment := _open_segment(attempt)) is None:
        return
    for phase in reversed(segment.phases):
        if phase.name == event.phase and phase.ended is None:
            phase.ended, phase.ended_at, phase.outcome = position, at, event.outcome
            break


def _renewed(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LeaseRenewed,
) -> None:
    renew(attempt, 1, position, event.lease_expires_at)


def renew(attempt: AttemptHistory, count: int, position: int, expiry: datetime) -> None:
    """`count` renewals of `attempt` in a row, the last at `position` (a bulk fold folds a
    run of them at once: `HistoryProjection.fold_page`)."""
    attempt.renewals += count
    attempt.renewed = position
    attempt.lease_expires_at = expiry


def _released(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LeaseReleased,
) -> None:
    attempt.released, attempt.release_reason = position, event.reason


def _stop_confirmed(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: StopConfirmed,
) -> None:
    attempt.stop_confirmed = position


def _resumed(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: AttemptResumed,
) -> None:
    attempt.epoch, attempt.owner = event.epoch, event.owner
    attempt.lease_expires_at, attempt.deadline = event.lease_expires_at, event.deadline
    attempt.released = attempt.release_reason = None
    attempt.consumed.extend(event.consumed)
    attempt.segments.append(
        SegmentRecord(
            kind="resume", epoch=event.epoch, started=position, started_at=at, wake=event.wake
        )
    )


def _recovered(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: AttemptRecovered,
) -> None:
    close_segment(attempt, position, at)
    relaunch = event.mode == "relaunch"
    attempt.recoveries.append(
        RecoveryRecord(
            position=position,
            at=at,
            mode=event.mode,
            reason=event.reason,
            epoch=event.epoch,
            previous_owner=event.previous_owner,
        )
    )
    attempt.epoch, attempt.owner = event.epoch, event.owner
    attempt.lease_expires_at = event.lease_expires_at
    attempt.released = attempt.release_reason = None
    attempt.segments.append(
        SegmentRecord(
            kind="relaunched" if relaunch else "recovered",
            epoch=event.epoch,
            started=position,
            started_at=at,
        )
    )


def _ended(
    _: HistoryProjection,
    work: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: Event,
) -> None:
    _outcome(work, attempt, position, at, event)


def _marked(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: Event,
) -> None:
    attempt.marks.append(Mark(event.tag(), position, at))


_ATTEMPT_RULES: tuple[tuple[type | tuple[type, ...], Step], ...] = (
    (LaunchInvoked, _invoked),
    (LaunchPhaseBegan, _phase_began),
    (LaunchPhaseEnded, _phase_ended),
    (LeaseRenewed, _renewed),
    (LeaseReleased, _released),
    (StopConfirmed, _stop_confirmed),
    (AttemptResumed, _resumed),
    (AttemptRecovered, _recovered),
    ((_Outcome, AttemptLost), _ended),
)
_ATTEMPT_STEPS: dict[type, Step] = {}


def _attempt_step(kind: type) -> Step:
    """The step for an attempt event of type `kind` (cached); an interruption ends it."""
    step = next((step for types, step in _ATTEMPT_RULES if issubclass(kind, types)), None)
    if step is None:
        tag = getattr(getattr(kind, "__struct_config__", None), "tag", None)
        step = _ended if tag == INTERRUPTED else _marked
    _ATTEMPT_STEPS[kind] = step
    return step


_RULES: tuple[tuple[type | tuple[type, ...], Route], ...] = (
    (InputAccepted, _input),
    (AttemptClaimed, _claimed),
    (RetryArmed, _armed),
    (RetryFired, _fired),
    (_RetryRequest, _requested),
    ((WorkHeld, BudgetHeld, GateHeld), _held),
    (HoldReleased, _hold_released),
    (GateReleased, _gate_released),
    (
        (GateRefused, WorkCancelled),
        _cancelled,
    ),
)
ROUTES: dict[type, Route] = {}


def route_for(kind: type) -> Route:
    """What an event of type `kind` does to a Work's history (cached in `ROUTES`)."""
    route = next((route for types, route in _RULES if issubclass(kind, types)), None)
    ROUTES[kind] = route or _about_attempt
    return ROUTES[kind]
