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
from .state import (
    AttemptState,
    Control,
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
        return _control(work, event, position)
    if isinstance(event, AttemptInterrupted):
        return _interrupted(work, event, at)
    if isinstance(event, _Outcome):
        work = _controls_after(work, event.attempt, event.consumed)
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
            work = _controls_after(work, current.number, [])
        return _cancelled(work, at)
    if isinstance(event, WorkHeld):
        hold = Hold(event.kind, event.reason, event.holder, position)
        return replace(work, holds=(*work.holds, hold))
    if isinstance(event, HoldReleased):
        holds = tuple(h for h in work.holds if h.kind != event.kind)
        work = replace(work, holds=holds, budget_pass=work.budget_pass or event.kind == "budget")
        current = work.current
        if event.kind == "crash_loop" and current is not None:
            work = _with(work, replace(current, relaunches=0))
        return work
    if isinstance(event, AttemptRecovered):
        # A dispatch in flight to the old epoch is void: the same intent goes out again.
        controls = tuple(
            replace(c, state="pending", token=None)
            if c.attempt == event.attempt and c.state == "dispatched"
            else c
            for c in work.controls
        )
        return _recovered(replace(work, controls=controls), event, at)
    if isinstance(event, AttemptAdopted):
        attempt = work.current
        segment = attempt.open_segment if attempt is not None else None
        if attempt is None or segment is None:
            return work
        return _with(
            work, replace(attempt, segments=_swap_open(attempt, replace(segment, adopted=True)))
        )
    if isinstance(event, AttemptLost):
        return _lost(_controls_after(work, event.attempt, []), event, position, at)
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
        return _with(
            work, replace(attempt, status="running", segments=_swap_open(attempt, segment))
        )
    if isinstance(event, LaunchPhaseBegan):
        return _phase(work, attempt, Phase(event.phase, at))
    if isinstance(event, LaunchPhaseEnded):
        return _phase_end(work, attempt, event.phase, event.outcome, at)
    if isinstance(event, LeaseRenewed):
        return _with(work, replace(attempt, lease_expires_at=event.lease_expires_at))
    if isinstance(event, LeaseReleased):
        return _with(work, replace(attempt, released=True))
    if isinstance(event, RecoveryPersisted):
        return _with(
            work, replace(attempt, recovery_metadata=event.metadata, recovery_epoch=event.epoch)
        )
    if isinstance(event, StopConfirmed):
        return _with(work, replace(attempt, stop_confirmed=True))
    return work


def _with(work: WorkState, attempt: AttemptState) -> WorkState:
    return replace(work, attempts=(*work.attempts[:-1], attempt))


def _swap_open(attempt: AttemptState, segment: Segment) -> tuple[Segment, ...]:
    return (*attempt.segments[:-1], segment)


def _take(
    pending: tuple[PendingInput, ...], positions: list[int]
) -> tuple[tuple[PendingInput, ...], tuple[PendingInput, ...]]:
    wanted = set(positions)
    taken = tuple(p for p in pending if p.position in wanted)
    left = tuple(p for p in pending if p.position not in wanted)
    return taken, left


def _append_segment(attempt: AttemptState, segment: Segment, limit: int) -> AttemptState:
    segments = (*attempt.segments, segment)
    dropped, dropped_seconds = attempt.dropped_segments, attempt.dropped_active_seconds
    while len(segments) > limit:
        dropped += 1
        dropped_seconds += segments[0].active_seconds()
        segments = segments[1:]
    return replace(
        attempt, segments=segments, dropped_segments=dropped, dropped_active_seconds=dropped_seconds
    )


def _spend(work: WorkState, passes: list[str]) -> WorkState:
    if not passes:
        return work
    return replace(
        work,
        budget_pass=work.budget_pass and "budget" not in passes,
        gate_pass=work.gate_pass and "gate" not in passes,
    )


def _cancelled(work: WorkState, at: datetime) -> WorkState:
    """Cancellation fences the attempt, waits, timers and queue eligibility at once.

    A live attempt ends `cancelled` but keeps its resource hold until its stop is
    confirmed; physical cleanup follows the commit.
    """
    retry = replace(work.retry, next_due=None)
    work = replace(work, terminal="cancelled", retry=retry, pending=(), holds=())
    current = work.current
    if current is not None and current.status in ("starting", "running", "parked"):
        was_parked = current.status == "parked"
        ended = replace(
            _close_segment(current, at),
            status="ended",
            outcome="cancelled",
            ended_at=at,
            stop_confirmed=was_parked,
        )
        work = _with(work, ended)
    return work


def _claimed(work: WorkState, event: AttemptClaimed, at: datetime) -> WorkState:
    work = _spend(work, event.passes)
    consumed, left = _take(work.pending, event.consumed)
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
        segments=(Segment("start", event.epoch, at),),
    )
    return replace(work, pending=left, attempts=(*work.attempts, attempt))


