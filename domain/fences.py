"""The fence of an attempt's writes, and the fenced writes of its launch and lease.

Every write on behalf of an attempt goes through `fence()`: the attempt must be the
current one, at the named epoch, live, not released, and its lease unexpired at `now`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, InvalidCommand, LeaseLost, Refusal
from rota.domain.events import (
    AttemptClaimed,
    Invoked,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    LeaseRenewed,
    RecoveryPersisted,
)
from rota.domain.events.execution import PhaseOutcome
from rota.domain.results import check_payload
from rota.domain.state import AttemptState, WorkState

PHASE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
MAX_METADATA_BYTES = 16 * 1024
# Launch phases one segment records (seed 001's MaxLaunchPhases): a launch that begins
# more has the rest refused, which only leaves its trail short.
MAX_LAUNCH_PHASES = 16


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


def invoke_with_claim(claim: AttemptClaimed, isolated: bool) -> AttemptClaimed:
    """The claim of an attempt whose executor is called as soon as the claim is durable (no
    launch phase, run-environment hook or anything else runs between them), carrying its
    invoke marker (`invoked`): still the fenced write before the executor is called, in
    the claim itself. The claim opens the segment under a lease it takes, so the fence
    holds by construction, and the marker is never durable as `pending`."""
    return msgspec.structs.replace(claim, invoked=Invoked(isolated=isolated))


def begin_phase(work: WorkState, attempt: int, epoch: int, now: datetime, phase: str) -> Emit:
    current = fence(work, attempt, epoch, now)
    if not PHASE.fullmatch(phase):
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
