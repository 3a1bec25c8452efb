"""Whether each schedule is running at its cadence: the one read behind doctor's
`schedule_health`, `/readyz`, the `rota_schedules_unhealthy` metric and the Schedules page.

A schedule is **stuck** when its newest `STUCK_AFTER` (3) accounted nominal times in a row
did not run: each was skipped `overlap` (the previous run still pending or running), or
fired and its input still waits in its Work (`pending`). The streak is counted from the
newest accounted time back and ends at the first fire that does not wait (an attempt took
its input, whatever its outcome) or a time skipped for another reason (`paused`,
`coalesced`, `outside_catchup_window`: a decision, not a pile-up). A schedule is
**quarantined** while its stored definition cannot be read. Either is unhealthy, with a
reason; every other schedule is `ok`. The newest
accounted times are the schedules projection's `ScheduleRow.recent` (the last ten
entries, a skipped range as one entry with its count), so the read is O(schedules).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec

from rota.application.service import SchedulerService
from rota.domain.state import WorkState
from rota.projections.held_works import is_quiet
from rota.projections.schedules_projection import Recent, ScheduleRow

STUCK_AFTER = 3  # consecutive newest nominal times that did not run make a schedule stuck
Health = Literal["ok", "stuck", "quarantined"]


class ScheduleHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One schedule's health: `status` (`ok`, `stuck` or `quarantined`), `reason` (None
    when ok) and `streak` (its newest nominal times in a row that did not run)."""

    name: str
    status: Health
    reason: str | None = None
    streak: int = 0


def _waiting(entry: Recent, works: Mapping[str, WorkState]) -> bool:
    """Whether a fire's input still waits in a Work that can start it. A Work no index
    names (`is_quiet`: nothing startable, no timer, no live attempt; an ended Work is one)
    holds nothing that waits: doctor's folded state keeps only the other Works, so both
    reads answer alike. A fire left in an ended Work shows as the `overlap` skips after it
    (its Work's pending input makes every later time overlap), which the streak counts."""
    work = works.get(entry.work)
    if work is None or is_quiet(work):
        return False
    return any(p.key == entry.key for p in work.pending)


def assess(row: ScheduleRow, works: Mapping[str, WorkState]) -> ScheduleHealth:
    """The health of one schedule (see the module docstring)."""
    if row.quarantined is not None:
        return ScheduleHealth(
            name=row.name, status="quarantined", reason=f"quarantined: {row.quarantined}"
        )
    streak = 0
    why: Counter[str] = Counter()
    for entry in reversed(row.recent):
        if entry.status == "skipped" and entry.reason == "overlap":
            streak += entry.count
            why["skipped (overlap)"] += entry.count
            continue
        if entry.status != "fired" or not _waiting(entry, works):
            break
        streak += 1
        why[f"pending in {entry.work}"] += 1
    if streak < STUCK_AFTER:
        return ScheduleHealth(name=row.name, status="ok", streak=streak)
    causes = ", ".join(f"{n} {what}" for what, n in why.most_common())
    return ScheduleHealth(
        name=row.name,
        status="stuck",
        reason=f"the newest {streak} nominal times did not run: {causes}",
        streak=streak,
    )


def assess_all(rows: Iterable[ScheduleRow], works: Mapping[str, WorkState]) -> list[ScheduleHealth]:
    """Every schedule's health, by name (removed ones are not in `rows`)."""
    return [assess(row, works) for row in sorted(rows, key=lambda r: r.name)]


def health(service: SchedulerService) -> list[ScheduleHealth]:
    """Every schedule's health at the log head, under the service's lock."""
    with service.lock:
        service.catch_up()
        return assess_all(service.schedules.projection.active(), service.projection.works)


def unhealthy(found: Iterable[ScheduleHealth]) -> list[ScheduleHealth]:
    return [h for h in found if h.status != "ok"]