def _resumed(work: WorkState, event: AttemptResumed, at: datetime) -> WorkState:
    attempt = work.current
    if attempt is None:
        return work
    work = _spend(work, event.passes)
    consumed, left = _take(work.pending, event.consumed)
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
    resumed = _append_segment(
        resumed,
        Segment("resume", event.epoch, at, wake=event.wake),
        attempt.pinned.max_segments,
    )
    return replace(work, pending=left, attempts=(*work.attempts[:-1], resumed))


def _close_segment(attempt: AttemptState, at: datetime) -> AttemptState:
    segment = attempt.open_segment
    if segment is None:
        return attempt
    return replace(attempt, segments=_swap_open(attempt, replace(segment, ended_at=at)))


def _ended(work: WorkState, event: _Outcome, at: datetime) -> WorkState:
    attempt = work.current
    if attempt is None:
        return work
    attempt = _close_segment(attempt, at)
    usage = dict(attempt.usage)
    for unit, amount in event.usage.items():
        usage[unit] = usage.get(unit, 0.0) + amount
    attempt = replace(attempt, usage=usage, data=event.data)
    pending = work.pending
    if event.consumed:
        # Input an executor consumed during the attempt (injected input) is settled now.
        _, pending = _take(pending, event.consumed)
    work = replace(work, pending=pending)
    if isinstance(event, AttemptParked):
        attempt = replace(attempt, status="parked", remaining_seconds=event.remaining_seconds)
        return _with(work, attempt)
    attempt = replace(attempt, status="ended", ended_at=at, outcome=_outcome_name(event))
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


def _outcome_name(event: _Outcome) -> str:
    if isinstance(event, AttemptCompleted):
        return "completed"
    if isinstance(event, AttemptFailed):
        return "failed"
    if isinstance(event, AttemptHandedOff):
        return "handoff"
    if isinstance(event, AttemptTimedOut):
        return "timed_out"
    return "waiting"


def _phase(work: WorkState, attempt: AttemptState, phase: Phase) -> WorkState:
    segment = attempt.open_segment
    if segment is None:
        return work
    segment = replace(segment, phases=(*segment.phases, phase))
    return _with(work, replace(attempt, segments=_swap_open(attempt, segment)))


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
    return _with(work, replace(attempt, segments=_swap_open(attempt, segment)))


def _recovered(work: WorkState, event: AttemptRecovered, at: datetime) -> WorkState:
    attempt = work.current
    if attempt is None:
        return work
    attempt = _close_segment(attempt, at)
    relaunch = event.mode == "relaunch"
    segment = Segment(
        "relaunched" if relaunch else "recovered",
        event.epoch,
        at,
        invoke="pending" if relaunch else None,
    )
    attempt = replace(
        attempt,
        epoch=event.epoch,
        owner=event.owner,
        lease_expires_at=event.lease_expires_at,
        released=False,
        status="starting" if relaunch else "running",
        relaunches=attempt.relaunches + (1 if relaunch else 0),
    )
    return _with(work, _append_segment(attempt, segment, attempt.pinned.max_segments))


