"""The typed values the schedules facade returns: frozen msgspec Structs, field by field
the JSON of `rota schedule ... --json` and of the HTTP API (docs/schedules.md).

A field typed `... | UnsetType` is absent from the JSON when the view has no value for
it (a history row of a skipped time has no `work`); `msgspec.json.encode(view)` omits it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType


class ScheduleVersion(msgspec.Struct, frozen=True, kw_only=True):
    """One definition of a schedule (`show(name).versions`)."""

    version: int
    spec: str
    timezone: str
    binding: str
    since: str
    actor: str
    reason: str
    source: str


class ScheduleView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A schedule as `list()` and `show(name)` (with `versions`) return it."""

    name: str
    state: str
    version: int
    spec: str
    timezone: str
    binding: str
    scope: str
    source: str
    input: Any
    catchup: str
    catchup_window_seconds: int
    max_catchup: int
    overlap: str
    jitter_seconds: int
    priority: int  # the flow control of the Works its fires create
    keys: list[str]
    boundary: str
    fired: int
    skipped: int
    last_fired: str | None
    quarantined: str | None
    # Its health (rota.application.queries.schedule_health): `stuck` or `quarantined` with
    # the reason; left out of the JSON while `ok`.
    health: str = "ok"
    health_reason: str | None = None
    versions: list[ScheduleVersion] | UnsetType = UNSET


class ScheduleApplyPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What applying a config's `[[schedules]]` would do (`apply_plan`, `rota schedule
    apply --dry-run`): the names it would define (`new`), redefine (`changed`) or leave
    as they are (`unchanged`), and the schedules a config defined that this config does not
    have (`not_in_config`: what `--prune` removes; never one defined through the API)."""

    new: list[str]
    changed: list[str]
    unchanged: list[str]
    not_in_config: list[str]


class UpcomingTime(msgspec.Struct, frozen=True, kw_only=True):
    """One next nominal time (`next(name, n)`)."""

    nominal: str
    local: str
    due: str
    jitter_seconds: float
    dst: str | None
    paused: bool


class HistoryEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One accounted nominal time (`history(name)`): fired, skipped or quarantined."""

    nominal: str
    last: str | UnsetType = UNSET
    count: int | UnsetType = UNSET
    status: str
    reason: str | UnsetType = UNSET
    position: int
    manual: bool | UnsetType = UNSET
    backfill: bool | UnsetType = UNSET
    version: int | UnsetType = UNSET
    work: str | UnsetType = UNSET
    attempt: str | UnsetType = UNSET
    outcome: str | UnsetType | None = UNSET


class ScheduleExplanation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Why the nominal time at (or last before) a time fired or did not (`explain`)."""

    schedule: str
    at: str
    version: int
    nominal: str | UnsetType = UNSET
    note: str | UnsetType = UNSET
    due: str | UnsetType = UNSET
    dst: str | UnsetType | None = UNSET
    verdict: str
    reason: str | UnsetType = UNSET
    position: int | UnsetType = UNSET
    work: str | UnsetType = UNSET
    attempt: str | UnsetType = UNSET
    outcome: str | UnsetType | None = UNSET
    why: str


class TriggeredFire(msgspec.Struct, frozen=True, kw_only=True):
    """A manual fire (`trigger_now`): its delivery identity and log position; `repeated`
    when a request id found it fired by an earlier call (nothing appended)."""

    identity: str | None
    position: int
    repeated: bool = False


class BackfillResult(msgspec.Struct, frozen=True, kw_only=True):
    """What `backfill` did: the times fired now and those that had fired already."""

    fired: int
    already_fired: int
