"""What an event about one attempt does to that attempt's history (its segments and outcomes).

`about_attempt` is the Work-level route of every event that names an attempt: it finds the
attempt's `AttemptHistory` and applies the step `attempt_step(type)` gives for the event
(`_ATTEMPT_RULES`: launch phases and the invoke marker, renewals, releases, stop evidence,
resumes, recoveries, outcomes), resolved once per concrete event type and cached. An event
naming no known attempt is kept as a mark on the Work.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rota.domain.events import (
    AttemptFailed,
    AttemptResumed,
    AttemptTimedOut,
    Event,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    LeaseRenewed,
    StopConfirmed,
)
from rota.domain.events.execution import _Outcome
from rota.domain.events.recovery import AttemptLost, AttemptRecovered
from rota.projections.records import (
    INTERRUPTED,
    AttemptHistory,
    FailureRecord,
    Mark,
    OutcomeRecord,
    PhaseRecord,
    RecoveryRecord,
    SegmentRecord,
    WorkHistory,
    close_segment,
    outcome_kind,
)

if TYPE_CHECKING:
    from rota.projections.history import HistoryProjection

ATTEMPT_ROW = "attempt/"
WORK_ROW = "work/"


def attempt_row(work_id: str, number: int) -> str:
    return f"{ATTEMPT_ROW}{work_id}/{number}"


def work_row(work_id: str) -> str:
    return WORK_ROW + work_id


# A route: what an event does to a Work's history; a step: what one does to an attempt's.
Route = Callable[["HistoryProjection", WorkHistory, int, datetime, Any], None]
Step = Callable[["HistoryProjection", WorkHistory, AttemptHistory, int, datetime, Any], None]


def about_attempt(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: Event
) -> None:
    """The route of an event about one attempt: that attempt's step, else a mark on the Work.

    It marks the rows it changes dirty, the Work's too when it changes the Work's record
    (a mark here, a failure in `_ended`): `HistoryProjection.apply` leaves that to it."""
    number = getattr(event, "attempt", None)
    attempt = h.attempt(work.work_id, number) if isinstance(number, int) else None
    if attempt is None:
        work.marks.append(Mark(event.tag(), position, at))
        h.dirty.add(work_row(work.work_id))
        return
    h.dirty.add(attempt_row(work.work_id, attempt.number))
    step = _ATTEMPT_STEPS.get(type(event))
    if step is None:
        step = attempt_step(type(event))
    step(h, work, attempt, position, at, event)


def _outcome(
    work: WorkHistory, attempt: AttemptHistory, position: int, at: datetime, event: Event
) -> bool:
    """Record an attempt's outcome; whether the Work's record changed (a failure counted)."""
    close_segment(attempt, position, at)
    record = OutcomeRecord(kind=outcome_kind(event), position=position, at=at, epoch=attempt.epoch)
    if isinstance(event, _Outcome) and event.artifacts:
        record.artifacts = list(event.artifacts)
    if isinstance(event, AttemptFailed):
        record.error_code, record.error_message = event.error_code, event.error_message
        record.permanent, record.retry_at = event.permanent, event.retry_at
        record.retry_unknown = event.retry_unknown
    elif isinstance(event, AttemptTimedOut):
        record.error_code, record.error_message = "timed_out", "execution timeout"
    elif isinstance(event, AttemptLost):
        record.error_code, record.error_message = "lost", f"lease lost; {event.evidence}"
    attempt.outcomes.append(record)
    if record.kind in ("failed", "timed_out", "lost"):
        work.failures.append(
            FailureRecord(
                kind=record.kind,
                position=position,
                at=at,
                attempt=attempt.number,
                code=record.error_code or record.kind,
                message=record.error_message or "",
                permanent=record.permanent,
            )
        )
        return True
    return False


def _open_segment(attempt: AttemptHistory) -> SegmentRecord | None:
    segment = attempt.segments[-1] if attempt.segments else None
    return segment if segment is not None and segment.ended is None else None


def _invoked(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LaunchInvoked,
) -> None:
    if (segment := _open_segment(attempt)) is not None:
        segment.invoked, segment.isolated = position, event.isolated


def _phase_began(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LaunchPhaseBegan,
) -> None:
    if (segment := _open_segment(attempt)) is not None:
        segment.phases.append(PhaseRecord(name=event.phase, began=position, began_at=at))


def _phase_ended(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LaunchPhaseEnded,
) -> None:
    if (segment := _open_segment(attempt)) is None:
        return
    for phase in reversed(segment.phases):
        if phase.name == event.phase and phase.ended is None:
            phase.ended, phase.ended_at, phase.outcome = position, at, event.outcome
            break


def _renewed(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LeaseRenewed,
) -> None:
    renew(attempt, 1, position, event.lease_expires_at)


def renew(attempt: AttemptHistory, count: int, position: int, expiry: datetime) -> None:
    """`count` renewals of `attempt` in a row, the last at `position` (a bulk fold folds a
    run of them at once: `HistoryProjection.fold_page`)."""
    attempt.renewals += count
    attempt.renewed = position
    attempt.lease_expires_at = expiry


def _released(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: LeaseReleased,
) -> None:
    attempt.released, attempt.release_reason = position, event.reason


def _stop_confirmed(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: StopConfirmed,
) -> None:
    attempt.stop_confirmed = position


def _resumed(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: AttemptResumed,
) -> None:
    attempt.epoch, attempt.owner = event.epoch, event.owner
    attempt.lease_expires_at, attempt.deadline = event.lease_expires_at, event.deadline
    attempt.released = attempt.release_reason = None
    attempt.consumed.extend(event.consumed)
    attempt.segments.append(
        SegmentRecord(
            kind="resume", epoch=event.epoch, started=position, started_at=at, wake=event.wake
        )
    )


def _recovered(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: AttemptRecovered,
) -> None:
    close_segment(attempt, position, at)
    relaunch = event.mode == "relaunch"
    attempt.recoveries.append(
        RecoveryRecord(
            position=position,
            at=at,
            mode=event.mode,
            reason=event.reason,
            epoch=event.epoch,
            previous_owner=event.previous_owner,
        )
    )
    attempt.epoch, attempt.owner = event.epoch, event.owner
    attempt.lease_expires_at = event.lease_expires_at
    if event.deadline is not None:  # moved: a clock jump, measured by run time
        attempt.deadline = event.deadline
    attempt.released = attempt.release_reason = None
    attempt.segments.append(
        SegmentRecord(
            kind="relaunched" if relaunch else "recovered",
            epoch=event.epoch,
            started=position,
            started_at=at,
        )
    )


def _ended(
    h: HistoryProjection,
    work: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: Event,
) -> None:
    if _outcome(work, attempt, position, at, event):
        h.dirty.add(work_row(work.work_id))


def _marked(
    _: HistoryProjection,
    w: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: Event,
) -> None:
    attempt.marks.append(Mark(event.tag(), position, at))


_ATTEMPT_RULES: tuple[tuple[type | tuple[type, ...], Step], ...] = (
    (LaunchInvoked, _invoked),
    (LaunchPhaseBegan, _phase_began),
    (LaunchPhaseEnded, _phase_ended),
    (LeaseRenewed, _renewed),
    (LeaseReleased, _released),
    (StopConfirmed, _stop_confirmed),
    (AttemptResumed, _resumed),
    (AttemptRecovered, _recovered),
    ((_Outcome, AttemptLost), _ended),
)
_ATTEMPT_STEPS: dict[type, Step] = {}


def attempt_step(kind: type) -> Step:
    """The step for an attempt event of type `kind` (cached); an interruption ends it."""
    step = next((step for types, step in _ATTEMPT_RULES if issubclass(kind, types)), None)
    if step is None:
        tag = getattr(getattr(kind, "__struct_config__", None), "tag", None)
        step = _ended if tag == INTERRUPTED else _marked
    _ATTEMPT_STEPS[kind] = step
    return step
