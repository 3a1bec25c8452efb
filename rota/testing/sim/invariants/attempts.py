"""Invariants of attempts: one live attempt, fencing by epoch and lease, renewals,
relaunches, and starts of terminal or held Work (seed 001)."""

from __future__ import annotations

from rota.application.ports import RecordedEvent
from rota.domain.events import (
    OUTCOMES,
    AttemptAdopted,
    AttemptClaimed,
    AttemptInterrupted,
    AttemptLost,
    AttemptRecovered,
    AttemptRecoveryFailed,
    AttemptResumed,
    Event,
    HandoffContinued,
    HandoffRefused,
    InputAccepted,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    LeaseRenewed,
    RecoveryPersisted,
    RetryFired,
    StopConfirmed,
    WorkSubmitted,
    accepted_input,
)
from rota.testing.sim.invariants.base import Invariant, Violation
from rota.testing.sim.invariants.model import Model

# Writes on behalf of an attempt that its lease fences (`rota.domain.fences.fence`), and
# the interrupt, which fences the attempt itself: each names the attempt and its epoch.
LEASE_FENCED: tuple[type[Event], ...] = (
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    RecoveryPersisted,
    LeaseRenewed,
    LeaseReleased,
    *OUTCOMES,
    AttemptAdopted,
    AttemptLost,
    AttemptRecoveryFailed,
    AttemptInterrupted,
)
# Events that name an attempt's epoch and must name its current one: the fenced writes,
# a stop confirmation, and a handoff's continuation (appended with its outcome).
EPOCH_NAMED: tuple[type[Event], ...] = (
    *LEASE_FENCED,
    StopConfirmed,
    HandoffContinued,
    HandoffRefused,
)
STARTS = (AttemptClaimed, AttemptResumed)


class OneLiveAttempt(Invariant):
    """At most one live attempt per Work, each epoch claimed once, attempt numbers 1, 2, 3.

    Seed 001 (001_a97b7b12fa97a199.txt): "Claim atomically selects ordered pending input,
    creates the next monotonic attempt, claims its lease" and "Real serializable storage
    prevents competing schedulers from creating simultaneous attempts or exceeding
    configured capacity." A claim while an attempt is live or parked, a resume of an attempt
    that is not parked, or a recovery of an epoch that is no longer the attempt's (two
    recoveries of one expired lease) puts two holders on one Work.
    """

    name = "one_live_attempt"
    events = (AttemptClaimed, AttemptResumed, AttemptRecovered)

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        assert isinstance(event, AttemptClaimed | AttemptResumed | AttemptRecovered)
        work = model.works.get(event.work_id)
        execution = f"{event.work_id}/{event.attempt}"
        if work is None:
            return [self.violation(f"{execution} started for a Work never submitted", at)]
        current = work.current
        if isinstance(event, AttemptClaimed):
            found: list[Violation] = []
            if current is not None and current.status in ("live", "parked"):
                found.append(
                    self.violation(
                        f"{execution} claimed while {current.execution} is {current.status} "
                        f"(epoch {current.epoch})",
                        current.status_at,
                        at,
                    )
                )
            if event.attempt != work.attempts + 1:
                found.append(
                    self.violation(
                        f"{execution} claimed after attempt {work.attempts}: attempt numbers "
                        "must run 1, 2, 3",
                        current.claimed_at if current is not None else None,
                        at,
                    )
                )
            return found
        if current is None or current.number != event.attempt:
            which = "none" if current is None else current.execution
            return [self.violation(f"{execution} is not the current attempt ({which})", at)]
        if isinstance(event, AttemptResumed):
            if current.status != "parked" or event.epoch <= current.epoch:
                return [
                    self.violation(
                        f"{execution} resumed at epoch {event.epoch} while {current.status} "
                        f"at epoch {current.epoch}",
                        current.status_at,
                        at,
                    )
                ]
            return []
        if current.status != "live":
            return [
                self.violation(
                    f"{execution} recovered at epoch {event.epoch} while {current.status}",
                    current.status_at,
                    at,
                )
            ]
        if event.previous_epoch != current.epoch or event.epoch <= current.epoch:
            return [
                self.violation(
                    f"{execution} recovered from epoch {event.previous_epoch} to {event.epoch} "
                    f"while its current epoch is {current.epoch}",
                    current.epoch_at,
                    at,
                )
            ]
        return []


