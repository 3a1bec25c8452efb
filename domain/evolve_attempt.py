"""Fold rules of an attempt's own events: its claim or resume, its launch's fenced writes
and its outcome (each takes the Work with its version already bumped, or, for the most
frequent ones, bumps it by `bump` in the one copy of the Work it makes).
"""

from __future__ import annotations

from datetime import datetime

from msgspec.structs import replace

from rota.domain.events import (
    AttemptClaimed,
    AttemptCompleted,
    AttemptFailed,
    AttemptHandedOff,
    AttemptParked,
    AttemptResumed,
    AttemptTimedOut,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    RecoveryPersisted,
    StopConfirmed,
    WaitJudged,
)
from rota.domain.events.execution import _Outcome
from rota.domain.evolve_recovery import controls_after
from rota.domain.failures import FailureCode
from rota.domain.segments import append_segment, swap_open, take, with_current
from rota.domain.state import AttemptState, Phase, RetryState, Segment, WorkState


def on_outcome(
    work: WorkState, event: _Outcome, position: int, at: datetime, *, bump: int = 0
) -> WorkState:
    """`bump`: what to add to the Work's version in the same copy (`evolve`'s fast rules)."""
    work = controls_after(work, event.attempt, event.consumed)
    ended = _ended(work, event, at, bump)
    if isinstance(event, AttemptFailed | AttemptTimedOut):
        ended = replace(ended, retry=replace(ended.retry, failed_at=position))
    return ended


def on_invoked(
    work: WorkState,
    attempt: AttemptState,
    event: LaunchInvoked,
    position: int,
    at: datetime,
    *,
    bump: int = 0,
) -> WorkState:
    segment = attempt.open_segment
    if segment is None:
        return replace(work, version=work.version + bump) if bump else work
    segment = replace(segment, invoke="called", isolated=event.isolated)
    attempt = replace(attempt, status="running", segments=swap_open(attempt, segment))
    return replace(work, version=work.version + bump, attempts=(*work.attempts[:-1], attempt))


def on_phase_began(
    work: WorkState, attempt: AttemptState, event: LaunchPhaseBegan, position: int, at: datetime
) -> WorkState:
    return _phase(work, attempt, Phase(event.phase, at))


def on_phase_ended(
    work: WorkState, attempt: AttemptState, event: LaunchPhaseEnded, position: int, at: datetime
) -> WorkState:
    return _phase_end(work, attempt, event.phase, event.outcome, at)


def on_released(
    work: WorkState, attempt: AttemptState, event: LeaseReleased, position: int, at: datetime
) -> WorkState:
    return with_current(work, replace(attempt, released=True))


def on_recovery_persisted(
    work: WorkState, attempt: AttemptState, event: RecoveryPersisted, position: int, at: datetime
) -> WorkState:
    return with_current(
        work, replace(attempt, recovery_metadata=event.metadata, recovery_epoch=event.epoch)
    )


def on_stop_confirmed(
    work: WorkState, attempt: AttemptState, event: StopConfirmed, position: int, at: datetime
) -> WorkState:
    # Once stopped there is nothing left to interrupt: open intents are superseded.
    work = controls_after(work, attempt.number, [])
    return with_current(work, replace(attempt, stop_confirmed=True))


def _spend(work: WorkState, passes: list[str]) -> WorkState:
    if not passes:
        return work
    return replace(
        work,
        budget_pass=work.budget_pass and "budget" not in passes,
        gate_pass=work.gate_pass and "gate" not in passes,
    )


def on_claimed(work: WorkState, event: AttemptClaimed, at: datetime, *, bump: int = 0) -> WorkState:
    work = _spend(work, event.passes)
    consumed, left = take(work.pending, event.consumed)
    trigger = next((p for p in consumed if p.position == event.trigger), None)
    invoked = event.invoked
    if invoked is None:
        segment = Segment("start", event.epoch, at, owner=event.owner)
    else:  # its invoke marker, as a `core.execution.invoked` right after it gives it
        segment = Segment(
            "start", event.epoch, at, invoke="called", isolated=invoked.isolated, owner=event.owner
        )
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
        status="starting" if invoked is None else "running",
        segments=(segment,),
        grants=tuple(event.grants),
    )
    return replace(
        work, version=work.version + bump, pending=left, attempts=(*work.attempts, attempt)
    )


