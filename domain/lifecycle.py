"""Decisions of the attempt lifecycle: `decide(state, command, now) -> events`.

Each function reads a `WorkState`, a command's arguments and `now`, and returns the events
to append (as `Emit`s) or raises a typed refusal. None of them reads a clock or does I/O.
Every write on behalf of an attempt goes through `fence()`: the attempt must be the
current one, at the named epoch, live, not released, and its lease unexpired at `now`.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rota.domain.emit import Emit, turn_stream, work_stream
from rota.domain.errors import DomainCode, InvalidCommand, LeaseLost, NotEligible, Refusal
from rota.domain.events import (
    AttemptClaimed,
    AttemptCompleted,
    AttemptFailed,
    AttemptHandedOff,
    AttemptParked,
    AttemptResumed,
    AttemptTimedOut,
    HandoffContinued,
    HandoffRefused,
    InputAccepted,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    LeaseRenewed,
    ManualRetry,
    RecoveryPersisted,
    RetryArmed,
    RetryFired,
    RetryRequested,
    StopConfirmed,
    TurnPublished,
    WorkSubmitted,
)
from rota.domain.events.execution import PhaseOutcome, _Outcome
from rota.domain.policy import Pinned
from rota.domain.results import Result, check_payload, turn_of, validate_result
from rota.domain.state import AttemptState, PendingInput, WorkState

WORK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
SCOPE = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
INPUT_KEY = re.compile(r"^[A-Za-z0-9._:@/-]{1,200}$")
PHASE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
UNKNOWN_HINT_DELAY = timedelta(minutes=30)
HINT_MARGIN = timedelta(minutes=2)
MAX_HINT_AHEAD = timedelta(days=7)
MAX_METADATA_BYTES = 16 * 1024
# Launch phases one segment records (seed 001's MaxLaunchPhases): a launch that begins
# more has the rest refused, which only leaves its trail short.
MAX_LAUNCH_PHASES = 16
# Continuations in a row (handoff = "continue") before one is refused: a Work that keeps
# handing itself its next input without outside input is stopped there, not run for ever.
MAX_CONTINUATIONS = 100


# -- Work and input -------------------------------------------------------------------


def submit(
    existing: WorkState | None,
    *,
    work_id: str,
    scope: str,
    binding: str,
    kind: str = "run-once",
    trigger: str = "all",
    safety: str = "undeclared",
) -> list[Emit]:
    """Define a Work. The same definition again is a no-op; another one is refused."""
    if not WORK_ID.match(work_id):
        raise InvalidCommand(
            f"Work id {work_id!r} must match {WORK_ID.pattern}", code=DomainCode.INVALID_WORK_ID
        )
    if not SCOPE.match(scope):
        raise InvalidCommand(
            f"scope {scope!r} must be a path like root/team/project", code=DomainCode.INVALID_SCOPE
        )
    event = _submitted(work_id, scope, binding, kind, trigger, safety)
    if existing is not None:
        same = (existing.scope, existing.binding, existing.kind, existing.trigger, existing.safety)
        if same == (scope, binding, kind, trigger, safety):
            return []
        raise Refusal(
            f"Work {work_id!r} already exists with another definition "
            f"(scope {existing.scope!r}, binding {existing.binding!r}, kind {existing.kind!r})",
            code=DomainCode.WORK_CONFLICT,
        )
    return [Emit(work_stream(work_id), event)]


def _submitted(
    work_id: str, scope: str, binding: str, kind: str, trigger: str, safety: str
) -> WorkSubmitted:
    try:
        return msgspec.convert(
            {
                "work_id": work_id,
                "scope": scope,
                "binding": binding,
                "kind": kind,
                "trigger": trigger,
                "safety": safety,
            },
            WorkSubmitted,
        )
    except msgspec.ValidationError as exc:
        raise InvalidCommand(
            f"invalid Work definition: {exc}", code=DomainCode.INVALID_WORK
        ) from exc


def derived_input_key(payload: Any) -> str:
    """A key derived from the payload, for callers that supply none."""
    digest = hashlib.sha256(msgspec.json.encode(payload, order="sorted")).hexdigest()
    return f"sha256:{digest[:32]}"


def accept_input(
    work: WorkState | None,
    *,
    work_id: str,
    payload: Any = None,
    key: str | None = None,
    correlation_key: str | None = None,
) -> Emit:
    """Accept an input for a Work under delivery identity `input/<work>/<key>`."""
    if work is None:
        raise Refusal(f"no Work {work_id!r}: submit it first", code=DomainCode.UNKNOWN_WORK)
    if work.terminal is not None:
        raise Refusal(
            f"Work {work_id!r} is {work.terminal}; it accepts no more input",
            code=DomainCode.WORK_TERMINAL,
        )
    check_payload(payload, "input payload")
    key = key if key is not None else derived_input_key(payload)
    if not INPUT_KEY.match(key):
        raise InvalidCommand(
            f"input key {key!r} must match {INPUT_KEY.pattern}", code=DomainCode.INVALID_KEY
        )
    event = InputAccepted(
        work_id=work_id, key=key, payload=payload, correlation_key=correlation_key
    )
    return Emit(work_stream(work_id), event, f"input/{work_id}/{key}")


# -- start ----------------------------------------------------------------------------


def select_inputs(work: WorkState) -> tuple[list[PendingInput], PendingInput]:
    """The ordered pending input an attempt consumes, and the one that triggers it."""
    pending = list(work.pending)
    if not pending:
        raise NotEligible(f"Work {work.work_id!r} has no pending input", code=DomainCode.IDLE)
    if work.trigger == "first":
        return pending[:1], pending[0]
    if work.trigger == "last":
        return pending, pending[-1]
    return pending, pending[0]


def claim(work: WorkState, *, now: datetime, owner: str, pinned: Pinned) -> Emit:
    """Start: attempt N+1 with a fresh lease, or the resume of a parked attempt."""
    if not work.startable:
        raise NotEligible(f"Work {work.work_id!r} is {work.state}; it cannot start now")
    consumed, trigger = select_inputs(work)
    current = work.current
    if current is not None and current.status == "parked":
        lease = current.pinned.lease_seconds
        remaining = current.remaining_seconds or 0.0
        return Emit(
            work_stream(work.work_id),
            AttemptResumed(
                work_id=work.work_id,
                attempt=current.number,
                epoch=current.epoch + 1,
                owner=owner,
                lease_expires_at=now + timedelta(seconds=lease),
                deadline=now + timedelta(seconds=remaining),
                consumed=[p.position for p in consumed],
                wake=trigger.position,
            ),
        )
    return Emit(
        work_stream(work.work_id),
        AttemptClaimed(
            work_id=work.work_id,
            attempt=len(work.attempts) + 1,
            epoch=1,
            owner=owner,
            lease_expires_at=now + timedelta(seconds=pinned.lease_seconds),
            deadline=now + timedelta(seconds=pinned.timeout_seconds),
            consumed=[p.position for p in consumed],
            trigger=trigger.position,
            pinned=pinned,
        ),
    )


# -- fenced writes ----------------------------------------------------------------------


def fence(work: WorkState, attempt: int, epoch: int, now: datetime) -> AttemptState:
    """The attempt, if a write at (attempt, epoch) is still authorized at `now`."""
    current = work.current
    where = f"{work.work_id}/{attempt} at epoch {epoch}"
    if current is None or current.number != attempt:
        raise LeaseLost(f"{where}: attempt {attempt} is not the Work's current attempt")
    if current.epoch != epoch:
        raise LeaseLost(f"{where}: the lease is at epoch {current.epoch} now")
    if not current.live:
        raise LeaseLost(f"{where}: the attempt is {current.status}")
    if current.released:
        raise LeaseLost(f"{where}: the lease was released")
    if now >= current.lease_expires_at:
        raise LeaseLost(f"{where}: the lease expired at {current.lease_expires_at.isoformat()}")
    return current


def invoke(work: WorkState, attempt: int, epoch: int, now: datetime, isolated: bool) -> Emit:
    """The fenced write just before the executor is called."""
    current = fence(work, attempt, epoch, now)
    segment = current.open_segment
    if segment is None or segment.invoke != "pending":
        raise Refusal(
            f"{current.execution_id}: the launch was already invoked", code=DomainCode.INVOKED
        )
    return Emit(
        work_stream(work.work_id),
        LaunchInvoked(work_id=work.work_id, attempt=attempt, epoch=epoch, isolated=isolated),
    )


def begin_phase(work: WorkState, attempt: int, epoch: int, now: datetime, phase: str) -> Emit:
    current = fence(work, attempt, epoch, now)
    if not PHASE.match(phase):
        raise InvalidCommand(
            f"phase name {phase!r} must match {PHASE.pattern}", code=DomainCode.INVALID_PHASE
        )
    segment = current.open_segment
    if segment is not None and len(segment.phases) >= MAX_LAUNCH_PHASES:
        raise InvalidCommand(
            f"{current.execution_id}: this segment already recorded {MAX_LAUNCH_PHASES} launch "
            f"phases; {phase!r} is not recorded",
            code=DomainCode.TOO_MANY_PHASES,
        )
    event = LaunchPhaseBegan(work_id=work.work_id, attempt=attempt, epoch=epoch, phase=phase)
    return Emit(work_stream(work.work_id), event)


def end_phase(
    work: WorkState, attempt: int, epoch: int, now: datetime, phase: str, outcome: PhaseOutcome
) -> Emit:
    current = fence(work, attempt, epoch, now)
    segment = current.open_segment
    if segment is None or not any(p.name == phase and p.ended_at is None for p in segment.phases):
        raise InvalidCommand(
            f"{current.execution_id}: no launch phase {phase!r} is open (its beginning was "
            "not recorded), so its end is not recorded either",
            code=DomainCode.PHASE_NOT_BEGUN,
        )
    event = LaunchPhaseEnded(
        work_id=work.work_id, attempt=attempt, epoch=epoch, phase=phase, outcome=outcome
    )
    return Emit(work_stream(work.work_id), event)


def persist_recovery(
    work: WorkState, attempt: int, epoch: int, now: datetime, metadata: Any
) -> Emit:
    """The executor's fenced callback: bounded, opaque JSON recovery metadata."""
    fence(work, attempt, epoch, now)
    size = len(msgspec.json.encode(metadata))
    if size > MAX_METADATA_BYTES:
        raise InvalidCommand(
            f"recovery metadata is {size} bytes; at most {MAX_METADATA_BYTES}",
            code=DomainCode.METADATA_TOO_LARGE,
        )
    check_payload(metadata, "recovery metadata")
    event = RecoveryPersisted(work_id=work.work_id, attempt=attempt, epoch=epoch, metadata=metadata)
    return Emit(work_stream(work.work_id), event)


