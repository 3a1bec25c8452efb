"""Events of schedules: definitions, fires, skipped nominal times, quarantine, leadership.

A schedule's own events go to its stream `schedule/<name>`; the runner's leader lease to
`schedules/leader`. Every nominal time of a schedule is accounted for by exactly one of
`core.schedule.fired` or a `core.schedule.skipped` / `core.schedule.quarantined` range
that covers it, so "why did 02:30 not run?" always has an answer in the log.
"""

from datetime import datetime
from typing import Any, ClassVar, Literal

import msgspec

from rota.domain.events.base import Event

SkipReason = Literal["outside_catchup_window", "coalesced", "overlap", "paused"]
CatchUp = Literal["none", "latest", "all"]
Overlap = Literal["skip", "buffer_one", "buffer_all", "cancel_other", "allow_all"]


class ScheduleDefined(Event, tag="core.schedule.defined", frozen=True, kw_only=True):
    """A schedule was defined or redefined (a new `schedule_version`).

    `spec` is the stored text of the spec (`every 15m` with an optional `+offset`, or a cron
    expression), re-parsed on every read: a row that no longer parses (tampered, or written
    by a newer rota: `spec_format` above this one's) is quarantined, never fatal. `anchor`
    is the time `every` schedules count their periods from; `since` the definition time:
    no nominal time before it is due. Fires already made keep the version they pinned.
    `source` is where the definition came from: `config` (a `[[schedules]]` table, applied
    by `rota schedule apply` or `rota run`: the config may prune it) or `api` (Python, the
    HTTP API); empty in events written before it was recorded, whose `actor` then tells
    (`config` is what applying a config recorded). `priority` and `keys` are the flow
    control (`rota.domain.flow`) of the Works its fires create; absent (0, none) in events
    written before they were recorded.
    """

    stream_pattern: ClassVar[str] = "schedule/<name>"

    name: str
    schedule_version: int
    spec: str
    timezone: str = "UTC"
    binding: str
    scope: str = "root"
    input: Any = None
    catchup: CatchUp = "latest"
    catchup_window_seconds: int = 3600
    max_catchup: int = 100
    overlap: Overlap = "skip"
    jitter_seconds: int = 0
    anchor: datetime
    since: datetime
    spec_format: int = 1
    actor: str = ""
    reason: str = ""
    source: str = ""
    priority: int = 0
    keys: list[str] = msgspec.field(default_factory=list)


class SchedulePaused(Event, tag="core.schedule.paused", frozen=True, kw_only=True):
    """A schedule was paused: its nominal times are skipped (`paused`) until resumed."""

    stream_pattern: ClassVar[str] = "schedule/<name>"

    name: str
    schedule_version: int
    actor: str = ""
    reason: str = ""


class ScheduleResumed(Event, tag="core.schedule.resumed", frozen=True, kw_only=True):
    """A paused or quarantined schedule was resumed; nominal times after `since` are due."""

    stream_pattern: ClassVar[str] = "schedule/<name>"

    name: str
    schedule_version: int
    since: datetime
    actor: str = ""
    reason: str = ""


class ScheduleRemoved(Event, tag="core.schedule.removed", frozen=True, kw_only=True):
    """A schedule was removed: it fires no more; fires already made are untouched."""

    stream_pattern: ClassVar[str] = "schedule/<name>"

    name: str
    schedule_version: int
    actor: str = ""
    reason: str = ""


class ScheduleFired(Event, tag="core.schedule.fired", frozen=True, kw_only=True):
    """A nominal time of a schedule fired: appended with the Work input it created.

    The input's key is this event's delivery identity, so a fire never exists without its
    input and never happens twice, whoever decided it. `nominal` is the schedule's time
    (UTC); `due` the nominal time plus the deterministic jitter. The fire pins the schedule
    version and binding it was made under. `manual` marks `trigger now` (identity
    `schedule/<name>/manual/<key>`, with its `actor`); `backfill` a fire made by a
    backfill (same identities as live fires).
    """

    stream_pattern: ClassVar[str] = "schedule/<name>"
    delivery_pattern: ClassVar[str | None] = "schedule/<name>/<nominal UTC RFC 3339>"

    name: str
    nominal: datetime
    due: datetime
    schedule_version: int
    binding: str
    work_id: str
    input_key: str
    manual: bool = False
    backfill: bool = False
    actor: str | None = None  # who triggered a manual fire (a token's name, `operator`)


class ScheduleSkipped(Event, tag="core.schedule.skipped", frozen=True, kw_only=True):
    """Nominal times of a schedule that did not fire, and why.

    Covers every nominal time of the schedule (under `schedule_version`) from `first` to
    `last` inclusive: `count` of them. Reasons: `outside_catchup_window` (older than the
    catch-up window when the runner came to them), `coalesced` (the catch-up policy fired a
    later one instead), `overlap` (the previous run was still pending or running),
    `paused`.
    """

    stream_pattern: ClassVar[str] = "schedule/<name>"
    delivery_pattern: ClassVar[str | None] = "schedule/<name>/skipped/<first>/<reason>"

    name: str
    schedule_version: int
    first: datetime
    last: datetime
    count: int
    reason: SkipReason


class ScheduleQuarantined(Event, tag="core.schedule.quarantined", frozen=True, kw_only=True):
    """A stored schedule could not be read (bad spec, unknown time zone or binding, a newer
    format): it fires no more until redefined or resumed, and every nominal time up to
    `boundary` (the decision's time plus a margin, past now) is accounted for by this
    event. The schedule's boundary is the later of `boundary` and this event's recorded
    time (`rota.projections.schedules_projection.quarantine_boundary`)."""

    stream_pattern: ClassVar[str] = "schedule/<name>"

    name: str
    schedule_version: int
    reason: str
    boundary: datetime


class LeaderAcquired(Event, tag="core.schedule.leader_acquired", frozen=True, kw_only=True):
    """A schedule runner took the leader lease (`term` counts the takes)."""

    stream_pattern: ClassVar[str] = "schedules/leader"

    owner: str
    term: int
    expires_at: datetime


class LeaderRenewed(Event, tag="core.schedule.leader_renewed", frozen=True, kw_only=True):
    """The leader renewed its lease."""

    stream_pattern: ClassVar[str] = "schedules/leader"

    owner: str
    term: int
    expires_at: datetime


class LeaderLost(Event, tag="core.schedule.leader_lost", frozen=True, kw_only=True):
    """A runner found its lease lapsed (it was paused past its TTL, or another took it)."""

    stream_pattern: ClassVar[str] = "schedules/leader"

    owner: str
    term: int
    reason: str = ""


class LeaderReleased(Event, tag="core.schedule.leader_released", frozen=True, kw_only=True):
    """The leader handed its lease back on a graceful stop: another runner takes it at
    once, without waiting for the TTL to lapse (one release per term)."""

    stream_pattern: ClassVar[str] = "schedules/leader"
    delivery_pattern: ClassVar[str | None] = "schedules/leader/<term>/released"

    owner: str
    term: int
    reason: str = ""


SCHEDULE_EVENTS: tuple[type[Event], ...] = (
    ScheduleDefined,
    SchedulePaused,
    ScheduleResumed,
    ScheduleRemoved,
    ScheduleFired,
    ScheduleSkipped,
    ScheduleQuarantined,
    LeaderAcquired,
    LeaderRenewed,
    LeaderLost,
    LeaderReleased,
)
