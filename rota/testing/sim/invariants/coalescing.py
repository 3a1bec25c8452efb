"""The invariant of coalescing submits (debounce and unique Work, issue 30): a submit
that asked for either is never lost.

`NoSubmitLostByDebounce` follows the other invariants (`rota.testing.sim.invariants.base`):
the checker hands it the events it names, in position order. It keeps its own small fold
(the Works submitted with a coalescing key, the input keys each accepted, whether each has
started or been cancelled), as the shared `Model` keeps no inputs.
`no_submit_lost_by_debounce(events)` checks a whole log with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rota.application.ports import RecordedEvent
from rota.domain.events import (
    AttemptClaimed,
    CoalesceKeyTaken,
    GateRefused,
    InputAccepted,
    SubmitMerged,
    SubmitSuppressed,
    WorkCancelled,
    WorkSubmitted,
)
from rota.testing.sim.invariants.base import Invariant, Violation
from rota.testing.sim.invariants.model import Model


@dataclass
class _Coalesced:
    """What the invariant folds of one Work: its coalescing key, inputs, start, end."""

    kind: str | None
    key: str | None
    submitted: int
    inputs: set[str] = field(default_factory=set)
    started: int = 0
    cancelled: int = 0


class NoSubmitLostByDebounce(Invariant):
    """No coalescing submit is lost: each merged or suppressed submit names an existing
    Work holding its key, and each merged input is in that Work's inputs.

    DESIGN.md, "Idempotent delivery": "Each transition that can be repeated has a delivery
    identity"; issue 30 (field notes, section 1): "Nothing silently dropped: a suppressed or
    merged trigger is an event". A submit asking for debounce or unique is either its Work's
    own `core.work.submitted` (with its key taken by `core.submit.key_taken`) or a
    `core.submit.merged` / `core.submit.suppressed` naming a Work submitted before it on the
    same key. A merge names a window not yet started nor cancelled, and its input key is
    accepted on that Work (in the same append, before it); a suppression `until_terminal`
    names a Work not cancelled; a merge never moves a start past its window's `start_by`.
    """

    name = "no_submit_lost_by_debounce"
    events = (
        WorkSubmitted,
        InputAccepted,
        AttemptClaimed,
        WorkCancelled,
        GateRefused,
        CoalesceKeyTaken,
        SubmitMerged,
        SubmitSuppressed,
    )

    def __init__(self) -> None:
        self.works: dict[str, _Coalesced] = {}
        self.start_by: dict[str, object] = {}

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        if isinstance(event, WorkSubmitted):
            if event.work_id not in self.works:
                asked = event.debounce or event.unique
                kind = "debounce" if event.debounce else "unique" if event.unique else None
                self.works[event.work_id] = _Coalesced(kind, asked.key if asked else None, at)
                if event.start_by is not None:
                    self.start_by[event.work_id] = event.start_by
                if event.input is not None:  # its first input, accepted with it
                    self.works[event.work_id].inputs.add(event.input.key)
            return []
        work = self.works.get(getattr(event, "work_id", ""))
        if isinstance(event, InputAccepted):
            if work is not None:
                work.inputs.add(event.key)
            return []
        if isinstance(event, AttemptClaimed):
            if work is not None and not work.started:
                work.started = at
            return []
        if isinstance(event, WorkCancelled | GateRefused):
            if work is not None:
                work.cancelled = at
            return []
        if isinstance(event, CoalesceKeyTaken):
            if work is None or (work.kind, work.key) != (event.kind, event.key):
                return [self.violation(f"{event.work_id} took {event.kind} key {event.key!r} "
                                       "it was not submitted with", at)]  # fmt: skip
            return []
        assert isinstance(event, SubmitMerged | SubmitSuppressed)
        return self._coalesced(event, work, at)

    def _coalesced(
        self, event: SubmitMerged | SubmitSuppressed, work: _Coalesced | None, at: int
    ) -> list[Violation]:
        verb = "merged into" if isinstance(event, SubmitMerged) else "suppressed in favour of"
        what = f"{event.requested}'s submit {verb} {event.work_id}"
        if work is None:
            return [self.violation(f"{what}, a Work never submitted", at)]
        kind = "debounce" if isinstance(event, SubmitMerged) else "unique"
        if (work.kind, work.key) != (kind, event.key):
            return [self.violation(f"{what}, which holds no {kind} key {event.key!r}", at)]
        if isinstance(event, SubmitSuppressed):
            if event.until == "until_terminal" and work.cancelled:
                return [self.violation(f"{what}, cancelled already", work.cancelled, at)]
            return []
        if work.started or work.cancelled:
            since = work.started or work.cancelled
            return [self.violation(f"{what}, whose window had closed", since, at)]
        if event.input_key is not None and event.input_key not in work.inputs:
            return [self.violation(f"{what}: input {event.input_key!r} is not on it", at)]
        start_by = self.start_by.get(event.work_id)
        if start_by is not None and event.not_before > start_by:  # type: ignore[operator]
            return [self.violation(f"{what} moved its start past its max_wait", work.submitted, at)]
        return []


def no_submit_lost_by_debounce(events: Iterable[RecordedEvent]) -> list[Violation]:
    """`NoSubmitLostByDebounce` over a whole log (events in position order)."""
    invariant, model = NoSubmitLostByDebounce(), Model()
    found: list[Violation] = []
    for recorded in events:
        if isinstance(recorded.event, invariant.events):
            found.extend(invariant.observe(recorded, model))
    return found


__all__ = ["NoSubmitLostByDebounce", "no_submit_lost_by_debounce"]
