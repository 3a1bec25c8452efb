"""The fold: `evolve(work, event, position, at) -> WorkState`.

Pure and deterministic: time comes only from the event (`at` is its recorded time), so a
replay of the log rebuilds exactly the state the live scheduler held. Events that do not
concern a Work's state (capacity fences, turns) leave it unchanged.
"""

from __future__ import annotations

from datetime import datetime

from msgspec.structs import replace

from .events import (
    AttemptClaimed,
    AttemptCompleted,
    AttemptFailed,
    AttemptHandedOff,
    AttemptParked,
    AttemptResumed,
    AttemptTimedOut,
    Event,
    InputAccepted,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    LeaseRenewed,
    RecoveryPersisted,
    RetryArmed,
    RetryFired,
    StopConfirmed,
    WorkSubmitted,
)
from .events.admission import BudgetHeld, GateHeld, GateRefused, GateReleased, WorkCancelled
from .events.control import (
    AttemptInterrupted,
    ControlAcknowledged,
    ControlDispatched,
    ControlRequested,
    ControlSettled,
)
from .events.execution import _Outcome
from .events.recovery import (
    AttemptAdopted,
    AttemptLost,
    AttemptRecovered,
    HoldReleased,
    WorkHeld,
)
from .events.retry import _RetryRequest
from .fold_base import append_segment, close_segment, swap_open, take, with_current
from .fold_more import cancelled, control, controls_after, interrupted, lost, recovered
from .state import (
    AttemptState,
    Hold,
    PendingInput,
    Phase,
    RetryState,
    Segment,
    WorkState,
)


