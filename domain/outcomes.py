"""Decisions of an attempt's outcome: its result, failure, turn, handoff continuation,
timeout and stop confirmation.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from rota.domain.emit import Emit, turn_stream, work_stream
from rota.domain.errors import DomainCode, InvalidCommand, LeaseLost, Refusal
from rota.domain.events import (
    AttemptCompleted,
    AttemptFailed,
    AttemptHandedOff,
    AttemptParked,
    AttemptTimedOut,
    HandoffContinued,
    HandoffRefused,
    InputAccepted,
    StopConfirmed,
    TurnPublished,
)
from rota.domain.events.execution import _Outcome
from rota.domain.failures import FailureCode
from rota.domain.fences import fence
from rota.domain.results import Result, check_payload, turn_of, validate_result
from rota.domain.retries import retry_timer
from rota.domain.state import AttemptState, WorkState

UNKNOWN_HINT_DELAY = timedelta(minutes=30)
HINT_MARGIN = timedelta(minutes=2)
MAX_HINT_AHEAD = timedelta(days=7)
# Continuations in a row (handoff = "continue") before one is refused: a Work that keeps
# handing itself its next input without outside input is stopped there, not run for ever.
MAX_CONTINUATIONS = 100


def finish(work: WorkState, attempt: int, epoch: int, now: datetime, result: Result) -> list[Emit]:
    """Store a structured result under the current fence, with its turn and retry timer."""
    current = fence(work, attempt, epoch, now)
    validate_result(result)
    common: dict[str, Any] = {
        "work_id": work.work_id,
        "attempt": attempt,
        "epoch": epoch,
        "data": result.data,
        "usage": dict(result.usage),
        "consumed": list(result.consumed),
        "artifacts": list(result.artifacts),
    }
    outcome: _Outcome
    if result.outcome == "completed":
        outcome = AttemptCompleted(**common)
    elif result.outcome == "handoff":
        outcome = AttemptHandedOff(**common)
    elif result.outcome == "waiting":
        remaining = _remaining_budget(current, now)
        outcome = AttemptParked(**common, remaining_seconds=remaining, wait=result.wait)
    else:
        return _failed(work, current, now, result, common)
    emits = [Emit(work_stream(work.work_id), outcome)]
    if isinstance(outcome, AttemptHandedOff) and current.pinned.binding.handoff == "continue":
        emits.extend(_continuation(work, current, result))
    return [*emits, *_turns(work, current, result.data)]


def _continuation(work: WorkState, attempt: AttemptState, result: Result) -> list[Emit]:
    """The derived continuation of a handoff (seed 001: off by default): the handoff
    event and the queue checkpoint in the outcome's append, or a causal refusal."""
    stream, delivery = work_stream(work.work_id), f"handoff/{attempt.execution_id}/{attempt.epoch}"
    work_id, number, epoch = work.work_id, attempt.number, attempt.epoch
    in_a_row = 1
    for earlier in reversed(work.attempts):
        trigger = earlier.trigger
        if trigger is None or not trigger.key.startswith("handoff:"):
            break
        in_a_row += 1
    reason, detail = "", ""
    if work.kind == "run-once":
        reason, detail = "run_once", "a run-once Work's handoff settles it as completed"
    elif in_a_row > MAX_CONTINUATIONS:
        reason = "continuation_limit"
        detail = f"{MAX_CONTINUATIONS} continuations in a row without outside input"
    else:
        try:
            check_payload(result.data, "handoff data")
        except InvalidCommand as refusal:
            reason, detail = "invalid_payload", refusal.message
    if reason:
        refused = HandoffRefused(
            work_id=work_id, attempt=number, epoch=epoch, reason=reason, detail=detail
        )
        return [Emit(stream, refused, delivery)]
    checkpoint = max((p.position for p in attempt.consumed), default=0)
    key = f"handoff:{attempt.number}:{attempt.epoch}"
    correlation = attempt.trigger.correlation_key if attempt.trigger is not None else None
    queued = InputAccepted(
        work_id=work.work_id, key=key, payload=result.data, correlation_key=correlation
    )
    continued = HandoffContinued(
        work_id=work_id, attempt=number, epoch=epoch, checkpoint=checkpoint, continuation=in_a_row
    )
    return [
        Emit(stream, continued, delivery),
        Emit(stream, queued, f"input/{work.work_id}/{key}"),
    ]


