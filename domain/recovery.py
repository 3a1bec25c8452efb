"""Recovery decisions: relaunch versus adopt, decided from the evidence in the log.

An attempt whose lease expired (judged by the store's clock) or was released is recovered
at a higher epoch before any executor is called. The evidence is its open segment:

- **relaunch** when its launch lost the lease before it started anything: the invoke
  marker is still `pending` (the executor was never called), or it is `called` with
  `isolated` (a sandbox or container held every process) and nothing was pinned in that
  segment (no recovery metadata at its epoch). Losing the lease was the host's failure:
  a relaunch fails nothing, spends no retry and waits out no backoff. (A claim that
  carries its marker, `core.execution.claimed` `invoked`, opens the segment `called`,
  exactly as a separate `core.execution.invoked` after it: the same evidence.)
- **adopt** everything else: an unisolated launch whose executor was called (it may have
  started its process before recording anything), a launch that pinned metadata, and a
  segment with no invoke marker at all (one a recovery began) prove nothing, so recovery
  never runs them again and fails closed.

A timeout that recovers authority never relaunches. After `crash_loop_limit` relaunches of
one attempt, the Work is held (`crash_loop`) instead.

A recovery whose executor finds no evidence (its `recover` answers `unknown` or fails) is
not claimed again at a higher epoch every lease: `recovery_failed` ends the attempt as a
safe failure (`recovery_failed`, keeping its slot until its stop is verified: the host
stops it through its executor, then confirms), and its retry policy applies. The Work's
failed recoveries in a row are read from its attempts (`failed_recoveries`: the attempts
that ended `recovery_failed`, back to the last that ended otherwise); at
`recovery_failure_limit` the Work is held (`recovery_exhausted`) with the reason, until an
operator releases it (and held again by the next failed recovery in the same row).

The deadline is wall time, judged by the store's clock, except for an attempt the
recovering host's own process runs: that host measured its run time by a monotonic clock
and passes what is left of its budget (`remaining`). It is timed out only when both say
so, and when the wall clock stepped forward past the old deadline the claim moves it to
now plus what is left (never earlier than it was), so a clock jump times nothing out.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, InvalidCommand, Refusal
from rota.domain.events import AttemptFailed, AttemptTimedOut, LeaseReleased
from rota.domain.events.recovery import (
    AttemptAdopted,
    AttemptLost,
    AttemptRecovered,
    AttemptRecoveryFailed,
    HoldReleased,
    WorkHeld,
)
from rota.domain.failures import FailureCode
from rota.domain.fences import fence
from rota.domain.pages import check_limit, take
from rota.domain.retries import retry_timer
from rota.domain.state import AttemptState, WorkState

OPERATOR_RELEASABLE = frozenset({"crash_loop", "recovery_exhausted", "budget", "operator", "wait"})


def needs_recovery(work: WorkState, now: datetime) -> bool:
    """A live attempt whose lease expired at `now` or was released, on Work not held."""
    attempt = work.current
    if attempt is None or not attempt.live or work.terminal is not None:
        return False
    return attempt.released or now >= attempt.lease_expires_at


def relaunchable(attempt: AttemptState) -> bool:
    """The launch lost its lease before it started anything (see the module docstring)."""
    segment = attempt.open_segment
    if segment is None or segment.invoke is None:
        return False
    if segment.invoke == "pending":
        return True
    return segment.isolated and attempt.recovery_epoch != segment.epoch


def recover(
    work: WorkState,
    *,
    now: datetime,
    owner: str,
    crash_loop_limit: int,
    remaining: float | None = None,
) -> list[Emit]:
    """The recovery claim for one Work's expired attempt ([] when it needs none).

    `remaining`: the seconds of run time left, when the recovering host's own process runs
    the attempt (measured by its monotonic clock); None when it does not.
    """
    if not needs_recovery(work, now) or work.holds:
        return []
    attempt = work.current
    assert attempt is not None
    epoch = attempt.epoch + 1
    lease = now + timedelta(seconds=attempt.pinned.lease_seconds)
    reason = "released" if attempt.released else "lease_expired"
    stream = work_stream(work.work_id)
    deadline = attempt.deadline
    if remaining is not None:
        deadline = max(deadline, now + timedelta(seconds=max(0.0, remaining)))
    moved = deadline if deadline != attempt.deadline else None
    if now >= deadline:
        # A timeout recovers authority first (a zero-length recovered segment) and never
        # relaunches; the resource hold stays until the stop is confirmed.
        claim = _claim(work, attempt, epoch, owner, lease, "adopt", "timeout")
        timed_out = AttemptTimedOut(work_id=work.work_id, attempt=attempt.number, epoch=epoch)
        timer = retry_timer(work, attempt, now, permanent=False, hinted_due=None)
        return [Emit(stream, claim), Emit(stream, timed_out), *timer]
    if relaunchable(attempt):
        if attempt.relaunches >= crash_loop_limit:
            held = WorkHeld(
                work_id=work.work_id,
                kind="crash_loop",
                reason=f"{attempt.execution_id} lost its lease before starting "
                f"{attempt.relaunches} times; release to relaunch it again",
            )
            return [Emit(stream, held)]
        claim = _claim(work, attempt, epoch, owner, lease, "relaunch", reason, moved)
        return [Emit(stream, claim)]
    return [Emit(stream, _claim(work, attempt, epoch, owner, lease, "adopt", reason, moved))]


def _claim(
    work: WorkState,
    attempt: AttemptState,
    epoch: int,
    owner: str,
    lease: datetime,
    mode: str,
    reason: str,
    deadline: datetime | None = None,
) -> AttemptRecovered:
    return AttemptRecovered(
        work_id=work.work_id,
        attempt=attempt.number,
        epoch=epoch,
        previous_epoch=attempt.epoch,
        owner=owner,
        previous_owner=attempt.owner,
        lease_expires_at=lease,
        mode=mode,  # type: ignore[arg-type]
        reason=reason,  # type: ignore[arg-type]
        deadline=deadline,
    )


def lose(work: WorkState, attempt: int, epoch: int, now: datetime, evidence: str) -> list[Emit]:
    """Trusted not-running evidence and no result: the attempt is lost, its lease released.

    Only Work admitted as idempotent or deduplicated, whose policy retries on lost, gets
    a retry timer; otherwise the Work fails (blocked reason `lost`).
    """
    current = fence(work, attempt, epoch, now)
    stream = work_stream(work.work_id)
    emits = [
        Emit(
            stream,
            LeaseReleased(
                work_id=work.work_id, attempt=attempt, epoch=epoch, reason="lease_expired"
            ),
        ),
        Emit(
            stream,
            AttemptLost(work_id=work.work_id, attempt=attempt, epoch=epoch, evidence=evidence),
        ),
    ]
    policy = current.pinned.binding.retry
    if (
        work.safety in ("idempotent", "deduplicated")
        and policy.retry_on_lost
        and work.retry.failures + 1 < policy.max_attempts
    ):
        emits.extend(retry_timer(work, current, now, permanent=False, hinted_due=None))
    return emits


def failed_recoveries(work: WorkState) -> int:
    """The Work's failed recoveries in a row: its ended attempts that failed
    `recovery_failed`, counted back from the newest to the first that ended otherwise (a
    completed one, one adopted and then ended by its own result, ...)."""
    count = 0
    for attempt in reversed(work.attempts):
        if attempt.status != "ended":
            continue  # the live (or parked) attempt has not ended yet
        if attempt.error_code != FailureCode.RECOVERY_FAILED:
            break
        count += 1
    return count


def recovery_failed(
    work: WorkState, attempt: int, epoch: int, now: datetime, *, evidence: str, limit: int
) -> list[Emit]:
    """The recovered attempt's executor found no evidence of it (`evidence`: `unknown`, or
    `error` when its `recover` failed): fenced at the recovery's epoch, the attempt ends as
    a safe failure that keeps its slot until its stop is verified, its retry policy arms
    its timer, and at `limit` failed recoveries in a row the Work is held
    (`recovery_exhausted`), unless the failure already ends it (`terminal_on_exhaustion`).
    """
    current = fence(work, attempt, epoch, now)
    if evidence not in ("unknown", "error"):
        raise InvalidCommand(
            f"recovery evidence {evidence!r} is neither 'unknown' nor 'error'",
            code=DomainCode.INVALID_COMMAND,
        )
    stream = work_stream(work.work_id)
    failures = failed_recoveries(work) + 1
    noted = AttemptRecoveryFailed(
        work_id=work.work_id,
        attempt=attempt,
        epoch=epoch,
        evidence=evidence,  # type: ignore[arg-type]
        failures=failures,
        limit=limit,
    )
    how = "answered unknown" if evidence == "unknown" else "failed"
    failed = AttemptFailed(
        work_id=work.work_id,
        attempt=attempt,
        epoch=epoch,
        error_code=FailureCode.RECOVERY_FAILED,
        error_message=f"the lease was lost and the executor's recovery {how}: no evidence of "
        "the attempt; its slot is kept until its stop is verified",
        holds_resources=True,
    )
    emits = [Emit(stream, noted), Emit(stream, failed)]
    emits.extend(retry_timer(work, current, now, permanent=False, hinted_due=None))
    policy = current.pinned.binding.retry
    ends = (
        work.kind != "standing"
        and policy.terminal_on_exhaustion
        and work.retry.failures + 1 >= policy.max_attempts
    )
    if failures >= limit and not ends:
        held = WorkHeld(
            work_id=work.work_id,
            kind="recovery_exhausted",
            reason=f"{current.execution_id}: recovery failed {failures} times in a row (the "
            "executor found no evidence of the attempt); check the executor and its hosts, "
            "then release to run it again",
        )
        emits.append(Emit(stream, held))
    return emits


def adoptable(work: WorkState | None, attempt: int, epoch: int) -> bool:
    """Whether an attempt a host lost the lease of still belongs to recovery.

    True while its execution is running and its Work open, at this epoch or a newer one;
    a host stops a process after lost authority only when this is False.
    """
    if work is None or work.terminal is not None or work.current is None:
        return False
    current = work.current
    return current.number == attempt and current.live and current.epoch >= epoch


def release_hold(
    work: WorkState | None, *, work_id: str, kind: str | None, by: str = "operator"
) -> Emit:
    """An operator releases a hold; a gate's hold only its registration can settle."""
    if work is None:
        raise Refusal(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
    holds = [h for h in work.holds if kind is None or h.kind == kind]
    if not holds:
        raise Refusal(f"Work {work_id!r} has no hold to release", code=DomainCode.NOT_HELD)
    hold = holds[0]
    if hold.kind not in OPERATOR_RELEASABLE:
        raise Refusal(
            f"Work {work_id!r} is held by {hold.holder} ({hold.kind}); only it can settle the "
            "hold: cancel the Work instead",
            code=DomainCode.GATE_HOLD if hold.kind == "gate" else DomainCode.NOT_RELEASABLE,
        )
    event = HoldReleased(work_id=work_id, kind=hold.kind, released_by=by)
    return Emit(work_stream(work_id), event)


def page(works: list[WorkState], now: datetime, limit: int) -> tuple[list[WorkState], bool]:
    """The next page of Works needing recovery, oldest expiry first; True if there is more.

    Fetches limit + 1 to know whether more remain; no cursor is kept across passes
    (`rota.domain.pages`).
    """
    check_limit(limit, "recovery")
    due = [w for w in works if needs_recovery(w, now) and not w.holds]
    due.sort(key=lambda w: (w.current.lease_expires_at if w.current else now, w.work_id))
    return take(due, limit)


def adopted(work: WorkState, attempt: int, epoch: int, now: datetime) -> Emit:
    """Record that the executor attached to the recovered attempt (fenced)."""
    fence(work, attempt, epoch, now)
    event = AttemptAdopted(work_id=work.work_id, attempt=attempt, epoch=epoch)
    return Emit(work_stream(work.work_id), event)


def relaunch_unstarted(
    work: WorkState, attempt: int, epoch: int, now: datetime, owner: str, crash_loop_limit: int
) -> list[Emit]:
    """The executor's recover proved the adopted launch never started (and never will):
    relaunch it under a new epoch, failing nothing (reason `not_started`); the crash-loop
    ceiling still applies."""
    current = fence(work, attempt, epoch, now)
    stream = work_stream(work.work_id)
    if current.relaunches >= crash_loop_limit:
        held = WorkHeld(
            work_id=work.work_id,
            kind="crash_loop",
            reason=f"{current.execution_id} lost its launch before starting "
            f"{current.relaunches} times; release to relaunch it again",
        )
        return [Emit(stream, held)]
    lease = now + timedelta(seconds=current.pinned.lease_seconds)
    claim = _claim(work, current, epoch + 1, owner, lease, "relaunch", "not_started")
    return [Emit(stream, claim)]
