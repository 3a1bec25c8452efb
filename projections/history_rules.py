"""What each event does to a Work's history: the fold's routing, and inputs, claims, retries.

`route_for(type)` gives, for an event of a Work's stream, the function that applies it to
the projection (`HistoryProjection`) and the Work's `WorkHistory`: the rules here (inputs,
claims, retry timers and requests), then those of holds, gates and cancellation
(`history_holds`); any other event is about one attempt and goes on to that attempt's step
(`history_attempts`). The rules are ordered (the first whose types match wins, as an
isinstance chain would) and resolved once per concrete event type, so a long fold pays a
dict lookup per event. Every rule mutates the records it is given and records the attempt
rows it changes in `h.dirty`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from rota.domain.events import AttemptClaimed, InputAccepted, RetryArmed, RetryFired
from rota.domain.events.retry import _RetryRequest
from rota.projections.history_attempts import Route, about_attempt, attempt_row
from rota.projections.history_holds import HOLD_RULES
from rota.projections.records import (
    AttemptHistory,
    RequestRecord,
    RetryRecord,
    SegmentRecord,
    WorkHistory,
)

if TYPE_CHECKING:
    from rota.projections.history import HistoryProjection


# -- what an event does to a Work's history --------------------------------------------


def _input(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: InputAccepted
) -> None:
    work.inputs += 1
    work.last_input = position


def _armed(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: RetryArmed
) -> None:
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


def _fired(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: RetryFired
) -> None:
    for retry in work.retries:
        if retry.generation == event.generation and retry.fired is None:
            retry.fired, retry.fired_at = position, at


def _requested(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: _RetryRequest
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


def _claimed(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: AttemptClaimed
) -> None:
    work.attempts = max(work.attempts, event.attempt)
    key = attempt_row(work.work_id, event.attempt)
    segment = SegmentRecord(kind="start", epoch=event.epoch, started=position, started_at=at)
    if event.invoked is not None:  # its invoke marker, at the claim's own position
        segment.invoked, segment.isolated = position, event.invoked.isolated
    h.attempts[(work.work_id, event.attempt)] = AttemptHistory(
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
        segments=[segment],
    )
    h.dirty.add(key)


# -- routing: the route for each kind of event, resolved once per event type -----------
#
# `_RULES` maps an event type to what it does to a Work's history (an event about one
# attempt goes on to that attempt's step, `history_attempts`). They are ordered (the first
# whose types match wins, as an isinstance chain would) and cached, so a long fold pays a
# dict lookup per event.

_RULES: tuple[tuple[type | tuple[type, ...], Route], ...] = (
    (InputAccepted, _input),
    (AttemptClaimed, _claimed),
    (RetryArmed, _armed),
    (RetryFired, _fired),
    (_RetryRequest, _requested),
    *HOLD_RULES,
)
ROUTES: dict[type, Route] = {}


def route_for(kind: type) -> Route:
    """What an event of type `kind` does to a Work's history (cached in `ROUTES`)."""
    route = next((route for types, route in _RULES if issubclass(kind, types)), None)
    ROUTES[kind] = route or about_attempt
    return ROUTES[kind]
