"""What holds, gates and cancellation do to a Work's history (its holds, held and released).

`HOLD_RULES` are the Work-level rules of these events, in the order `history_rules` tries
them: a hold (operator, budget or gate), its release, a gate's release, and the end of the
Work (cancelled, or refused by its gate), which releases every hold and ends a live or
parked attempt `cancelled`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from rota.domain.events.admission import (
    BudgetHeld,
    GateHeld,
    GateRefused,
    GateReleased,
    WorkCancelled,
)
from rota.domain.events.recovery import HoldReleased, WorkHeld
from rota.projections.history_attempts import Route, attempt_row
from rota.projections.records import HoldRecord, OutcomeRecord, WorkHistory, close_segment

if TYPE_CHECKING:
    from rota.projections.history import HistoryProjection


def _held(
    h: HistoryProjection,
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
    h: HistoryProjection,
    work: WorkHistory,
    position: int,
    at: datetime,
    event: GateRefused | WorkCancelled,
) -> None:
    work.cancelled, work.cancelled_at, work.cancel_reason = position, at, event.reason
    by = event.registration if isinstance(event, GateRefused) else event.by
    _release(work, position, at, f"cancelled by {by}", lambda hold: True)
    current = h.attempt(work.work_id, work.attempts) if work.attempts else None
    if current is None:
        return
    last = current.outcome
    if last is None or last.kind == "waiting":
        # A live or parked attempt ends `cancelled` with the Work (see evolve).
        close_segment(current, position, at)
        current.outcomes.append(
            OutcomeRecord(kind="cancelled", position=position, at=at, epoch=current.epoch)
        )
        h.dirty.add(attempt_row(work.work_id, current.number))


def _hold_released(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: HoldReleased
) -> None:
    _release(work, position, at, event.released_by, lambda hold: hold.kind == event.kind)


def _gate_released(
    h: HistoryProjection, work: WorkHistory, position: int, at: datetime, event: GateReleased
) -> None:
    holder = event.registration
    _release(work, position, at, holder, lambda hold: hold.kind == "gate" and hold.holder == holder)


HOLD_RULES: tuple[tuple[type | tuple[type, ...], Route], ...] = (
    ((WorkHeld, BudgetHeld, GateHeld), _held),
    (HoldReleased, _hold_released),
    (GateReleased, _gate_released),
    ((GateRefused, WorkCancelled), _cancelled),
)
