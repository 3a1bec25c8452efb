"""Folds of recovery, control and cancellation events (see `rota.domain.evolve`)."""

from __future__ import annotations

from datetime import datetime

from msgspec.structs import replace

from rota.domain.events.control import (
    AttemptInterrupted,
    ControlAcknowledged,
    ControlDispatched,
    ControlRequested,
    ControlSettled,
)
from rota.domain.events.recovery import AttemptLost, AttemptRecovered
from rota.domain.failures import FailureCode
from rota.domain.segments import append_segment, close_segment, with_current
from rota.domain.state import Control, Segment, WorkState


def cancelled(work: WorkState, at: datetime) -> WorkState:
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
            close_segment(current, at),
            status="ended",
            outcome="cancelled",
            ended_at=at,
            stop_confirmed=was_parked,
        )
        work = with_current(work, ended)
    return work


def recovered(work: WorkState, event: AttemptRecovered, at: datetime) -> WorkState:
    attempt = work.current
    if attempt is None:
        return work
    attempt = close_segment(attempt, at)
    relaunch = event.mode == "relaunch"
    segment = Segment(
        "relaunched" if relaunch else "recovered",
        event.epoch,
        at,
        invoke="pending" if relaunch else None,
        owner=event.owner,
    )
    attempt = replace(
        attempt,
        epoch=event.epoch,
        owner=event.owner,
        lease_expires_at=event.lease_expires_at,
        released=False,
        status="starting" if relaunch else "running",
        relaunches=attempt.relaunches + (1 if relaunch else 0),
        deadline=event.deadline or attempt.deadline,
    )
    return with_current(work, append_segment(attempt, segment, attempt.pinned.max_segments))


def lost(work: WorkState, event: AttemptLost, position: int, at: datetime) -> WorkState:
    attempt = work.current
    if attempt is None:
        return work
    attempt = replace(
        close_segment(attempt, at),
        status="ended",
        outcome="lost",
        ended_at=at,
        stop_confirmed=True,
        error_code=FailureCode.LOST,
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


def control(
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


def controls_after(work: WorkState, attempt: int, consumed: list[int]) -> WorkState:
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


def interrupted(work: WorkState, event: AttemptInterrupted, at: datetime) -> WorkState:
    """The attempt is fenced and the Work ready again; the slot stays until the stop is
    verified. Its input is presented to the next attempt; no failure is counted."""
    attempt = work.current
    if attempt is None or attempt.number != event.attempt:
        return work
    ended = replace(
        close_segment(attempt, at),
        status="ended",
        outcome="interrupted",
        ended_at=at,
        stop_confirmed=False,
    )
    requeued = tuple(sorted((*attempt.consumed, *work.pending), key=lambda p: p.position))
    return replace(work, pending=requeued, attempts=(*work.attempts[:-1], ended))
