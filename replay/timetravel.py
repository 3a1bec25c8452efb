"""Time travel: the scheduler, capacity and holds state as of a log position or a time.

`state_at(store, position=N)` folds the log from position 0 up to and including N;
`state_at(store, time=T)` folds up to the last event recorded at or before T (the highest
such position, so a clock that stepped back is judged by each event's own recorded time).
The fold reads time only from events, so the answer is what the scheduler knew then,
byte for byte, whenever it is asked. Nothing is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from rota.application.ports import EventStore
from rota.application.queries.work_views import json_value, work_view
from rota.application.timestamps import format_timestamp, parse_timestamp
from rota.domain.errors import RotaError
from rota.domain.policy import Settings
from rota.infrastructure.config import EntryCode
from rota.projections import BudgetsProjection, CapacityProjection, HoldsProjection
from rota.replay.audit import iter_raw
from rota.replay.errors import ReplayCode
from rota.replay.rebuild import folded
from rota.replay.retention_audit import notes as retention_notes


def position_at(store: EventStore, when: datetime) -> tuple[int, str | None]:
    """The highest position recorded at or before `when` (0: none) and its recorded time."""
    if when.tzinfo is None:
        raise RotaError(f"time {when.isoformat()} has no timezone", code=EntryCode.USAGE)
    target = format_timestamp(when)
    found, found_at = 0, None
    for record in iter_raw(store, page=10_000):
        at = record.recorded_at
        if len(at) == len(target) and at.endswith("Z"):
            earlier = at <= target  # the canonical form sorts as it reads
        else:
            earlier = parse_timestamp(at) <= when
        if earlier and record.position > found:
            found, found_at = record.position, at
    return found, found_at


def _recorded_at(store: EventStore, position: int) -> str | None:
    if position == 0:
        return None
    rows = store.read_raw(position - 1, 1)
    return rows[0].recorded_at if rows else None


def state_at(
    store: EventStore,
    *,
    position: int | None = None,
    time: datetime | str | None = None,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """The state as of `position` or `time` (exactly one): `{"position", "recorded_at",
    "scheduler": {"works", "ready", "live", "timers", "turns"}, "capacity", "holds",
    "budgets"}`. `settings` add the pool and scope limits to the capacity view."""
    if (position is None) == (time is None):
        raise RotaError("give exactly one of position or time", code=EntryCode.USAGE)
    head = store.head().position
    recorded_at: str | None
    if time is not None:
        when = parse_timestamp(time) if isinstance(time, str) else time
        position, recorded_at = position_at(store, when)
    else:
        assert position is not None
        if position < 0 or position > head:
            raise RotaError(
                f"position {position} is outside the log (0..{head})",
                code=ReplayCode.POSITION_OUTSIDE_LOG,
            )
        recorded_at = _recorded_at(store, position)
    scheduler, _ = folded(store, upto=position)
    works = scheduler.works
    capacity = CapacityProjection(scheduler).view(
        limit=settings.pool_limit if settings is not None else None,
        scope_limits=settings.scope_limits if settings is not None else None,
    )
    return {
        "position": position,
        "recorded_at": recorded_at,
        "head": head,
        "scheduler": {
            "works": {w: json_value(work_view(works[w])) for w in sorted(works)},
            "ready": [work.work_id for work in scheduler.ready_order()],
            "live": dict(sorted(scheduler.live.items())),
            "timers": {
                work_id: format_timestamp(due) for work_id, due in sorted(scheduler.timers.items())
            },
            "turns": scheduler.turns,
        },
        "capacity": capacity,
        "holds": HoldsProjection(scheduler).view(),
        "budgets": BudgetsProjection(scheduler).view(),
        # Prunes that rewrote rows up to here: their Works' inputs and results read as null.
        "pruned": [msgspec.to_builtins(n) for n in retention_notes(store, upto=position)],
    }


__all__ = ["position_at", "state_at"]
