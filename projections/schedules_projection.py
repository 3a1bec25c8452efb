"""The schedules projection: each schedule's definition, versions, boundary, pause and
quarantine, its newest accounted times (`recent`), and the schedule runner's leader
lease (held until it lapses, is found lost, or is released on a graceful stop).

A deterministic fold of the schedule events (`core.schedule.*`); every other event is
passed over. The boundary of a schedule is the last nominal time accounted for (by a fire,
a skipped range or a quarantine); the runner plans from it. Time comes only from events, so
a projection rebuilt from position 0 equals the live one (`digest()`).
"""

from __future__ import annotations

import hashlib
from datetime import datetime

import msgspec

from rota.domain.events import Event
from rota.domain.events.schedule import (
    LeaderAcquired,
    LeaderLost,
    LeaderReleased,
    LeaderRenewed,
    ScheduleDefined,
    ScheduleFired,
    SchedulePaused,
    ScheduleQuarantined,
    ScheduleRemoved,
    ScheduleResumed,
    ScheduleSkipped,
)

LEADER_STREAM = "schedules/leader"
_encoder = msgspec.json.Encoder(order="sorted")


def schedule_stream(name: str) -> str:
    return f"schedule/{name}"


CONFIG_SOURCE = "config"


def source_of(definition: ScheduleDefined) -> str:
    """Where a definition came from: `config` or `api`. A definition written before the
    source was recorded came from a config when its actor is `config` (what `rota
    schedule apply` and `rota run` recorded for a `[[schedules]]` table)."""
    if definition.source:
        return definition.source
    return CONFIG_SOURCE if definition.actor == CONFIG_SOURCE else "api"


def quarantine_boundary(event: ScheduleQuarantined, at: datetime | None) -> datetime:
    """The boundary a quarantine accounts up to: its own `boundary`, or the event's recorded
    time `at` when that is later (the store stamps an event after its decision), so a
    quarantine never leaves a boundary before the time it was recorded."""
    return event.boundary if at is None else max(event.boundary, at)


RECENT = 10  # the newest accounted entries a row keeps (for the health read)


class Recent(msgspec.Struct, frozen=True, kw_only=True):
    """One of a schedule's newest accounted nominal times (a skipped range: its last, with
    its count), as `rota.application.queries.schedule_health` reads them."""

    nominal: datetime
    status: str  # fired | skipped | quarantined
    count: int = 1
    reason: str = ""  # why skipped or quarantined
    work: str = ""  # fired: the Work it fed
    key: str = ""  # fired: its input's key


class ScheduleRow(msgspec.Struct, kw_only=True):
    """One schedule as the fold sees it."""

    name: str
    definition: ScheduleDefined
    versions: list[ScheduleDefined]  # every definition, oldest first
    stream_version: int
    boundary: datetime
    paused: bool = False
    removed: bool = False
    quarantined: str | None = None
    fired: int = 0
    skipped: int = 0
    last_fired: datetime | None = None
    ahead: list[datetime] = msgspec.field(default_factory=list)  # backfilled past boundary
    recent: list[Recent] = msgspec.field(default_factory=list)  # the newest RECENT, oldest first

    def remember(self, entry: Recent) -> None:
        self.recent.append(entry)
        if len(self.recent) > RECENT:
            del self.recent[0]

    @property
    def active(self) -> bool:
        return not self.removed and self.quarantined is None

    @property
    def source(self) -> str:
        """Where its current definition came from: `config` or `api` (`source_of`)."""
        return source_of(self.definition)


class Leader(msgspec.Struct, kw_only=True):
    owner: str = ""
    term: int = 0
    expires_at: datetime | None = None
    lost: bool = False
    stream_version: int = 0

    def holder(self, now: datetime) -> str | None:
        """Who holds the lease at `now` (None: nobody, it lapsed or was lost)."""
        if self.lost or self.expires_at is None or self.expires_at <= now:
            return None
        return self.owner


class SchedulesProjection:
    """Every schedule and the leader lease, folded from the log."""

    def __init__(self) -> None:
        self.position = 0
        self.schedules: dict[str, ScheduleRow] = {}
        self.leader = Leader()

    def apply(
        self, position: int, stream: str, version: int, at: datetime | None, event: Event
    ) -> None:
        """Fold one recorded event. The schedule events carry their own times; `at`, its
        recorded time, is read only for a quarantine (`quarantine_boundary`): callers pass
        it for those (`rota.application.timestamps.schedule_fold_time`) and may pass None
        for every other event."""
        if position <= self.position:
            return
        self.position = position
        if stream == LEADER_STREAM:
            self._leader(version, event)
            return
        if not stream.startswith("schedule/"):
            return
        if isinstance(event, ScheduleDefined):
            row = self.schedules.get(event.name)
            if row is None or row.removed:
                self.schedules[event.name] = ScheduleRow(
                    name=event.name,
                    definition=event,
                    versions=[event],
                    stream_version=version,
                    boundary=event.since,
                )
                return
            row.definition = event
            row.versions.append(event)
            row.boundary = max(row.boundary, event.since)
            row.quarantined = None
            row.paused = False
            row.stream_version = version
            return
        row = self.schedules.get(stream[len("schedule/") :])
        if row is None:
            return
        row.stream_version = version
        if isinstance(event, ScheduleFired):
            if event.backfill:
                if event.nominal > row.boundary:
                    row.ahead.append(event.nominal)
            elif not event.manual:
                row.boundary = max(row.boundary, event.nominal)
                row.remember(
                    Recent(
                        nominal=event.nominal, status="fired", work=event.work_id,
                        key=event.input_key,
                    )
                )  # fmt: skip
            row.fired += 1
            row.last_fired = event.nominal
        elif isinstance(event, ScheduleSkipped):
            row.boundary = max(row.boundary, event.last)
            row.skipped += event.count
            row.remember(
                Recent(nominal=event.last, status="skipped", count=event.count, reason=event.reason)
            )
        elif isinstance(event, ScheduleQuarantined):
            row.quarantined = event.reason
            row.boundary = max(row.boundary, quarantine_boundary(event, at))
            row.remember(Recent(nominal=row.boundary, status="quarantined", reason=event.reason))
        elif isinstance(event, SchedulePaused):
            row.paused = True
        elif isinstance(event, ScheduleResumed):
            row.paused = False
            row.quarantined = None
            row.boundary = max(row.boundary, event.since)
        elif isinstance(event, ScheduleRemoved):
            row.removed = True
        if row.ahead:
            row.ahead = [at for at in row.ahead if at > row.boundary]

    def _leader(self, version: int, event: Event) -> None:
        lease = self.leader
        lease.stream_version = version
        if isinstance(event, LeaderAcquired | LeaderRenewed):
            lease.owner, lease.term, lease.expires_at = event.owner, event.term, event.expires_at
            lease.lost = False
        elif isinstance(event, LeaderLost | LeaderReleased) and event.term == lease.term:
            lease.lost = True  # nobody holds it: the next runner takes it at once

    def active(self) -> list[ScheduleRow]:
        return [row for row in self.schedules.values() if not row.removed]

    def get(self, name: str) -> ScheduleRow | None:
        row = self.schedules.get(name)
        return None if row is None or row.removed else row

    def digest(self) -> str:
        """A canonical SHA-256 of the whole state: equal states, equal digests."""
        h = hashlib.sha256()
        for name in sorted(self.schedules):
            h.update(_encoder.encode(self.schedules[name]))
            h.update(b"\n")
        h.update(_encoder.encode(self.leader))
        h.update(f"|{self.position}".encode())
        return h.hexdigest()
