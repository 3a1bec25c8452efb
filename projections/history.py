"""The history projection: what happened to each Work and attempt, and at which positions.

Where the scheduler projection keeps the *current* state of a Work, this one keeps its
story, every fact with the log position (and recorded time) of the event that caused it:
per attempt its segments with their launch phases and invoke marker, renewals, releases,
recoveries, outcomes and stop evidence; per Work its holds (held and released), failures,
retry timers (armed, due, fired), manual retry requests and cancellation. `rota explain`
cites these positions.

A deterministic fold like the scheduler's: time only from events, nothing appended, so a
rebuild equals the live one (`digest()`). Persisted as rows `work/<id>` (a `WorkHistory`)
and `attempt/<id>/<n>` (an `AttemptHistory`); `apply` records the keys it changed in
`dirty`. With a `loader` (a function from a row key to its stored bytes) the projection
reads the rows an event touches on demand, so it can be kept current from a projection
store without holding every Work's history in memory (`evict()` after a save).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import msgspec

from rota.domain.events import (
    AttemptClaimed,
    AttemptFailed,
    AttemptResumed,
    AttemptTimedOut,
    Event,
    InputAccepted,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    LeaseRenewed,
    RetryArmed,
    RetryFired,
    StopConfirmed,
    WorkSubmitted,
)
from rota.domain.events.admission import (
    BudgetHeld,
    GateHeld,
    GateRefused,
    GateReleased,
    WorkCancelled,
)
from rota.domain.events.execution import _Outcome
from rota.domain.events.recovery import AttemptLost, AttemptRecovered, HoldReleased, WorkHeld
from rota.domain.events.retry import _RetryRequest

from .records import (
    INTERRUPTED,
    AttemptHistory,
    FailureRecord,
    HoldRecord,
    Mark,
    OutcomeRecord,
    PhaseRecord,
    RecoveryRecord,
    RequestRecord,
    RetryRecord,
    SegmentRecord,
    WorkHistory,
    close_segment,
    encoder,
    outcome_kind,
)

Loader = Callable[[str], bytes | None]
_work_decoder = msgspec.json.Decoder(WorkHistory)
_attempt_decoder = msgspec.json.Decoder(AttemptHistory)
WORK_ROW = "work/"
ATTEMPT_ROW = "attempt/"


def attempt_row(work_id: str, number: int) -> str:
    return f"{ATTEMPT_ROW}{work_id}/{number}"


class HistoryProjection:
    """Per Work and attempt, every fact with its log position; see the module docstring."""

    name = "history"
    version = 1

    def __init__(self, loader: Loader | None = None) -> None:
        self.position = 0
        self.works: dict[str, WorkHistory] = {}
        self.attempts: dict[tuple[str, int], AttemptHistory] = {}
        self.dirty: set[str] = set()
        self.loader = loader

    # -- reading rows (from memory, else from the loader) -----------------------------

    def work(self, work_id: str) -> WorkHistory | None:
        found = self.works.get(work_id)
        if found is None and self.loader is not None:
            raw = self.loader(WORK_ROW + work_id)
            if raw is not None:
                found = self.works[work_id] = _work_decoder.decode(raw)
        return found

    def attempt(self, work_id: str, number: int) -> AttemptHistory | None:
        found = self.attempts.get((work_id, number))
        if found is None and self.loader is not None:
            raw = self.loader(attempt_row(work_id, number))
            if raw is not None:
                found = self.attempts[(work_id, number)] = _attempt_decoder.decode(raw)
        return found

    def attempts_of(self, work_id: str) -> list[AttemptHistory]:
        work = self.work(work_id)
        count = work.attempts if work is not None else 0
        return [a for n in range(1, count + 1) if (a := self.attempt(work_id, n)) is not None]

    def evict(self) -> None:
        """Forget the rows held in memory (after they were saved); needs a loader."""
        if self.loader is None:
            raise ValueError("evict() would lose rows: this history has no loader")
        self.works.clear()
        self.attempts.clear()

    # -- the fold ---------------------------------------------------------------------

    def apply(self, position: int, stream: str, version: int, at: datetime, event: Event) -> None:
        if position <= self.position:
            return
        self.position = position
        if stream.startswith("turns/"):
            work_id, _, number = str(getattr(event, "execution", "")).rpartition("/")
            if number.isdigit() and (found := self.attempt(work_id, int(number))) is not None:
                found.marks.append(Mark(event.tag(), position, at))
                self.dirty.add(attempt_row(work_id, int(number)))
            return
        if not stream.startswith(WORK_ROW):
            return
        work_id = stream[len(WORK_ROW) :]
        work = self.work(work_id)
        if isinstance(event, WorkSubmitted):
            if work is None:
                self.works[work_id] = WorkHistory(
                    work_id=work_id, submitted=position, submitted_at=at
                )
                self.dirty.add(stream)
            return
        if work is None:
            return
        self.dirty.add(stream)
        self._apply(work, position, at, event)

    def fold_page(self, records: Sequence[Any], times: Sequence[datetime], stop: int) -> None:
        """Apply a page of recorded events (position order, each with its parsed recorded
        time) up to position `stop`, as `apply` would, for a bulk fold from the log: the
        common case (an event of a Work already known) inlined, and a run of lease
        renewals of one attempt folded as one (they only count, and move the last renewal's
        position and expiry): kept here per Work, applied before that Work's next other
        event and at the end of the page."""
        works, attempts, dirty, routes = self.works, self.attempts, self.dirty, _ROUTES
        renewals: dict[str, tuple[int, int, int, datetime]] = {}
        for record, at in zip(records, times, strict=True):
            position = record.position
            if position > stop:
                break
            stream, event = record.stream, record.event
            work_id = stream[5:] if stream.startswith(WORK_ROW) else ""
            renewal = type(event) is LeaseRenewed and position > self.position
            if work_id in renewals:
                number, count, _, _ = renewals[work_id]
                if renewal and number == event.attempt:
                    renewals[work_id] = (number, count + 1, position, event.lease_expires_at)
                    self.position = position
                    continue
                self._renewed(work_id, *renewals.pop(work_id))
            work = works.get(work_id) if work_id else None
            if work is None or position <= self.position or type(event) is WorkSubmitted:
                self.apply(position, stream, record.version, at, event)
                continue
            self.position = position
            dirty.add(stream)
            if renewal and (work_id, event.attempt) in attempts:
                renewals[work_id] = (event.attempt, 1, position, event.lease_expires_at)
                continue
            route = routes.get(type(event))
            if route is None:
                route = _route(type(event))
            route(self, work, position, at, event)
        for work_id, pending in renewals.items():
            self._renewed(work_id, *pending)

    def _renewed(
        self, work_id: str, number: int, count: int, position: int, expiry: datetime
    ) -> None:
        """`count` renewals of attempt `number`, the last at `position` (see `fold_page`)."""
        attempt = self.attempts[(work_id, number)]
        attempt.renewals += count
        attempt.renewed = position
        attempt.lease_expires_at = expiry
        self.dirty.add(attempt_row(work_id, number))

    def settle(self) -> None:
        """Nothing to derive after `fold_page` (the history keeps no indices)."""

    def _apply(self, work: WorkHistory, position: int, at: datetime, event: Event) -> None:
        kind = type(event)
        route = _ROUTES.get(kind)
        if route is None:
            route = _route(kind)
        route(self, work, position, at, event)

    def _input(self, work: WorkHistory, position: int, at: datetime, event: InputAccepted) -> None:
        work.inputs += 1
        work.last_input = position

    def _armed(self, work: WorkHistory, position: int, at: datetime, event: RetryArmed) -> None:
        failure = work.failures[-1].position if work.failures else None
        work.retries.append(
            RetryRecord(
                generation=event.generation,
                armed=position,
                armed_at=at,
                due_at=event.due_at,
                attempt=event.attempt,
                failure=failure,
                hinted=event.hinted,
            )
        )

    def _fired(self, work: WorkHistory, position: int, at: datetime, event: RetryFired) -> None:
        for retry in work.retries:
            if retry.generation == event.generation and retry.fired is None:
                retry.fired, retry.fired_at = position, at

    def _requested(
        self, work: WorkHistory, position: int, at: datetime, event: _RetryRequest
    ) -> None:
        work.requests.append(
            RequestRecord(
                type=event.tag(),
                position=position,
                at=at,
                boundary=event.boundary,
                requested_by=event.requested_by,
                reason=event.reason,
            )
        )

    def _hold_released(
        self, work: WorkHistory, position: int, at: datetime, event: HoldReleased
    ) -> None:
        self._release(work, position, at, event.released_by, lambda h: h.kind == event.kind)

    def _gate_released(
        self, work: WorkHistory, position: int, at: datetime, event: GateReleased
    ) -> None:
        holder = event.registration
        self._release(work, position, at, holder, lambda h: h.kind == "gate" and h.holder == holder)

    def _about_attempt(self, work: WorkHistory, position: int, at: datetime, event: Event) -> None:
        number = getattr(event, "attempt", None)
        attempt = self.attempt(work.work_id, number) if isinstance(number, int) else None
        if attempt is None:
            work.marks.append(Mark(event.tag(), position, at))
            return
        self.dirty.add(attempt_row(work.work_id, attempt.number))
        step = _ATTEMPT_STEPS.get(type(event))
        if step is None:
            step = _attempt_step(type(event))
        step(self, work, attempt, position, at, event)

    def _claimed(
        self, work: WorkHistory, position: int, at: datetime, event: AttemptClaimed
    ) -> None:
        work.attempts = max(work.attempts, event.attempt)
        key = attempt_row(work.work_id, event.attempt)
        self.attempts[(work.work_id, event.attempt)] = AttemptHistory(
            work_id=work.work_id,
            number=event.attempt,
            claimed=position,
            claimed_at=at,
            owner=event.owner,
            epoch=event.epoch,
            lease_expires_at=event.lease_expires_at,
            deadline=event.deadline,
            consumed=list(event.consumed),
            trigger=event.trigger,
            segments=[
                SegmentRecord(kind="start", epoch=event.epoch, started=position, started_at=at)
            ],
        )
        self.dirty.add(key)

    def _held(
        self,
        work: WorkHistory,
        position: int,
        at: datetime,
        event: WorkHeld | BudgetHeld | GateHeld,
    ) -> None:
        if isinstance(event, BudgetHeld):
            kind, holder = "budget", f"budget:{event.budget}"
        elif isinstance(event, GateHeld):
            kind, holder = "gate", event.registration
        else:
            kind, holder = event.kind, event.holder
        work.holds.append(
            HoldRecord(kind=kind, reason=event.reason, holder=holder, held=position, held_at=at)
        )

    @staticmethod
    def _release(
        work: WorkHistory,
        position: int,
        at: datetime,
        by: str,
        which: Callable[[HoldRecord], bool],
    ) -> None:
        for hold in work.holds:
            if hold.released is None and which(hold):
                hold.released, hold.released_at, hold.released_by = position, at, by

    def _cancelled(
        self, work: WorkHistory, position: int, at: datetime, event: GateRefused | WorkCancelled
    ) -> None:
        work.cancelled, work.cancelled_at, work.cancel_reason = position, at, event.reason
        by = event.registration if isinstance(event, GateRefused) else event.by
        self._release(work, position, at, f"cancelled by {by}", lambda h: True)
        current = self.attempt(work.work_id, work.attempts) if work.attempts else None
        if current is None:
            return
        last = current.outcome
        if last is None or last.kind == "waiting":
            # A live or parked attempt ends `cancelled` with the Work (see evolve).
            close_segment(current, position, at)
            current.outcomes.append(
                OutcomeRecord(kind="cancelled", position=position, at=at, epoch=current.epoch)
            )
            self.dirty.add(attempt_row(work.work_id, current.number))

    @staticmethod
    def _ended(
        work: WorkHistory, attempt: AttemptHistory, position: int, at: datetime, event: Event
    ) -> None:
        close_segment(attempt, position, at)
        record = OutcomeRecord(
            kind=outcome_kind(event), position=position, at=at, epoch=attempt.epoch
        )
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

    # -- digest and persistence ---------------------------------------------------------

    def row(self, key: str) -> bytes | None:
        """The encoded value of one row (None: no such row)."""
        if key.startswith(WORK_ROW):
            found: Any = self.work(key[len(WORK_ROW) :])
        elif key.startswith(ATTEMPT_ROW):
            work_id, _, number = key[len(ATTEMPT_ROW) :].rpartition("/")
            found = self.attempt(work_id, int(number)) if number.isdigit() else None
        else:
            raise KeyError(f"no row {key!r} in the history projection")
        return None if found is None else encoder.encode(found)

    def row_keys(self) -> Iterator[str]:
        """The keys of the rows held in memory."""
        for work_id in self.works:
            yield WORK_ROW + work_id
        for work_id, number in self.attempts:
            yield attempt_row(work_id, number)

    def digest(self) -> str:
        """A canonical SHA-256 of every row (in memory) and the position."""
        rows = ((key, self.row(key) or b"") for key in sorted(self.row_keys()))
        return self.digest_rows(rows, self.position)

    @staticmethod
    def digest_rows(rows: Iterable[tuple[str, bytes]], position: int) -> str:
        """The digest of a history projection at `position` whose encoded rows are `rows`
        (key and value, in key order)."""
        h = hashlib.sha256()
        for key, value in rows:
            h.update(key.encode() + b"\n")
            h.update(value)
            h.update(b"\n")
        h.update(f"|{position}".encode())
        return h.hexdigest()

    @classmethod
    def from_rows(
        cls, position: int, rows: Iterable[tuple[str, bytes]], loader: Loader | None = None
    ) -> HistoryProjection:
        self = cls(loader)
        self.position = position
        for key, value in rows:
            if key.startswith(WORK_ROW):
                work = _work_decoder.decode(value)
                self.works[work.work_id] = work
            elif key.startswith(ATTEMPT_ROW):
                attempt = _attempt_decoder.decode(value)
                self.attempts[(attempt.work_id, attempt.number)] = attempt
            else:
                raise KeyError(f"no row {key!r} in the history projection")
        return self


# -- routing: the step for each kind of event, resolved once per event type -------------
#
# `_ROUTES` maps an event type to what it does to a Work's history; `_ATTEMPT_STEPS`, for an
# event about one attempt, to what it does to that attempt. Both are resolved from ordered
# rules (the first whose types match wins, as an isinstance chain would) and cached, so a
# long fold pays a dict lookup per event.

Route = Callable[[HistoryProjection, WorkHistory, int, datetime, Any], None]
Step = Callable[[HistoryProjection, WorkHistory, AttemptHistory, int, datetime, Any], None]


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
    attempt.renewals += 1
    attempt.renewed = position
    attempt.lease_expires_at = event.lease_expires_at


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
    _: HistoryProjection,
    work: WorkHistory,
    attempt: AttemptHistory,
    position: int,
    at: datetime,
    event: Event,
) -> None:
    HistoryProjection._ended(work, attempt, position, at, event)


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


def _attempt_step(kind: type) -> Step:
    """The step for an attempt event of type `kind` (cached); an interruption ends it."""
    step = next((step for types, step in _ATTEMPT_RULES if issubclass(kind, types)), None)
    if step is None:
        tag = getattr(getattr(kind, "__struct_config__", None), "tag", None)
        step = _ended if tag == INTERRUPTED else _marked
    _ATTEMPT_STEPS[kind] = step
    return step


_RULES: tuple[tuple[type | tuple[type, ...], Route], ...] = (
    (InputAccepted, HistoryProjection._input),
    (AttemptClaimed, lambda h, work, position, at, event: h._claimed(work, position, at, event)),
    (RetryArmed, HistoryProjection._armed),
    (RetryFired, HistoryProjection._fired),
    (_RetryRequest, HistoryProjection._requested),
    ((WorkHeld, BudgetHeld, GateHeld), lambda h, w, position, at, e: h._held(w, position, at, e)),
    (HoldReleased, HistoryProjection._hold_released),
    (GateReleased, HistoryProjection._gate_released),
    (
        (GateRefused, WorkCancelled),
        lambda h, work, position, at, event: h._cancelled(work, position, at, event),
    ),
)
_ROUTES: dict[type, Route] = {}


def _route(kind: type) -> Route:
    """What an event of type `kind` does to a Work's history (cached)."""
    route = next((route for types, route in _RULES if issubclass(kind, types)), None)
    _ROUTES[kind] = route or HistoryProjection._about_attempt
    return _ROUTES[kind]