def renew(work: WorkState, attempt: int, epoch: int, now: datetime) -> Emit:
    """Expiry = now + lease, unless the stored expiry is later (the clock stepped back)."""
    current = fence(work, attempt, epoch, now)
    wanted = now + timedelta(seconds=current.pinned.lease_seconds)
    expiry = max(wanted, current.lease_expires_at)
    event = LeaseRenewed(
        work_id=work.work_id, attempt=attempt, epoch=epoch, lease_expires_at=expiry
    )
    return Emit(work_stream(work.work_id), event)


def release(work: WorkState, attempt: int, epoch: int, now: datetime, reason: str) -> Emit:
    """Give the lease up; the same attempt becomes recoverable."""
    fence(work, attempt, epoch, now)
    event = LeaseReleased(work_id=work.work_id, attempt=attempt, epoch=epoch, reason=reason)
    return Emit(work_stream(work.work_id), event)


# -- outcomes -------------------------------------------------------------------------


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
    }
    outcome: _Outcome
    if result.outcome == "completed":
        outcome = AttemptCompleted(**common)
    elif result.outcome == "handoff":
        outcome = AttemptHandedOff(**common)
    elif result.outcome == "waiting":
        remaining = _remaining_budget(current, now)
        outcome = AttemptParked(**common, remaining_seconds=remaining)
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
    code = result.error_code or "failed"
    message = result.error_message or ""
    due: datetime | None = None
    hinted = result.retry_at is not None or result.retry_unknown
    if result.retry_at is not None:
        if result.retry_at <= now:
            code, message, hinted = (
                "invalid_retry_hint",
                "retry hint reset time is not in the future",
                False,
            )
        elif result.retry_at - now > MAX_HINT_AHEAD:
            code, message, hinted = (
                "invalid_retry_hint",
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


def retry_timer(
    work: WorkState,
    attempt: AttemptState,
    now: datetime,
    *,
    permanent: bool,
    hinted_due: datetime | None,
) -> list[Emit]:
    """The durable timer a failure arms, if any (seed: failures arm a retry Timer)."""
    if permanent:
        return []
    policy = attempt.pinned.binding.retry
    failures = work.retry.failures + 1
    if work.kind == "standing":
        if hinted_due is None:
            return []
        due = hinted_due
    else:
        delay = policy.delay_after(failures)
        if delay is None:
            return []
        due = hinted_due if hinted_due is not None else now + timedelta(seconds=delay)
    event = RetryArmed(
        work_id=work.work_id,
        generation=work.retry.generation + 1,
        attempt=attempt.number,
        due_at=due,
        ancestry=[p.position for p in attempt.consumed],
        hinted=hinted_due is not None,
    )
    return [Emit(work_stream(work.work_id), event)]


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


def confirm_stopped(work: WorkState, attempt: int, expected_epoch: int) -> list[Emit]:
    """The trusted host verified the ended attempt's processes stopped."""
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
    event = StopConfirmed(work_id=work.work_id, attempt=attempt, epoch=expected_epoch)
    return [Emit(work_stream(work.work_id), event)]


def fire_retry(work: WorkState, now: datetime) -> Emit:
    """Fire the Work's due retry timer, at most once per failure generation."""
    due = work.retry.next_due
    if due is None:
        raise Refusal(f"Work {work.work_id!r} has no armed retry timer", code=DomainCode.NO_TIMER)
    if now < due:
        raise Refusal(
            f"the retry of {work.work_id!r} is due at {due.isoformat()}", code=DomainCode.NOT_DUE
        )
    generation = work.retry.generation
    event = RetryFired(work_id=work.work_id, generation=generation)
    return Emit(work_stream(work.work_id), event, f"retry/{work.work_id}/{generation}")


def request_retry(
    work: WorkState | None,
    *,
    work_id: str,
    alias: str = "core.manual.retry",
    requested_by: str = "operator",
    reason: str = "",
) -> Emit:
    """A manual retry of the Work's current failure (`core.manual.retry` or its alias)."""
    if work is None:
        raise Refusal(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
    if work.terminal is not None:
        raise Refusal(
            f"Work {work_id!r} is {work.terminal}; terminal Work stays historical",
            code=DomainCode.WORK_TERMINAL,
        )
    current = work.current
    if current is not None and (current.live or current.status == "parked"):
        raise Refusal(
            f"Work {work_id!r} has a live attempt or wait ({current.execution_id} is "
            f"{current.status}); retry after it ends",
            code=DomainCode.RETRY_LIVE,
        )
    if work.retry.failed_at == 0 or (
        work.retry.failures == 0 and work.retry.blocked_reason is None
    ):
        raise Refusal(f"Work {work_id!r} has no failure to retry", code=DomainCode.NOTHING_TO_RETRY)
    if len(reason) > 500 or len(requested_by) > 200:
        raise InvalidCommand(
            "retry reason or requester is too long", code=DomainCode.INVALID_COMMAND
        )
    kind = {"core.manual.retry": ManualRetry, "core.retry.requested": RetryRequested}.get(alias)
    if kind is None:
        raise InvalidCommand(f"unknown retry alias {alias!r}", code=DomainCode.INVALID_COMMAND)
    boundary = work.retry.failed_at
    event = kind(work_id=work_id, boundary=boundary, requested_by=requested_by, reason=reason)
    return Emit(work_stream(work_id), event, f"retry-request/{work_id}/{boundary}")