class NoStaleEpochWrite(Invariant):
    """No write at an epoch other than the attempt's current one is accepted into the log.

    Seed 001 (001_a97b7b12fa97a199.txt): "Old outcomes, metadata callbacks and renewals fail after
    expiry, release, cancellation or a newer epoch." and "Confirmations cannot target an attempt
    that has since been adopted at another epoch." Every fenced write (launch phases, the invoke
    marker, recovery metadata, renewal, release, outcome, adoption, lost, failed recovery,
    interrupt), a stop confirmation and a handoff continuation must name the Work's current attempt
    at its current epoch.
    """

    name = "no_stale_epoch_write"
    events = EPOCH_NAMED

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        work_id, number, epoch = _fenced(event)
        work = model.works.get(work_id)
        current = work.current if work is not None else None
        kind = recorded.type
        if current is None or current.number != number:
            which = "none" if current is None else current.execution
            return [
                self.violation(
                    f"{kind} for {work_id}/{number} at epoch {epoch}, but the current attempt "
                    f"is {which}",
                    current.claimed_at if current is not None else None,
                    at,
                )
            ]
        if epoch != current.epoch:
            age = "stale" if epoch < current.epoch else "future"
            return [
                self.violation(
                    f"{kind} for {current.execution} at {age} epoch {epoch}; its current "
                    f"epoch is {current.epoch}",
                    current.epoch_at,
                    at,
                )
            ]
        return []


class FencedWriteWhileLive(Invariant):
    """A fenced write (an outcome above all) is accepted only while its attempt is live and
    its lease not released.

    Seed 001 (001_a97b7b12fa97a199.txt): "Observe waits outside storage, then applies a lease-fenced
    structured result." and "Old outcomes, metadata callbacks and renewals fail after expiry,
    release, cancellation or a newer epoch." An outcome for an attempt that already ended or parked
    would end it twice (and free a slot its stop never confirmed). The one write after a release is
    the `lost` appended with the release of its expired lease; an interrupt fences a live attempt
    whatever its lease.
    """

    name = "fenced_write_while_live"
    events = LEASE_FENCED

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        work_id, number, epoch = _fenced(event)
        work = model.works.get(work_id)
        current = work.current if work is not None else None
        if current is None or current.number != number or current.epoch != epoch:
            return []  # no_stale_epoch_write reports it
        if current.status != "live":
            return [
                self.violation(
                    f"{recorded.type} for {current.execution} at epoch {epoch}, which is "
                    f"{current.status} ({current.outcome or 'parked'})",
                    current.status_at,
                    at,
                )
            ]
        if not current.released or isinstance(event, AttemptInterrupted):
            return []
        if isinstance(event, AttemptLost) and current.released_reason == "lease_expired":
            return []
        return [
            self.violation(
                f"{recorded.type} for {current.execution} at epoch {epoch} after its lease "
                f"was released ({current.released_reason})",
                at,
            )
        ]


class LeaseNeverShortened(Invariant):
    """A renewal never moves an attempt's lease expiry earlier.

    Seed 001 (001_a97b7b12fa97a199.txt): "Renew sets the expiry to now plus the lease duration
    unless the stored expiry is later (the clock stepped back), which it keeps: a renewal never
    shortens a lease". Compared with the expiry the same epoch's claim, resume, recovery or last
    renewal set.
    """

    name = "lease_never_shortened"
    events = (LeaseRenewed,)

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event = recorded.event
        assert isinstance(event, LeaseRenewed)
        work = model.works.get(event.work_id)
        current = work.current if work is not None else None
        if current is None or current.number != event.attempt or current.epoch != event.epoch:
            return []
        if event.lease_expires_at >= current.lease_expires_at:
            return []
        return [
            self.violation(
                f"renewal of {current.execution} at epoch {event.epoch} moved its lease from "
                f"{current.lease_expires_at.isoformat()} back to "
                f"{event.lease_expires_at.isoformat()}",
                current.lease_at,
                recorded.position,
            )
        ]