def evolve(work: WorkState | None, event: Event, position: int, at: datetime) -> WorkState | None:
    """Apply one event of the Work's stream; returns the new state."""
    if isinstance(event, WorkSubmitted):
        if work is not None:
            return replace(work, version=work.version + 1)
        return WorkState(
            work_id=event.work_id,
            scope=event.scope,
            binding=event.binding,
            kind=event.kind,
            trigger=event.trigger,
            safety=event.safety,
            version=1,
            submitted_at=at,
        )
    if work is None:
        return None
    work = replace(work, version=work.version + 1)
    if isinstance(event, InputAccepted):
        item = PendingInput(position, event.key, event.payload, event.correlation_key)
        return replace(work, pending=(*work.pending, item))
    if isinstance(event, AttemptClaimed):
        return _claimed(work, event, at)
    if isinstance(event, AttemptResumed):
        return _resumed(work, event, at)
    if isinstance(
        event, ControlRequested | ControlDispatched | ControlAcknowledged | ControlSettled
    ):
        return control(work, event, position)
    if isinstance(event, AttemptInterrupted):
        return interrupted(work, event, at)
    if isinstance(event, _Outcome):
        work = controls_after(work, event.attempt, event.consumed)
        ended = _ended(work, event, at)
        if isinstance(event, AttemptFailed | AttemptTimedOut):
            ended = replace(ended, retry=replace(ended.retry, failed_at=position))
        return ended
    if isinstance(event, BudgetHeld):
        hold = Hold("budget", event.reason, f"budget:{event.budget}", position)
        return replace(work, holds=(*work.holds, hold))
    if isinstance(event, GateHeld):
        hold = Hold("gate", event.reason, event.registration, position)
        return replace(work, holds=(*work.holds, hold))
    if isinstance(event, GateReleased):
        holds = tuple(
            h for h in work.holds if not (h.kind == "gate" and h.holder == event.registration)
        )
        return replace(work, holds=holds, gate_pass=True)
    if isinstance(event, GateRefused | WorkCancelled):
        current = work.current
        if current is not None:
            work = controls_after(work, current.number, [])
        return cancelled(work, at)
    if isinstance(event, WorkHeld):
        hold = Hold(event.kind, event.reason, event.holder, position)
        return replace(work, holds=(*work.holds, hold))
    if isinstance(event, HoldReleased):
        holds = tuple(h for h in work.holds if h.kind != event.kind)
        work = replace(work, holds=holds, budget_pass=work.budget_pass or event.kind == "budget")
        current = work.current
        if event.kind == "crash_loop" and current is not None:
            work = with_current(work, replace(current, relaunches=0))
        return work
    if isinstance(event, AttemptRecovered):
        # A dispatch in flight to the old epoch is void: the same intent goes out again.
        controls = tuple(
            replace(c, state="pending", token=None)
            if c.attempt == event.attempt and c.state == "dispatched"
            else c
            for c in work.controls
        )
        return recovered(replace(work, controls=controls), event, at)
    if isinstance(event, AttemptAdopted):
        attempt = work.current
        segment = attempt.open_segment if attempt is not None else None
        if attempt is None or segment is None:
            return work
        return with_current(
            work, replace(attempt, segments=swap_open(attempt, replace(segment, adopted=True)))
        )
    if isinstance(event, AttemptLost):
        return lost(controls_after(work, event.attempt, []), event, position, at)
    if isinstance(event, _RetryRequest):
        if event.boundary != work.retry.failed_at or position <= work.retry.failed_at:
            return work  # a request answers one failure; it never clears a later one
        retry = replace(work.retry, failures=0, blocked_reason=None, next_due=None)
        return replace(work, retry=retry)
    if isinstance(event, RetryArmed):
        retry = replace(work.retry, generation=event.generation, next_due=event.due_at)
        return replace(work, retry=retry)
    if isinstance(event, RetryFired):
        if event.generation != work.retry.generation:
            return work
        return replace(work, retry=replace(work.retry, next_due=None))
    attempt = work.current
    if attempt is None:
        return work
    if isinstance(event, LaunchInvoked):
        segment = attempt.open_segment
        if segment is None:
            return work
        segment = replace(segment, invoke="called", isolated=event.isolated)
        return with_current(
            work, replace(attempt, status="running", segments=swap_open(attempt, segment))
        )
    if isinstance(event, LaunchPhaseBegan):
        return _phase(work, attempt, Phase(event.phase, at))
    if isinstance(event, LaunchPhaseEnded):
        return _phase_end(work, attempt, event.phase, event.outcome, at)
    if isinstance(event, LeaseRenewed):
        return with_current(work, replace(attempt, lease_expires_at=event.lease_expires_at))
    if isinstance(event, LeaseReleased):
        return with_current(work, replace(attempt, released=True))
    if isinstance(event, RecoveryPersisted):
        return with_current(
            work, replace(attempt, recovery_metadata=event.metadata, recovery_epoch=event.epoch)
        )
    if isinstance(event, StopConfirmed):
        # Once stopped there is nothing left to interrupt: open intents are superseded.
        work = controls_after(work, attempt.number, [])
        return with_current(work, replace(attempt, stop_confirmed=True))
    return work


def _spend(work: WorkState, passes: list[str]) -> WorkState:
    if not passes:
        return work
    return replace(
        work,
        budget_pass=work.budget_pass and "budget" not in passes,
        gate_pass=work.gate_pass and "gate" not in passes,
    )


def _claimed(work: WorkState, event: AttemptClaimed, at: datetime) -> WorkState:
    work = _spend(work, event.passes)
    consumed, left = take(work.pending, event.consumed)
    trigger = next((p for p in consumed if p.position == event.trigger), None)
    attempt = AttemptState(
        work_id=work.work_id,
        number=event.attempt,
        epoch=event.epoch,
        owner=event.owner,
        lease_expires_at=event.lease_expires_at,
        deadline=event.deadline,
        pinned=event.pinned,
        consumed=consumed,
        trigger=trigger,
        claimed_at=at,
        segments=(Segment("start", event.epoch, at, owner=event.owner),),
    )
    return replace(work, pending=left, attempts=(*work.attempts, attempt))


