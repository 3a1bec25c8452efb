"""Decisions of an attempt's start: the input it consumes, and its claim or resume."""

from __future__ import annotations

from datetime import datetime, timedelta

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, NotEligible
from rota.domain.events import AttemptClaimed, AttemptResumed
from rota.domain.policy import Pinned
from rota.domain.state import PendingInput, WorkState
from rota.domain.waits import waking_inputs


def select_inputs(work: WorkState) -> tuple[list[PendingInput], PendingInput]:
    """The ordered pending input an attempt consumes, and the one that triggers it.

    A parked attempt's resume takes only the input its wait predicate matches (the first of
    them is the wake); the rest stays queued for a later wait or the next attempt."""
    pending = waking_inputs(work)
    if not pending:
        if work.pending:
            raise NotEligible(
                f"Work {work.work_id!r} waits; none of its pending input matches its wait",
                code=DomainCode.IDLE,
            )
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
            grants=list(work.grants),
        ),
    )
