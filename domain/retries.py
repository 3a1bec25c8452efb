"""Decisions of retries: the timer a failure arms, its firing, and a manual retry."""

from __future__ import annotations

from datetime import datetime, timedelta

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, InvalidCommand, Refusal
from rota.domain.events import ManualRetry, RetryArmed, RetryFired, RetryRequested
from rota.domain.state import AttemptState, WorkState


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
