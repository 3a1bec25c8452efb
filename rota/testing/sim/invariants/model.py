"""The invariants' own fold of the log: each Work's attempts, leases, slots, holds, timers.

It is written apart from `rota.domain.evolve` on purpose: an invariant judged against the
engine's own fold could not catch a bug in that fold (a slot freed too early, an outcome
applied to an ended attempt). It folds only what the invariants read, from the events
alone, and follows the engine's meaning of each event: an outcome, a renewal or a stop
confirmation applies to the Work's current attempt, as the engine's fold applies it, so
an event the fencing should have refused shows as the harm it does.

Slots: an attempt holds one in its pool (and under its scope) while it is live, and after
it ends until its stop is confirmed when its end is no proof that nothing of it runs
(a timeout, an interrupt, a cancel, a failure that `holds_resources`). A parked attempt
holds none. Slots of an attempt a newer attempt replaced stay held until confirmed:
resources a process holds are not freed by bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rota.application.ports import RecordedEvent
from rota.domain import admission
from rota.domain.events import (
    AttemptClaimed,
    AttemptCompleted,
    AttemptFailed,
    AttemptHandedOff,
    AttemptInterrupted,
    AttemptLost,
    AttemptParked,
    AttemptRecovered,
    AttemptResumed,
    AttemptTimedOut,
    BudgetHeld,
    Event,
    GateHeld,
    GateRefused,
    GateReleased,
    HoldReleased,
    LaunchInvoked,
    LeaseReleased,
    LeaseRenewed,
    ManualRetry,
    RecoveryPersisted,
    RetryArmed,
    RetryFired,
    RetryRequested,
    StopConfirmed,
    WorkCancelled,
    WorkHeld,
    WorkSubmitted,
)
from rota.domain.policy import RetryPolicy

Status = str  # "live" | "parked" | "ended"


@dataclass(slots=True)
class Attempt:
    """Attempt `number` of a Work as the invariants see it."""

    work_id: str
    number: int
    epoch: int
    pool: str
    retry: RetryPolicy
    lease_expires_at: datetime
    status: Status = "live"
    holds: bool = True  # holds a slot (live, or ended with its stop unconfirmed)
    released: bool = False
    released_reason: str = ""
    invoke: str | None = "pending"  # the open segment's invoke marker
    isolated: bool = False
    segment_epoch: int = 1  # the epoch the open segment began at
    metadata_epoch: int | None = None  # the epoch recovery metadata was last persisted at
    outcome: str = ""
    claimed_at: int = 0  # positions: its claim, its epoch's start, its lease, its status
    epoch_at: int = 0
    lease_at: int = 0
    status_at: int = 0

    @property
    def execution(self) -> str:
        return f"{self.work_id}/{self.number}"


@dataclass(slots=True)
class Work:
    """A Work as the invariants see it."""

    work_id: str
    scope: str
    safety: str
    kind: str
    submitted_at: int
    keys: tuple[str, ...] = ()  # its concurrency keys (flow control)
    attempts: int = 0
    current: Attempt | None = None
    cancelled_at: int = 0
    holds: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, holder) -> at
    budget_pass: bool = False
    failed_at: int = 0  # the latest failure's position (a manual retry's boundary)
    timer_generation: int = 0  # the latest armed retry timer, and where
    timer_armed_at: int = 0
    timer_pending: bool = False
    timer_cleared_at: int = 0
    fired: dict[int, int] = field(default_factory=dict)  # generation -> its fire's position
    lost_attempt: int = 0  # the latest attempt that ended lost, and where
    lost_at: int = 0
    lost_blocked: bool = False  # run-once, lost and not retryable: needs a manual retry


class Model:
    """Every Work's standing, and the slots held per pool and per limited scope."""

    def __init__(self, scope_limits: dict[str, int] | None = None) -> None:
        self.works: dict[str, Work] = {}
        self.pools: dict[str, dict[str, Attempt]] = {}  # pool -> execution -> holder
        self.scope_limits = dict(scope_limits or {})
        self.scopes: dict[str, dict[str, Attempt]] = {s: {} for s in self.scope_limits}

    # -- slots ----------------------------------------------------------------------

    def limited(self, scope: str) -> list[str]:
        """The limited scopes `scope` counts against: itself and its ancestors."""
        if not self.scope_limits:
            return []
        return [s for s in admission.ancestors(scope) if s in self.scope_limits]

    def take(self, work: Work, attempt: Attempt) -> None:
        self.pools.setdefault(attempt.pool, {})[attempt.execution] = attempt
        for scope in self.limited(work.scope):
            self.scopes[scope][attempt.execution] = attempt

    def free(self, work: Work, attempt: Attempt) -> None:
        self.pools.get(attempt.pool, {}).pop(attempt.execution, None)
        for scope in self.limited(work.scope):
            self.scopes[scope].pop(attempt.execution, None)

    # -- the fold -------------------------------------------------------------------

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one event (after the invariants judged it)."""
        event, at = recorded.event, recorded.position
        if isinstance(event, WorkSubmitted):
            if event.work_id not in self.works:
                self.works[event.work_id] = Work(
                    event.work_id, event.scope, event.safety, event.kind, at, tuple(event.keys)
                )
            return
        work_id = getattr(event, "work_id", None)
        work = self.works.get(work_id) if isinstance(work_id, str) else None
        if work is None:
            return
        rule = _RULES.get(type(event))
        if rule is not None:
            rule(self, work, event, at)

    def _claimed(self, work: Work, event: AttemptClaimed, at: int) -> None:
        # A replaced attempt that still holds its slot keeps it (in `pools`, `scopes`):
        # slot_freed_after_stop reports the replacement.
        attempt = Attempt(
            work.work_id,
            event.attempt,
            event.epoch,
            event.pinned.registration.pool,
            event.pinned.binding.retry,
            event.lease_expires_at,
            segment_epoch=event.epoch,
            claimed_at=at,
            epoch_at=at,
            lease_at=at,
            status_at=at,
        )
        if event.invoked is not None:  # the invoke marker it carries (a claim of version 2)
            attempt.invoke, attempt.isolated = "called", event.invoked.isolated
        work.attempts = max(work.attempts, event.attempt)
        work.current = attempt
        work.budget_pass = work.budget_pass and "budget" not in event.passes
        work.lost_blocked = False
        self.take(work, attempt)

    def _resumed(self, work: Work, event: AttemptResumed, at: int) -> None:
        attempt = work.current
        if attempt is None:
            return
        work.budget_pass = work.budget_pass and "budget" not in event.passes
        was_holding = attempt.holds
        attempt.epoch, attempt.lease_expires_at = event.epoch, event.lease_expires_at
        attempt.status, attempt.holds, attempt.released = "live", True, False
        attempt.invoke, attempt.isolated, attempt.segment_epoch = "pending", False, event.epoch
        attempt.epoch_at = attempt.lease_at = attempt.status_at = at
        if not was_holding:
            self.take(work, attempt)

    def _recovered(self, work: Work, event: AttemptRecovered, at: int) -> None:
        attempt = work.current
        if attempt is None:
            return
        relaunch = event.mode == "relaunch"
        attempt.epoch, attempt.lease_expires_at = event.epoch, event.lease_expires_at
        attempt.released, attempt.released_reason = False, ""
        attempt.invoke = "pending" if relaunch else None
        attempt.isolated, attempt.segment_epoch = False, event.epoch
        attempt.epoch_at = attempt.lease_at = at
        if attempt.status != "live":  # the engine's fold makes it live again
            attempt.status, attempt.status_at = "live", at
            if not attempt.holds:
                attempt.holds = True
                self.take(work, attempt)

    def _invoked(self, work: Work, event: LaunchInvoked, at: int) -> None:
        attempt = work.current
        if attempt is not None and attempt.status == "live":
            attempt.invoke, attempt.isolated = "called", event.isolated

    def _persisted(self, work: Work, event: RecoveryPersisted, at: int) -> None:
        if work.current is not None:
            work.current.metadata_epoch = event.epoch

    def _renewed(self, work: Work, event: LeaseRenewed, at: int) -> None:
        if work.current is not None:
            work.current.lease_expires_at, work.current.lease_at = event.lease_expires_at, at

    def _released(self, work: Work, event: LeaseReleased, at: int) -> None:
        if work.current is not None:
            work.current.released, work.current.released_reason = True, event.reason

    def end(self, work: Work, attempt: Attempt, outcome: str, holds: bool, at: int) -> None:
        """The attempt ended; it keeps its slot while `holds` (its stop unconfirmed)."""
        attempt.status, attempt.outcome, attempt.status_at = "ended", outcome, at
        if attempt.holds and not holds:
            self.free(work, attempt)
        elif holds and not attempt.holds:
            self.take(work, attempt)
        attempt.holds = holds

    def _outcome(self, work: Work, event: Event, at: int) -> None:
        attempt = work.current
        if attempt is None:
            return
        if isinstance(event, AttemptParked):
            attempt.status, attempt.status_at = "parked", at
            if attempt.holds:
                self.free(work, attempt)
            attempt.holds = False
            return
        if isinstance(event, AttemptFailed):
            self.end(work, attempt, "failed", event.holds_resources, at)
            work.failed_at = at
        elif isinstance(event, AttemptTimedOut):
            self.end(work, attempt, "timed_out", True, at)
            work.failed_at = at
        else:
            self.end(work, attempt, "completed", False, at)

    def _interrupted(self, work: Work, event: AttemptInterrupted, at: int) -> None:
        attempt = work.current
        if attempt is not None and attempt.number == event.attempt:
            self.end(work, attempt, "interrupted", True, at)

    def _stop_confirmed(self, work: Work, event: StopConfirmed, at: int) -> None:
        attempt = work.current
        if attempt is not None and attempt.status == "ended" and attempt.holds:
            self.free(work, attempt)
            attempt.holds, attempt.status_at = False, at

    def _lost(self, work: Work, event: AttemptLost, at: int) -> None:
        attempt = work.current
        if attempt is None:
            return
        self.end(work, attempt, "lost", False, at)
        work.failed_at, work.lost_attempt, work.lost_at = at, attempt.number, at
        retryable = work.safety in ("idempotent", "deduplicated") and attempt.retry.retry_on_lost
        work.lost_blocked = work.kind == "run-once" and not retryable

    def _cancelled(self, work: Work, event: Event, at: int) -> None:
        work.cancelled_at = work.cancelled_at or at
        work.holds.clear()
        work.timer_pending, work.timer_cleared_at = False, at
        attempt = work.current
        if attempt is not None and attempt.status == "live":
            self.end(work, attempt, "cancelled", True, at)
        elif attempt is not None and attempt.status == "parked":
            self.end(work, attempt, "cancelled", False, at)

    def _held(self, work: Work, event: Event, at: int) -> None:
        if isinstance(event, BudgetHeld):
            work.holds[("budget", f"budget:{event.budget}")] = at
        elif isinstance(event, GateHeld):
            work.holds[("gate", event.registration)] = at
        elif isinstance(event, WorkHeld):
            work.holds[(event.kind, event.holder)] = at

    def _hold_released(self, work: Work, event: HoldReleased, at: int) -> None:
        for key in [k for k in work.holds if k[0] == event.kind]:
            del work.holds[key]
        work.budget_pass = work.budget_pass or event.kind == "budget"

    def _gate_released(self, work: Work, event: GateReleased, at: int) -> None:
        work.holds.pop(("gate", event.registration), None)

    def _armed(self, work: Work, event: RetryArmed, at: int) -> None:
        work.timer_generation, work.timer_armed_at, work.timer_pending = event.generation, at, True

    def _fired(self, work: Work, event: RetryFired, at: int) -> None:
        work.fired.setdefault(event.generation, at)
        if event.generation == work.timer_generation and work.timer_pending:
            work.timer_pending, work.timer_cleared_at = False, at

    def _retry_requested(self, work: Work, event: ManualRetry | RetryRequested, at: int) -> None:
        if event.boundary != work.failed_at or at <= work.failed_at:
            return  # a request answers one failure; it never clears a later one
        if work.timer_pending:
            work.timer_pending, work.timer_cleared_at = False, at
        work.lost_blocked = False


_RULES: dict[type[Event], Callable[[Model, Work, Any, int], None]] = {
    AttemptClaimed: Model._claimed,
    AttemptResumed: Model._resumed,
    AttemptRecovered: Model._recovered,
    LaunchInvoked: Model._invoked,
    RecoveryPersisted: Model._persisted,
    LeaseRenewed: Model._renewed,
    LeaseReleased: Model._released,
    AttemptCompleted: Model._outcome,
    AttemptHandedOff: Model._outcome,
    AttemptFailed: Model._outcome,
    AttemptTimedOut: Model._outcome,
    AttemptParked: Model._outcome,
    AttemptInterrupted: Model._interrupted,
    StopConfirmed: Model._stop_confirmed,
    AttemptLost: Model._lost,
    WorkCancelled: Model._cancelled,
    GateRefused: Model._cancelled,
    BudgetHeld: Model._held,
    GateHeld: Model._held,
    WorkHeld: Model._held,
    HoldReleased: Model._hold_released,
    GateReleased: Model._gate_released,
    RetryArmed: Model._armed,
    RetryFired: Model._fired,
    ManualRetry: Model._retry_requested,
    RetryRequested: Model._retry_requested,
}
