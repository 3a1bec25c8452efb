"""Fold rules of a Work's own events: its input, holds and gates, cancellation, recovery
and retry timers (each takes the Work with its version already bumped).
"""

from __future__ import annotations

from datetime import datetime

from msgspec.structs import replace

from rota.domain.events import InputAccepted, RetryArmed, RetryFired
from rota.domain.events.admission import (
    BudgetHeld,
    GateHeld,
    GateRefused,
    GateReleased,
    WorkCancelled,
)
from rota.domain.events.recovery import (
    AttemptAdopted,
    AttemptLost,
    AttemptRecovered,
    AttemptRecoveryFailed,
    HoldReleased,
    WorkHeld,
)
from rota.domain.events.retry import _RetryRequest
from rota.domain.evolve_recovery import cancelled, controls_after, lost, recovered
from rota.domain.segments import swap_open, with_current
from rota.domain.state import Hold, PendingInput, WorkState


def on_input(
    work: WorkState, event: InputAccepted, position: int, at: datetime, *, bump: int = 0
) -> WorkState:
    """`bump`: what to add to the Work's version in the same copy (`evolve`'s fast rules)."""
    item = PendingInput(position, event.key, event.payload, event.correlation_key)
    return replace(work, version=work.version + bump, pending=(*work.pending, item))


def _held(work: WorkState, hold: Hold) -> WorkState:
    return replace(work, holds=(*work.holds, hold))


def on_budget_held(work: WorkState, event: BudgetHeld, position: int, at: datetime) -> WorkState:
    return _held(work, Hold("budget", event.reason, f"budget:{event.budget}", position))


def on_gate_held(work: WorkState, event: GateHeld, position: int, at: datetime) -> WorkState:
    return _held(work, Hold("gate", event.reason, event.registration, position))


def on_work_held(work: WorkState, event: WorkHeld, position: int, at: datetime) -> WorkState:
    return _held(work, Hold(event.kind, event.reason, event.holder, position))


def on_gate_released(
    work: WorkState, event: GateReleased, position: int, at: datetime
) -> WorkState:
    holds = tuple(
        h for h in work.holds if not (h.kind == "gate" and h.holder == event.registration)
    )
    return replace(work, holds=holds, gate_pass=True)


def on_cancelled(
    work: WorkState, event: GateRefused | WorkCancelled, position: int, at: datetime
) -> WorkState:
    current = work.current
    if current is not None:
        work = controls_after(work, current.number, [])
    return cancelled(work, at)


def on_hold_released(
    work: WorkState, event: HoldReleased, position: int, at: datetime
) -> WorkState:
    holds = tuple(h for h in work.holds if h.kind != event.kind)
    work = replace(work, holds=holds, budget_pass=work.budget_pass or event.kind == "budget")
    current = work.current
    if event.kind == "crash_loop" and current is not None:
        work = with_current(work, replace(current, relaunches=0))
    return work


def on_recovered(
    work: WorkState, event: AttemptRecovered, position: int, at: datetime
) -> WorkState:
    # A dispatch in flight to the old epoch is void: the same intent goes out again.
    controls = tuple(
        replace(c, state="pending", token=None)
        if c.attempt == event.attempt and c.state == "dispatched"
        else c
        for c in work.controls
    )
    return recovered(replace(work, controls=controls), event, at)


def on_adopted(work: WorkState, event: AttemptAdopted, position: int, at: datetime) -> WorkState:
    attempt = work.current
    segment = attempt.open_segment if attempt is not None else None
    if attempt is None or segment is None:
        return work
    return with_current(
        work, replace(attempt, segments=swap_open(attempt, replace(segment, adopted=True)))
    )


def on_recovery_failed(
    work: WorkState, event: AttemptRecoveryFailed, position: int, at: datetime
) -> WorkState:
    # The attempt's ending is its `core.execution.failed`, appended with this event; the
    # count of failed recoveries in a row is read from the attempts (`rota.domain.recovery`).
    return work


def on_lost(work: WorkState, event: AttemptLost, position: int, at: datetime) -> WorkState:
    return lost(controls_after(work, event.attempt, []), event, position, at)


def on_retry_request(
    work: WorkState, event: _RetryRequest, position: int, at: datetime
) -> WorkState:
    if event.boundary != work.retry.failed_at or position <= work.retry.failed_at:
        return work  # a request answers one failure; it never clears a later one
    retry = replace(work.retry, failures=0, blocked_reason=None, next_due=None)
    return replace(work, retry=retry)


def on_retry_armed(work: WorkState, event: RetryArmed, position: int, at: datetime) -> WorkState:
    retry = replace(work.retry, generation=event.generation, next_due=event.due_at)
    return replace(work, retry=retry)


def on_retry_fired(work: WorkState, event: RetryFired, position: int, at: datetime) -> WorkState:
    if event.generation != work.retry.generation:
        return work
    return replace(work, retry=replace(work.retry, next_due=None))
