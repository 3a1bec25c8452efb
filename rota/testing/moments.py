"""The due moments of a scheduler: the next instants at which its cadence has work to do.

When nothing runs, a scheduler acts again only when virtual time reaches one of them:
- a **retry timer** (`core.retry.armed`'s `due_at`; the projection's timers, read at the
  log head through `queries.state.at_head`);
- a **schedule's next due time** (the next nominal time after its boundary, plus its
  jitter: `schedules.next(name, 1)`), paused schedules included (a paused schedule records
  its due times `paused`, at those times).

Running attempts' lease renewals and deadlines are not due moments here: the kit never
moves time while an attempt runs. Nor is the schedule runner's leader lease (renewed every
third of `lease_seconds`): the kit hands the lease back before it skips time, so the
next pass takes it again at once, instead of a month of renewals every 20 seconds.
Budget windows are not either: a budget hold stays until released, even when a new window
begins (docs/guide.md, "Budgets"), so nothing is due when a window turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rota.application.ports.timestamps import parse_timestamp
from rota.projections.scheduler import SchedulerProjection
from rota.scheduler import Scheduler


@dataclass(frozen=True, order=True)
class DueMoment:
    """An instant at which the scheduler has something to do, and what (in words)."""

    at: datetime
    what: str
    paused: bool = False  # a paused schedule's due time: it records a skip, fires nothing


def _first_timer(projection: SchedulerProjection, now: datetime) -> tuple[datetime, str] | None:
    """The soonest retry timer and its Work (read under the service's lock)."""
    return min(((due, work) for work, due in projection.timers.items()), default=None)


def due_moments(scheduler: Scheduler) -> list[DueMoment]:
    """Every kind of due moment's soonest instant, soonest first (the retry timers' first,
    and each schedule's next due time)."""
    found: list[DueMoment] = []
    timer = scheduler.queries.state.at_head(_first_timer).value
    if timer is not None:
        found.append(DueMoment(timer[0], f"the retry timer of Work {timer[1]!r}"))
    for view in scheduler.schedules.list():
        if view.state == "quarantined":
            continue  # it fires nothing until released, and has no next time
        upcoming = scheduler.schedules.next(view.name, 1)
        if upcoming:
            due = upcoming[0]
            found.append(
                DueMoment(
                    parse_timestamp(due.due),
                    f"schedule {view.name!r} (nominal time {due.nominal})",
                    paused=due.paused,
                )
            )
    return sorted(found)


__all__ = ["DueMoment", "due_moments"]
