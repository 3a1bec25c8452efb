"""The schedules of the embedded API: `scheduler.schedule(...)` and `scheduler.schedules`.

```python
scheduler.schedule("nightly", binding="report", cron="0 3 * * *", timezone="Europe/Berlin")
scheduler.schedule("poll", binding="poll", every="15m", offset="5m", jitter="30s")
scheduler.schedule("sync", binding="sync", every="1h", priority=5, keys=["tenant:acme"])
scheduler.schedules.pause("nightly", reason="maintenance")
scheduler.schedules.trigger_now("nightly")
scheduler.schedules.backfill("nightly", start, end)
scheduler.schedules.next("nightly", 10)     # the next nominal times, DST and jitter flags
scheduler.schedules.history("nightly")      # every nominal time: fired (Work, outcome) or skipped
scheduler.schedules.explain("nightly", at)  # why a fire did or did not happen
scheduler.schedules.apply(config.schedules)  # a config's [[schedules]] (source `config`)
scheduler.schedules.not_in_config(config.schedules)  # the config's, no longer in it
scheduler.schedules.prune(config.schedules)  # remove those
```

Every change is an event with its actor and reason (docs/schedules.md); the fires are made
by the host's cadence (`tick()`, `run()`), in its schedules slot.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Required, TypedDict, Unpack

from rota.application.commands.schedules import ScheduleCommands
from rota.application.queries.schedule_reads import ScheduleQueries
from rota.application.queries.schedule_views import (
    BackfillResult,
    ScheduleView,
    TriggeredFire,
)
from rota.projections.schedules_projection import CONFIG_SOURCE

PRUNE_REASON = "not in the config's [[schedules]] (pruned)"


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
    priority: int
    keys: Sequence[str]
    actor: str
    reason: str


class Schedules(ScheduleQueries):
    """Define, change, trigger and look at schedules over one scheduler service: the
    schedule commands, and the schedule queries it is."""

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
        """Define every schedule of a configuration (`[[schedules]]`), recorded with source
        `config`; name -> version. Unchanged ones append nothing. Schedules the config
        defined before and `definitions` lacks stay: `not_in_config` names them, `prune`
        removes them."""
        return {
            name: self.commands.define(name, actor=actor, source=CONFIG_SOURCE, **dict(d))
            for name, d in sorted(definitions.items())
        }

    def prune(
        self,
        definitions: Collection[str],
        *,
        actor: str = "config",
        reason: str = PRUNE_REASON,
    ) -> builtins.list[str]:
        """Remove (`core.schedule.removed`, in one append) every schedule a configuration
        defined that `definitions` (its `[[schedules]]`, or their names) lacks; schedules
        defined through the API stay. Returns the names removed."""
        return self.commands.prune(definitions, actor=actor, reason=reason)

    def pause(self, name: str, *, actor: str = "api", reason: str = "") -> None:
        self.commands.pause(name, actor=actor, reason=reason)

    def resume(self, name: str, *, actor: str = "api", reason: str = "") -> None:
        self.commands.resume(name, actor=actor, reason=reason)

    def remove(self, name: str, *, actor: str = "api", reason: str = "") -> None:
        self.commands.remove(name, actor=actor, reason=reason)

    def trigger_now(
        self,
        name: str,
        *,
        key: str | None = None,
        actor: str = "api",
        request_id: str | None = None,
    ) -> TriggeredFire | None:
        """Fire now under `schedule/<name>/manual/<key>` (default key: now); None when
        that key fired already. A `request_id` is the key, and a repeat returns the first
        fire (`repeated` True), in this process or after a restart; the id used for
        another request (another schedule, actor, or operation) is `request_id_reused`."""
        result = self.commands.trigger_request(name, key=key, actor=actor, request_id=request_id)
        if not result.recorded or (request_id is None and not result.written):
            return None
        recorded = result.recorded[0]
        return TriggeredFire(
            identity=recorded.delivery_id,
            position=recorded.position,
            repeated=result.written == 0,
        )

    def backfill(self, name: str, start: datetime, end: datetime) -> BackfillResult:
        """Fire every nominal time in [start, end] with the live identities."""
        fired, already = self.commands.backfill(name, start, end)
        return BackfillResult(fired=fired, already_fired=already)

    # -- looking: show, next, history and explain are the queries' own
    # (rota.application.queries.schedule_reads.ScheduleQueries)

    def list(self) -> builtins.list[ScheduleView]:
        """Every schedule's view, in name order."""
        return self.rows()
