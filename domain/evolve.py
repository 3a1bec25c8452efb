"""The fold: `evolve(work, event, position, at) -> WorkState`.

Pure and deterministic: time comes only from the event (`at` is its recorded time), so a
replay of the log rebuilds exactly the state the live scheduler held. Events that do not
concern a Work's state (capacity fences, turns) leave it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from msgspec.structs import replace

from rota.domain.events import (
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
from rota.domain.events.admission import (
    BudgetHeld,
    GateHeld,
    GateRefused,
    GateReleased,
    WorkCancelled,
)
from rota.domain.events.control import (
    AttemptInterrupted,
    ControlAcknowledged,
    ControlDispatched,
    ControlRequested,
    ControlSettled,
)
from rota.domain.events.execution import _Outcome
from rota.domain.events.recovery import (
    AttemptAdopted,
    AttemptLost,
    AttemptRecovered,
    HoldReleased,
    WorkHeld,
)
from rota.domain.events.retry import _RetryRequest
from rota.domain.evolve_recovery import (
    cancelled,
    control,
    controls_after,
    interrupted,
    lost,
    recovered,
)
from rota.domain.segments import append_segment, close_segment, swap_open, take, with_current
from rota.domain.state import (
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
    kind = type(event)
    if isinstance(event, LeaseRenewed):
        # The most frequent event of a long log (every live attempt renews its lease), so
        # it skips the rule table.
        return renew(work, event.lease_expires_at)
    work = replace(work, version=work.version + 1)
    rule = _RESOLVED.get(kind)
    if rule is None:
        rule = _resolve(kind)
    return rule(work, event, position, at)


def renew(work: WorkState, lease_expires_at: datetime, count: int = 1) -> WorkState:
    """`count` lease renewals in a row (the last one's expiry): the current attempt's lease
    moves, the Work's version counts each event. One copy of the Work, whatever `count`:
    a bulk fold folds a run of renewals with it (`SchedulerProjection.fold_page`)."""
    attempts = work.attempts
    if not attempts:
        return replace(work, version=work.version + count)
    renewed = replace(attempts[-1], lease_expires_at=lease_expires_at)
    return replace(work, version=work.version + count, attempts=(*attempts[:-1], renewed))


# -- the rules, one per kind of event ---------------------------------------------------
#
# Each rule takes the Work with its version already bumped. `_RULES` is ordered: an event
# takes the first rule whose types it is an instance of (as an isinstance chain would),
# resolved once per concrete event type and cached in `_RESOLVED`, so the fold of a long
# log pays one dict lookup per event, not a walk down the chain.

Rule = Callable[[WorkState, Any, int, datetime], WorkState]
CurrentRule = Callable[[WorkState, AttemptState, Any, int, datetime], WorkState]


def _on_current(rule: CurrentRule) -> Rule:
    """A rule for an event about the current attempt: a Work without one is unchanged."""

    def apply(work: WorkState, event: Any, position: int, at: datetime) -> WorkState:
        attempt = work.current
        if attempt is None:
            return work
        return rule(work, attempt, event, position, at)

    return apply


def _input(work: WorkState, event: InputAccepted, position: int, at: datetime) -> WorkState:
    item = PendingInput(position, event.key, event.payload, event.correlation_key)
    return replace(work, pending=(*work.pending, item))


def _outcome(work: WorkState, event: _Outcome, position: int, at: datetime) -> WorkState:
    work = controls_after(work, event.attempt, event.consumed)
    ended = _ended(work, event, at)
    if isinstance(event, AttemptFailed | AttemptTimedOut):
        ended = replace(ended, retry=replace(ended.retry, failed_at=position))
    return ended


def _held(work: WorkState, hold: Hold) -> WorkState:
    return replace(work, holds=(*work.holds, hold))


def _budget_held(work: WorkState, event: BudgetHeld, position: int, at: datetime) -> WorkState:
    return _held(work, Hold("budget", event.reason, f"budget:{event.budget}", position))


def _gate_held(work: WorkState, event: GateHeld, position: int, at: datetime) -> WorkState:
    return _held(work, Hold("gate", event.reason, event.registration, position))


def _work_held(work: WorkState, event: WorkHeld, position: int, at: datetime) -> WorkState:
    return _held(work, Hold(event.kind, event.reason, event.holder, position))


def _gate_released(work: WorkState, event: GateReleased, position: int, at: datetime) -> WorkState:
    holds = tuple(
        h for h in work.holds if not (h.kind == "gate" and h.holder == event.registration)
    )
    return replace(work, holds=holds, gate_pass=True)


def _cancelled(
    work: WorkState, event: GateRefused | WorkCancelled, position: int, at: datetime
) -> WorkState:
    current = work.current
    if current is not None:
        work = controls_after(work, current.number, [])
    return cancelled(work, at)


def _hold_released(work: WorkState, event: HoldReleased, position: int, at: datetime) -> WorkState:
    holds = tuple(h for h in work.holds if h.kind != event.kind)
    work = replace(work, holds=holds, budget_pass=work.budget_pass or event.kind == "budget")
    current = work.current
    if event.kind == "crash_loop" and current is not None:
        work = with_current(work, replace(current, relaunches=0))
    return work


def _recovered(work: WorkState, event: AttemptRecovered, position: int, at: datetime) -> WorkState:
    # A dispatch in flight to the old epoch is void: the same intent goes out again.
    controls = tuple(
        replace(c, state="pending", token=None)
        if c.attempt == event.attempt and c.state == "dispatched"
        else c
        for c in work.controls
    )
    return recovered(replace(work, controls=controls), event, at)


def _adopted(work: WorkState, event: AttemptAdopted, position: int, at: datetime) -> WorkState:
    attempt = work.current
    segment = attempt.open_segment if attempt is not None else None
    if attempt is None or segment is None:
        return work
    return with_current(
        work, replace(attempt, segments=swap_open(attempt, replace(segment, adopted=True)))
    )


def _lost(work: WorkState, event: AttemptLost, position: int, at: datetime) -> WorkState:
    return lost(controls_after(work, event.attempt, []), event, position, at)


def _retry_request(work: WorkState, event: _RetryRequest, position: int, at: datetime) -> WorkState:
    if event.boundary != work.retry.failed_at or position <= work.retry.failed_at:
        return work  # a request answers one failure; it never clears a later one
    retry = replace(work.retry, failures=0, blocked_reason=None, next_due=None)
    return replace(work, retry=retry)


def _retry_armed(work: WorkState, event: RetryArmed, position: int, at: datetime) -> WorkState:
    retry = replace(work.retry, generation=event.generation, next_due=event.due_at)
    return replace(work, retry=retry)


def _retry_fired(work: WorkState, event: RetryFired, position: int, at: datetime) -> WorkState:
    if event.generation != work.retry.generation:
        return work
    return replace(work, retry=replace(work.retry, next_due=None))


def _invoked(
    work: WorkState, attempt: AttemptState, event: LaunchInvoked, position: int, at: datetime
) -> WorkState:
    segment = attempt.open_segment
    if segment is None:
        return work
    segment = replace(segment, invoke="called", isolated=event.isolated)
    return with_current(
        work, replace(attempt, status="running", segments=swap_open(attempt, segment))
    )


def _phase_began(
    work: WorkState, attempt: AttemptState, event: LaunchPhaseBegan, position: int, at: datetime
) -> WorkState:
    return _phase(work, attempt, Phase(event.phase, at))


def _phase_ended(
    work: WorkState, attempt: AttemptState, event: LaunchPhaseEnded, position: int, at: datetime
) -> WorkState:
    return _phase_end(work, attempt, event.phase, event.outcome, at)


def _released(
    work: WorkState, attempt: AttemptState, event: LeaseReleased, position: int, at: datetime
) -> WorkState:
    return with_current(work, replace(attempt, released=True))


def _recovery_persisted(
    work: WorkState, attempt: AttemptState, event: RecoveryPersisted, position: int, at: datetime
) -> WorkState:
    return with_current(
        work, replace(attempt, recovery_metadata=event.metadata, recovery_epoch=event.epoch)
    )


def _stop_confirmed(
    work: WorkState, attempt: AttemptState, event: StopConfirmed, position: int, at: datetime
) -> WorkState:
    # Once stopped there is nothing left to interrupt: open intents are superseded.
    work = controls_after(work, attempt.number, [])
    return with_current(work, replace(attempt, stop_confirmed=True))


def _unchanged(work: WorkState, event: Event, position: int, at: datetime) -> WorkState:
    return work


_RULES: tuple[tuple[type | tuple[type, ...], Rule], ...] = (
    (InputAccepted, _input),
    (AttemptClaimed, lambda work, event, position, at: _claimed(work, event, at)),
    (AttemptResumed, lambda work, event, position, at: _resumed(work, event, at)),
    (
        (ControlRequested, ControlDispatched, ControlAcknowledged, ControlSettled),
        lambda work, event, position, at: control(work, event, position),
    ),
    (AttemptInterrupted, lambda work, event, position, at: interrupted(work, event, at)),
    (_Outcome, _outcome),
    (BudgetHeld, _budget_held),
    (GateHeld, _gate_held),
    (GateReleased, _gate_released),
    ((GateRefused, WorkCancelled), _cancelled),
    (WorkHeld, _work_held),
    (HoldReleased, _hold_released),
    (AttemptRecovered, _recovered),
    (AttemptAdopted, _adopted),
    (AttemptLost, _lost),
    (_RetryRequest, _retry_request),
    (RetryArmed, _retry_armed),
    (RetryFired, _retry_fired),
    (LaunchInvoked, _on_current(_invoked)),
    (LaunchPhaseBegan, _on_current(_phase_began)),
    (LaunchPhaseEnded, _on_current(_phase_ended)),
    # LeaseRenewed: `evolve` applies it before the table (`renew`).
    (LeaseReleased, _on_current(_released)),
    (RecoveryPersisted, _on_current(_recovery_persisted)),
    (StopConfirmed, _on_current(_stop_confirmed)),
)
_RESOLVED: dict[type, Rule] = {}


def _resolve(kind: type) -> Rule:
    """The first rule of `_RULES` for events of type `kind` (cached)."""
    rule = next((rule for types, rule in _RULES if issubclass(kind, types)), _unchanged)
    _RESOLVED[kind] = rule
    return rule


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
            stop_confirmed=not event.holds_resources,
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