def _lost(work: WorkState, event: AttemptLost, position: int, at: datetime) -> WorkState:
    attempt = work.current
    if attempt is None:
        return work
    attempt = replace(
        _close_segment(attempt, at),
        status="ended",
        outcome="lost",
        ended_at=at,
        stop_confirmed=True,
        error_code="lost",
        error_message=f"lease lost; {event.evidence}",
    )
    work = replace(work, attempts=(*work.attempts[:-1], attempt))
    policy = attempt.pinned.binding.retry
    failures = work.retry.failures + 1
    retryable = (
        work.safety in ("idempotent", "deduplicated")
        and policy.retry_on_lost
        and failures < policy.max_attempts
    )
    retry = replace(work.retry, failures=failures, failed_at=position)
    if retryable or work.kind == "run-once":
        requeued = tuple(sorted((*attempt.consumed, *work.pending), key=lambda p: p.position))
        work = replace(work, pending=requeued)
    if not retryable and work.kind == "run-once":
        retry = replace(retry, blocked_reason="lost")
    terminal = "failed" if retry.blocked_reason and policy.terminal_on_exhaustion else None
    return replace(work, retry=retry, terminal=terminal or work.terminal)


def _control(
    work: WorkState,
    event: ControlRequested | ControlDispatched | ControlAcknowledged | ControlSettled,
    position: int,
) -> WorkState:
    if isinstance(event, ControlRequested):
        found = next((p for p in work.pending if p.key == event.input_key), None)
        control = Control(
            event.intent,
            event.kind,
            "pending",
            event.attempt,
            event.epoch,
            position,
            input_key=event.input_key,
            input_position=found.position if found is not None else None,
            fallback=event.fallback,
        )
        return replace(work, controls=(*work.controls, control))
    controls = list(work.controls)
    for index, control in enumerate(controls):
        if control.intent != event.intent:
            continue
        if isinstance(event, ControlDispatched):
            controls[index] = replace(
                control, state="dispatched", token=event.token, dispatches=control.dispatches + 1
            )
        elif event.token != control.token or control.state != "dispatched":
            return work  # a late answer to an older token changes nothing
        elif isinstance(event, ControlAcknowledged):
            accepted = "accepted" if control.kind == "inject" else "delivered"
            controls[index] = replace(control, state=accepted)
        else:
            state = {
                "not_accepting": "not_accepting",
                "ambiguous": "pending",
                "superseded": "superseded",
                "failed": "dropped" if control.fallback == "drop" else "queued",
            }[event.outcome]
            controls[index] = replace(
                control, state=state, token=None if state == "pending" else control.token
            )
            if state == "dropped" and control.input_position is not None:
                pending = tuple(p for p in work.pending if p.position != control.input_position)
                work = replace(work, pending=pending)
        break
    return replace(work, controls=tuple(controls))


def _controls_after(work: WorkState, attempt: int, consumed: list[int]) -> WorkState:
    """An attempt ended: its consumed injected input settles `consumed`, and intents still
    waiting for it are superseded (their input stays pending for the next attempt)."""
    if not work.controls:
        return work
    taken = set(consumed)
    controls = []
    for control in work.controls:
        state = control.state
        if control.input_position is not None and control.input_position in taken:
            state = "consumed"
        elif control.attempt == attempt and state in ("pending", "dispatched"):
            state = "superseded"
        controls.append(control if state == control.state else replace(control, state=state))
    return replace(work, controls=tuple(controls))


def _interrupted(work: WorkState, event: AttemptInterrupted, at: datetime) -> WorkState:
    """The attempt is fenced and the Work ready again; the slot stays until the stop is
    verified. Its input is presented to the next attempt; no failure is counted."""
    attempt = work.current
    if attempt is None or attempt.number != event.attempt:
        return work
    ended = replace(
        _close_segment(attempt, at),
        status="ended",
        outcome="interrupted",
        ended_at=at,
        stop_confirmed=False,
    )
    requeued = tuple(sorted((*attempt.consumed, *work.pending), key=lambda p: p.position))
    return replace(work, pending=requeued, attempts=(*work.attempts[:-1], ended))