def _resumed(work: WorkState, event: AttemptResumed, at: datetime) -> WorkState:
    attempt = work.current
    if attempt is None:
        return work
    work = _spend(work, event.passes)
    consumed, left = take(work.pending, event.consumed)
    resumed = replace(
        attempt,
        epoch=event.epoch,
        owner=event.owner,
        lease_expires_at=event.lease_expires_at,
        deadline=event.deadline,
        status="starting",
        released=False,
        remaining_seconds=None,
        consumed=(*attempt.consumed, *consumed),
    )
    resumed = append_segment(
        resumed,
        Segment("resume", event.epoch, at, wake=event.wake, owner=event.owner),
        attempt.pinned.max_segments,
    )
    return replace(work, pending=left, attempts=(*work.attempts[:-1], resumed))


def _ended(work: WorkState, event: _Outcome, at: datetime) -> WorkState:
    attempt = work.current
    if attempt is None:
        return work
    attempt = close_segment(attempt, at)
    usage = dict(attempt.usage)
    for unit, amount in event.usage.items():
        usage[unit] = usage.get(unit, 0.0) + amount
    attempt = replace(attempt, usage=usage, data=event.data)
    pending = work.pending
    if event.consumed:
        # Input an executor consumed during the attempt (injected input) is settled now.
        _, pending = take(pending, event.consumed)
    work = replace(work, pending=pending)
    if isinstance(event, AttemptParked):
        attempt = replace(attempt, status="parked", remaining_seconds=event.remaining_seconds)
        return with_current(work, attempt)
    attempt = replace(attempt, status="ended", ended_at=at, outcome=event.outcome_name)
    retry = work.retry
    terminal = work.terminal
    if isinstance(event, AttemptCompleted | AttemptHandedOff):
        attempt = replace(attempt, stop_confirmed=True)
        if work.kind == "run-once" and not work.pending:
            terminal = "completed"
        retry = replace(retry, failures=0, blocked_reason=None)
    elif isinstance(event, AttemptFailed):
        attempt = replace(
            attempt,
            stop_confirmed=True,
            error_code=event.error_code,
            error_message=event.error_message,
            permanent=event.permanent,
        )
        retry, terminal, work = _after_failure(work, attempt, event.permanent)
    elif isinstance(event, AttemptTimedOut):
        # A timeout is no proof the process stopped: the slot stays held until confirmed.
        attempt = replace(attempt, error_code="timed_out", error_message="execution timeout")
        retry, terminal, work = _after_failure(work, attempt, False)
    return replace(work, retry=retry, terminal=terminal, attempts=(*work.attempts[:-1], attempt))


def _after_failure(
    work: WorkState, attempt: AttemptState, permanent: bool
) -> tuple[RetryState, str | None, WorkState]:
    policy = attempt.pinned.binding.retry
    failures = work.retry.failures + 1
    blocked = work.retry.blocked_reason
    if work.kind == "standing":
        return replace(work.retry, failures=failures), work.terminal, work
    # Run-once: the failed attempt's input is presented again to the next attempt.
    requeued = tuple(sorted((*attempt.consumed, *work.pending), key=lambda p: p.position))
    work = replace(work, pending=requeued)
    if permanent:
        failures = max(failures, policy.max_attempts)
        blocked = "permanent_failure"
    elif failures >= policy.max_attempts:
        blocked = "exhausted"
    terminal = "failed" if blocked is not None and policy.terminal_on_exhaustion else None
    return replace(work.retry, failures=failures, blocked_reason=blocked), terminal, work


def _phase(work: WorkState, attempt: AttemptState, phase: Phase) -> WorkState:
    segment = attempt.open_segment
    if segment is None:
        return work
    segment = replace(segment, phases=(*segment.phases, phase))
    return with_current(work, replace(attempt, segments=swap_open(attempt, segment)))


def _phase_end(
    work: WorkState, attempt: AttemptState, name: str, outcome: str, at: datetime
) -> WorkState:
    segment = attempt.open_segment
    if segment is None:
        return work
    phases = list(segment.phases)
    for index in range(len(phases) - 1, -1, -1):
        if phases[index].name == name and phases[index].ended_at is None:
            phases[index] = replace(phases[index], ended_at=at, outcome=outcome)
            break
    segment = replace(segment, phases=tuple(phases))
    return with_current(work, replace(attempt, segments=swap_open(attempt, segment)))