def _remaining_budget(attempt: AttemptState, now: datetime) -> float:
    return max(0.0, (attempt.deadline - now).total_seconds())


def _failed(
    work: WorkState,
    attempt: AttemptState,
    now: datetime,
    result: Result,
    common: dict[str, Any],
) -> list[Emit]:
    code: str = result.error_code or FailureCode.FAILED
    message = result.error_message or ""
    due: datetime | None = None
    hinted = result.retry_at is not None or result.retry_unknown
    if result.retry_at is not None:
        if result.retry_at <= now:
            code, message, hinted = (
                FailureCode.INVALID_RETRY_HINT,
                "retry hint reset time is not in the future",
                False,
            )
        elif result.retry_at - now > MAX_HINT_AHEAD:
            code, message, hinted = (
                FailureCode.INVALID_RETRY_HINT,
                "retry hint is more than 7 days ahead",
                False,
            )
        else:
            due = result.retry_at + HINT_MARGIN
    elif result.retry_unknown:
        due = now + UNKNOWN_HINT_DELAY
    failed = AttemptFailed(
        **common,
        error_code=code,
        error_message=message,
        permanent=result.permanent,
        retry_at=result.retry_at if hinted else None,
        retry_unknown=result.retry_unknown and hinted,
        holds_resources=result.holds_resources,
    )
    emits = [Emit(work_stream(work.work_id), failed)]
    emits.extend(retry_timer(work, attempt, now, permanent=result.permanent, hinted_due=due))
    emits.extend(_turns(work, attempt, result.data))
    return emits


def _turns(work: WorkState, attempt: AttemptState, data: Any) -> list[Emit]:
    turn = turn_of(data)
    if turn is None:
        return []
    key = attempt.trigger.correlation_key if attempt.trigger is not None else None
    delivery = f"turn/{attempt.execution_id}/{attempt.epoch}" + (f"/{key}" if key else "")
    event = TurnPublished(
        work=work.work_id,
        execution=attempt.execution_id,
        epoch=attempt.epoch,
        status=turn.status,
        comment=turn.comment,
        key=key,
    )
    return [Emit(turn_stream(work.work_id), event, delivery)]


def time_out(work: WorkState, attempt: int, epoch: int, now: datetime) -> list[Emit]:
    """Time an attempt out: its persisted deadline is due and its lease is current."""
    current = fence(work, attempt, epoch, now)
    if now < current.deadline:
        raise Refusal(
            f"{current.execution_id}: the deadline {current.deadline.isoformat()} is not due",
            code=DomainCode.NOT_DUE,
        )
    event = AttemptTimedOut(work_id=work.work_id, attempt=attempt, epoch=epoch)
    emits = [Emit(work_stream(work.work_id), event)]
    emits.extend(retry_timer(work, current, now, permanent=False, hinted_due=None))
    return emits


def confirm_stopped(
    work: WorkState, attempt: int, expected_epoch: int, evidence: str = "verified"
) -> list[Emit]:
    """The trusted host verified the ended attempt's processes stopped (`evidence`:
    `verified` by an executor's stop, or `operator: WHO` when a person vouches for it)."""
    current = work.current
    if current is None or current.number != attempt:
        raise Refusal(
            f"{work.work_id}/{attempt} is not the current attempt", code=DomainCode.NOT_CURRENT
        )
    if current.epoch != expected_epoch:
        raise LeaseLost(
            f"{current.execution_id} was adopted at epoch {current.epoch}, not {expected_epoch}"
        )
    if current.status != "ended":
        raise Refusal(f"{current.execution_id} has not ended", code=DomainCode.NOT_ENDED)
    if current.stop_confirmed:
        return []
    event = StopConfirmed(
        work_id=work.work_id, attempt=attempt, epoch=expected_epoch, evidence=evidence
    )
    return [Emit(work_stream(work.work_id), event)]