class RelaunchOnlyWhenNothingStarted(Invariant):
    """A relaunch only when the launch provably started nothing.

    Seed 001 (001_a97b7b12fa97a199.txt): "It never calls Run to replace a process. The exception is
    an attempt whose launch lost its lease before it started anything. [...] Either its executor is
    known never to have been called (Invoke is pending), or it was called after a sandbox or
    container was bound (Isolated), which holds every process until it is pinned. A segment with no
    Invoke, such as one an earlier release began, proves neither and is adopted." and "A timeout
    that recovers authority to time an attempt out never relaunches it." A relaunch with reason
    `not_started` is the executor's recover proving it (fenced at the current epoch, which
    one_live_attempt checks).
    """

    name = "relaunch_only_when_nothing_started"
    events = (AttemptRecovered,)

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        assert isinstance(event, AttemptRecovered)
        if event.mode != "relaunch":
            return []
        execution = f"{event.work_id}/{event.attempt}"
        if event.reason == "timeout":
            return [self.violation(f"{execution} relaunched to time it out", at)]
        if event.reason == "not_started":
            return []
        work = model.works.get(event.work_id)
        current = work.current if work is not None else None
        if current is None or current.number != event.attempt or current.status != "live":
            return []  # one_live_attempt reports it
        if current.invoke == "pending":
            return []
        pinned = current.metadata_epoch == current.segment_epoch
        if current.invoke == "called" and current.isolated and not pinned:
            return []
        why = {
            None: "its segment has no invoke marker (a recovery or release began it)",
            "called": "its executor was called unisolated"
            if not current.isolated
            else "its isolated launch pinned recovery metadata",
        }.get(current.invoke, f"its invoke marker is {current.invoke!r}")
        return [
            self.violation(
                f"{execution} relaunched at epoch {event.epoch} though {why}",
                current.epoch_at,
                at,
            )
        ]


class NoStartAfterTerminal(Invariant):
    """A cancelled Work never gets a new attempt, resume, recovery or retry.

    Seed 001 (001_a97b7b12fa97a199.txt): "Work cancellation atomically fences attempts, Waits, owned
    timers and queue eligibility through the router." and "Old due generations, terminal Work and
    replay remain historical".
    """

    name = "no_start_after_terminal"
    events = (AttemptClaimed, AttemptResumed, AttemptRecovered, RetryFired)

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event = recorded.event
        work = model.works.get(getattr(event, "work_id", ""))
        if work is None or not work.cancelled_at:
            return []
        return [
            self.violation(
                f"{recorded.type} for {work.work_id} after it was cancelled",
                work.cancelled_at,
                recorded.position,
            )
        ]


class NoInputAfterTerminal(Invariant):
    """A cancelled Work accepts no more input: an input answered "accepted" is one the
    Work will consider, so none is recorded once the Work is cancelled.

    Seed 001 (001_a97b7b12fa97a199.txt): "Work cancellation atomically fences attempts,
    Waits, owned timers and queue eligibility through the router."; rota.domain.submission
    refuses it ("Work ... is cancelled; it accepts no more input", `work_terminal`), so a
    record of one means a decision was made against a state the log had moved past.
    """

    name = "no_input_after_terminal"
    events = (InputAccepted, WorkSubmitted)  # (a definition may carry the first input)

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event = accepted_input(recorded.event)
        if event is None:
            return []
        work = model.works.get(event.work_id)
        if work is None or not work.cancelled_at:
            return []
        return [
            self.violation(
                f"input {event.key!r} accepted for {work.work_id} after it was cancelled",
                work.cancelled_at,
                recorded.position,
            )
        ]


class NoStartWhileHeld(Invariant):
    """Held Work does not start: no claim or resume while a hold stands.

    Seed 001 (001_a97b7b12fa97a199.txt): "Start refuses a turn when an applicable ledger has reached
    its Max. The refusal commits a hold of kind budget [...] Input keeps queueing while it is held."
    and, of a start gate's hold, "Input keeps queueing while it is held, and held Work is not asked
    again." Holds: budget, gate, crash_loop, recovery_exhausted, operator.
    """

    name = "no_start_while_held"
    events = STARTS

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event = recorded.event
        assert isinstance(event, AttemptClaimed | AttemptResumed)
        work = model.works.get(event.work_id)
        if work is None or not work.holds:
            return []
        (kind, holder), since = next(iter(work.holds.items()))
        return [
            self.violation(
                f"{event.work_id}/{event.attempt} started while the Work is held ({kind} by "
                f"{holder})",
                since,
                recorded.position,
            )
        ]


def _fenced(event: object) -> tuple[str, int, int]:
    """The Work, attempt number and epoch an attempt's event names."""
    return (
        getattr(event, "work_id", ""),
        int(getattr(event, "attempt", 0)),
        int(getattr(event, "epoch", 0)),
    )
