"""A log read as a workload and as a record: what was submitted, and what happened to it.

`read_events` folds a log's events (an export's, or a simulated run's own) into a
`Recording`: each Work's submit (time, binding, scope, kind, trigger, safety, grants, the
inputs it carried), its later inputs, and each attempt's claim time, outcome and duration
(outcome time minus claim time, so a replay that launches at the claim ends its attempt
when the recorded one ended), plus the holds put on the Work and when it completed. The
same fold reads the what-if replay's log, so recorded and simulated figures are measured
by one ruler. Times are seconds since the log's first event.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rota.application.ports import RecordedEvent
from rota.application.ports.timestamps import parse_timestamp
from rota.domain.errors import RotaError
from rota.domain.events.admission import (
    Budget,
    BudgetHeld,
    BudgetsConfigured,
    GateHeld,
    WorkCancelled,
)
from rota.domain.events.control import ControlRequested
from rota.domain.events.execution import (
    AttemptClaimed,
    AttemptCompleted,
    AttemptFailed,
    AttemptHandedOff,
    AttemptParked,
    AttemptTimedOut,
    StopConfirmed,
)
from rota.domain.events.recovery import AttemptLost, HoldReleased, WorkHeld
from rota.domain.events.retry import ManualRetry, RetryRequested
from rota.domain.events.work import InputAccepted, WorkSubmitted, accepted_input
from rota.domain.policy import Binding, Registration
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.replay.export import open_export, read_header, read_records

HOLDS = (WorkHeld, BudgetHeld, GateHeld)
OPERATIONS = (WorkCancelled, ManualRetry, RetryRequested, HoldReleased, ControlRequested)
ENDS = (AttemptCompleted, AttemptFailed, AttemptHandedOff, AttemptParked, AttemptTimedOut)


class RecordingError(RotaError):
    """An export that cannot be read as a workload (missing, unreadable, no Work)."""


@dataclass
class Attempt:
    """One attempt as the log recorded it."""

    number: int
    claimed_at: float
    pool: str
    registration: Registration
    ended_at: float | None = None
    outcome: str | None = None  # completed, failed, timed_out, lost, handoff, waiting
    error_code: str = "failed"
    permanent: bool = False
    usage: dict[str, float] = field(default_factory=dict)
    data: Any = None
    stop_confirmed_at: float | None = None  # when a stop of it was verified

    @property
    def duration(self) -> float | None:
        """Claim to outcome (None: it never ended in the log)."""
        return None if self.ended_at is None else self.ended_at - self.claimed_at


@dataclass
class Input:
    at: float
    key: str
    payload: Any
    correlation_key: str | None


@dataclass
class Work:
    """One Work: its submit, inputs, attempts, holds and completion."""

    work_id: str
    binding: str
    scope: str
    kind: str
    trigger: str
    safety: str
    grants: tuple[str, ...]
    submitted_at: float
    inputs: list[Input] = field(default_factory=list)
    attempts: dict[int, Attempt] = field(default_factory=dict)
    holds: int = 0
    completed_at: float | None = None

    @property
    def first_claim(self) -> float | None:
        return self.attempts[min(self.attempts)].claimed_at if self.attempts else None


@dataclass
class Recording:
    """A log's Works and decisions (module docstring)."""

    start: datetime
    end: float = 0.0
    works: dict[str, Work] = field(default_factory=dict)  # in submit order
    claims: list[tuple[float, str, int]] = field(default_factory=list)  # (t, work, attempt)
    bindings: dict[str, Binding] = field(default_factory=dict)  # as last pinned
    registrations: dict[str, Registration] = field(default_factory=dict)
    budgets: tuple[Budget, ...] = ()
    # What operators did to Works: (t, cancel | retry | release_hold | interrupt, work, arg)
    operations: list[tuple[float, str, str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # a replay's refused commands
    lease_seconds: float = 60.0
    timeout_seconds: float = 3600.0
    max_segments: int = 50

    def order(self, until: float = math.inf) -> list[str]:
        """The admission order: attempts (`work/number`) in the order they were claimed,
        up to `until` seconds."""
        return [f"{work}/{attempt}" for t, work, attempt in self.claims if t <= until]


def read_export(path: Path) -> Recording:
    """The recording of the export at `path` (`rota export`'s format)."""
    if not path.is_file():
        raise RecordingError(f"export {path} does not exist (write one with `rota export`)")
    return read_events(_decoded(path), str(path))


def _decoded(path: Path) -> Iterator[RecordedEvent]:
    with open_export(path) as src:
        for row in read_records(src, read_header(src)):
            event = DEFAULT_CODEC.decode(row.type, row.type_version, row.data, row.position)
            yield RecordedEvent(
                row.position, row.stream, row.version, row.delivery_id, row.recorded_at, event
            )


def read_events(events: Iterable[RecordedEvent], source: str = "<log>") -> Recording:
    """Fold `events` (in position order) into a `Recording`."""
    found: Recording | None = None
    for recorded in events:
        when = parse_timestamp(recorded.recorded_at)
        if found is None:
            found = Recording(start=when)
        t = (when - found.start).total_seconds()
        found.end = max(found.end, t)
        _apply(found, recorded.event, t)
    if found is None or not found.works:
        raise RecordingError(f"{source}: the log submits no Work: nothing to replay")
    return found


def _apply(rec: Recording, event: Any, t: float) -> None:
    """Note one event (the kinds a what-if needs; the rest are skipped)."""
    if isinstance(event, WorkSubmitted):
        if event.work_id not in rec.works:
            rec.works[event.work_id] = Work(
                event.work_id, event.binding, event.scope, event.kind, event.trigger,
                event.safety, tuple(event.grants), t,
            )  # fmt: skip
            if event.input is not None:  # its first input, as an input accepted with it
                _input(rec, accepted_input(event), t)
    elif isinstance(event, InputAccepted):
        _input(rec, event, t)
    elif isinstance(event, AttemptClaimed):
        _claimed(rec, event, t)
    elif isinstance(event, (*ENDS, AttemptLost)):
        _ended(rec, event, t)
    elif isinstance(event, HOLDS):
        work = rec.works.get(event.work_id)
        if work is not None:
            work.holds += 1
    elif isinstance(event, StopConfirmed):
        work = rec.works.get(event.work_id)
        attempt = None if work is None else work.attempts.get(event.attempt)
        if attempt is not None and attempt.stop_confirmed_at is None:
            attempt.stop_confirmed_at = t
    elif isinstance(event, OPERATIONS):
        _operation(rec, event, t)
    elif isinstance(event, BudgetsConfigured):
        rec.budgets = tuple(event.budgets)


def _input(rec: Recording, event: InputAccepted | None, t: float) -> None:
    work = rec.works.get(event.work_id) if event is not None else None
    if event is not None and work is not None:
        work.inputs.append(Input(t, event.key, event.payload, event.correlation_key))


def _operation(rec: Recording, event: Any, t: float) -> None:
    """Note an operator's command (a replay performs it at the same moment)."""
    if isinstance(event, WorkCancelled):
        rec.operations.append((t, "cancel", event.work_id, ""))
    elif isinstance(event, ManualRetry | RetryRequested):
        rec.operations.append((t, "retry", event.work_id, ""))
    elif isinstance(event, HoldReleased):
        rec.operations.append((t, "release_hold", event.work_id, event.kind))
    elif isinstance(event, ControlRequested) and event.kind == "interrupt":
        rec.operations.append((t, "interrupt", event.work_id, ""))


def _claimed(rec: Recording, event: AttemptClaimed, t: float) -> None:
    pinned = event.pinned
    rec.bindings[pinned.binding.name] = pinned.binding
    rec.registrations[pinned.registration.name] = pinned.registration
    rec.lease_seconds, rec.max_segments = pinned.lease_seconds, pinned.max_segments
    rec.timeout_seconds = pinned.timeout_seconds
    rec.claims.append((t, event.work_id, event.attempt))
    work = rec.works.get(event.work_id)
    if work is not None and event.attempt not in work.attempts:
        registration = pinned.registration
        work.attempts[event.attempt] = Attempt(event.attempt, t, registration.pool, registration)


def _ended(rec: Recording, event: Any, t: float) -> None:
    work = rec.works.get(event.work_id)
    attempt = None if work is None else work.attempts.get(event.attempt)
    if work is None or attempt is None or attempt.ended_at is not None:
        return
    attempt.ended_at = t
    if isinstance(event, AttemptLost):
        attempt.outcome = "lost"
        return
    attempt.outcome = event.outcome_name
    attempt.usage, attempt.data = dict(event.usage), event.data
    if isinstance(event, AttemptFailed):
        attempt.error_code, attempt.permanent = event.error_code, event.permanent
    if attempt.outcome == "completed":
        work.completed_at = t


__all__ = ["Attempt", "Input", "Recording", "RecordingError", "Work", "read_events", "read_export"]
