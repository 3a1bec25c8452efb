"""The schedules of the embedded API: `scheduler.schedule(...)` and `scheduler.schedules`.

```python
scheduler.schedule("nightly", binding="report", cron="0 3 * * *", timezone="Europe/Berlin")
scheduler.schedule("poll", binding="poll", every="15m", offset="5m", jitter="30s")
scheduler.schedules.pause("nightly", reason="maintenance")
scheduler.schedules.trigger_now("nightly")
scheduler.schedules.backfill("nightly", start, end)
scheduler.schedules.next("nightly", 10)     # the next nominal times, DST and jitter flags
scheduler.schedules.history("nightly")      # every nominal time: fired (Work, outcome) or skipped
scheduler.schedules.explain("nightly", at)  # why a fire did or did not happen
```

Every change is an event with its actor and reason (docs/schedules.md); the fires are made
by the host's cadence (`tick()`, `run()`), in its schedules slot.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Required, TypedDict, Unpack

import msgspec

from rota.application.schedules import ScheduleCommands
from rota.application.service import SchedulerService
from rota.domain.errors import DomainCode, Refusal
from rota.domain.schedules import rfc3339
from rota.projections.schedules import ScheduleRow
from rota.schedule_view_types import (
    BackfillResult,
    HistoryEntry,
    ScheduleExplanation,
    ScheduleVersion,
    ScheduleView,
    TriggeredFire,
    UpcomingTime,
)
from rota.schedule_views import explain, history, upcoming


class ScheduleDefinition(TypedDict, total=False):
    """The keywords of `scheduler.schedule(name, ...)` (`ScheduleCommands.define` says what
    each means; `binding` is required; `input` is any JSON value)."""

    binding: Required[str]
    every: str | None
    cron: str | None
    offset: str | None
    timezone: str
    input: Any
    scope: str
    catchup: str
    catchup_window: str | int
    max_catchup: int
    overlap: str
    jitter: str | int
    anchor: datetime | None
    actor: str
    reason: str


class Schedules:
    """Define, change, trigger and look at schedules over one scheduler service."""

    def __init__(self, service: SchedulerService) -> None:
        self.service = service

    @property
    def commands(self) -> ScheduleCommands:
        return self.service.schedules

    def define(self, name: str, **definition: Unpack[ScheduleDefinition]) -> ScheduleView:
        """Define or redefine a schedule (validated); returns its view. See
        `ScheduleCommands.define` for the keywords."""
        self.commands.define(name, **definition)
        return self.show(name)

    def apply(
        self, definitions: Mapping[str, Mapping[str, Any]], *, actor: str = "config"
    ) -> dict[str, int]:
        """Define every schedule of a configuration (`[[schedules]]`); name -> version.
        Unchanged ones append nothing."""
        return {
            name: self.commands.define(name, actor=actor, **dict(d))
            for name, d in sorted(definitions.items())
        }

    def pause(self, name: str, *, actor: str = "api", reason: str = "") -> None:
        self.commands.pause(name, actor=actor, reason=reason)

    def resume(self, name: str, *, actor: str = "api", reason: str = "") -> None:
        self.commands.resume(name, actor=actor, reason=reason)

    def remove(self, name: str, *, actor: str = "api", reason: str = "") -> None:
        self.commands.remove(name, actor=actor, reason=reason)

    def trigger_now(
        self, name: str, *, key: str | None = None, actor: str = "api"
    ) -> TriggeredFire | None:
        """Fire now under `schedule/<name>/manual/<key>` (default key: now); None when
        that key fired already."""
        recorded = self.commands.trigger_now(name, key=key, actor=actor)
        if recorded is None:
            return None
        return TriggeredFire(identity=recorded.delivery_id, position=recorded.position)

    def backfill(self, name: str, start: datetime, end: datetime) -> BackfillResult:
        """Fire every nominal time in [start, end] with the live identities."""
        fired, already = self.commands.backfill(name, start, end)
        return BackfillResult(fired=fired, already_fired=already)

    # -- looking ----------------------------------------------------------------------

    def _rows(self) -> list[ScheduleRow]:
        with self.service.lock:
            self.service.catch_up()
            return sorted(self.commands.projection.active(), key=lambda r: r.name)

    def list(self) -> builtins.list[ScheduleView]:
        return [view(row) for row in self._rows()]

    def show(self, name: str) -> ScheduleView:
        with self.service.lock:
            self.service.catch_up()
            row = self.commands.projection.get(name)
            if row is None:
                raise Refusal(f"no schedule {name!r}", code=DomainCode.UNKNOWN_SCHEDULE)
            versions = [
                ScheduleVersion(
                    version=d.schedule_version,
                    spec=d.spec,
                    timezone=d.timezone,
                    binding=d.binding,
                    since=rfc3339(d.since),
                    actor=d.actor,
                    reason=d.reason,
                )
                for d in row.versions
            ]
            return msgspec.structs.replace(view(row), versions=versions)

    def next(self, name: str, count: int = 10) -> builtins.list[UpcomingTime]:
        return upcoming(self.commands.row(name), count)

    def history(
        self,
        name: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> builtins.list[HistoryEntry]:
        return history(self.service, name, since=since, until=until, limit=limit)

    def explain(self, name: str, at: datetime) -> ScheduleExplanation:
        return explain(self.service, name, at)


def view(row: ScheduleRow) -> ScheduleView:
    d = row.definition
    state = "quarantined" if row.quarantined else "paused" if row.paused else "active"
    return ScheduleView(
        name=row.name,
        state=state,
        version=d.schedule_version,
        spec=d.spec,
        timezone=d.timezone,
        binding=d.binding,
        scope=d.scope,
        input=d.input,
        catchup=d.catchup,
        catchup_window_seconds=d.catchup_window_seconds,
        max_catchup=d.max_catchup,
        overlap=d.overlap,
        jitter_seconds=d.jitter_seconds,
        boundary=rfc3339(row.boundary),
        fired=row.fired,
        skipped=row.skipped,
        last_fired=rfc3339(row.last_fired) if row.last_fired else None,
        quarantined=row.quarantined,
    )