def on_resumed(work: WorkState, event: AttemptResumed, at: datetime) -> WorkState:
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
        wait=None,
        wait_matched=(),
        wait_refused=(),
    )
    resumed = append_segment(
        resumed,
        Segment("resume", event.epoch, at, wake=event.wake, owner=event.owner),
        attempt.pinned.max_segments,
    )
    return replace(work, pending=left, attempts=(*work.attempts[:-1], resumed))


def _ended(work: WorkState, event: _Outcome, at: datetime, bump: int = 0) -> WorkState:
    attempt = work.current
    if attempt is None:
        return replace(work, version=work.version + bump) if bump else work
    # The attempt's ending in one copy of it (an outcome is an event of every attempt:
    # each `replace` copies every field of the attempt or the Work).
    segment = attempt.open_segment
    segments = (
        attempt.segments if segment is None else swap_open(attempt, replace(segment, ended_at=at))
    )
    usage = dict(attempt.usage)
    for unit, amount in event.usage.items():
        usage[unit] = usage.get(unit, 0.0) + amount
    pending = work.pending
    if event.consumed:
        # Input an executor consumed during the attempt (injected input) is settled now.
        _, pending = take(pending, event.consumed)
    if event.artifacts:  # every segment's references, oldest first
        attempt = replace(attempt, artifacts=(*attempt.artifacts, *event.artifacts))
    if isinstance(event, AttemptParked):
        attempt = replace(
            attempt,
            segments=segments,
            usage=usage,
            data=event.data,
            status="parked",
            remaining_seconds=event.remaining_seconds,
            wait=event.wait,
            wait_matched=(),
            wait_refused=(),
        )
        return replace(
            work,
            version=work.version + bump,
            pending=pending,
            attempts=(*work.attempts[:-1], attempt),
        )
    ended = {
        "segments": segments,
        "usage": usage,
        "data": event.data,
        "status": "ended",
        "ended_at": at,
        "outcome": event.outcome_name,
    }
    retry = work.retry
    terminal = work.terminal
    if isinstance(event, AttemptCompleted | AttemptHandedOff):
        attempt = replace(attempt, **ended, stop_confirmed=True)
        if work.kind == "run-once" and not pending:
            terminal = "completed"
        # Always a new value, even when equal: a row leaves out a field only while it is
        # still the default object itself (`omit_defaults`), and replay must give the same rows.
        retry = replace(retry, failures=0, blocked_reason=None)
    elif isinstance(event, AttemptFailed):
        attempt = replace(
            attempt,
            **ended,
            stop_confirmed=not event.holds_resources,
            error_code=event.error_code,
            error_message=event.error_message,
            permanent=event.permanent,
        )
        retry, terminal, work = _after_failure(
            replace(work, pending=pending), attempt, event.permanent
        )
        pending = work.pending
    elif isinstance(event, AttemptTimedOut):
        # A timeout is no proof the process stopped: the slot stays held until confirmed.
        attempt = replace(
            attempt, **ended, error_code=FailureCode.TIMED_OUT, error_message="execution timeout"
        )
        retry, terminal, work = _after_failure(replace(work, pending=pending), attempt, False)
        pending = work.pending
    else:
        attempt = replace(attempt, **ended)
    return replace(
        work,
        version=work.version + bump,
        pending=pending,
        retry=retry,
        terminal=terminal,
        attempts=(*work.attempts[:-1], attempt),
    )


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


def on_wait_judged(
    work: WorkState, attempt: AttemptState, event: WaitJudged, position: int, at: datetime
) -> WorkState:
    """A named wait predicate's recorded verdict on the input under `key` (a verdict for
    another park, or a repeat, changes nothing)."""
    parked = attempt.status == "parked" and attempt.number == event.attempt
    if not parked or event.epoch != attempt.epoch:
        return work
    if event.key in attempt.wait_matched or event.key in attempt.wait_refused:
        return work
    if event.matched:
        judged = replace(attempt, wait_matched=(*attempt.wait_matched, event.key))
    else:
        judged = replace(attempt, wait_refused=(*attempt.wait_refused, event.key))
    return with_current(work, judged)
