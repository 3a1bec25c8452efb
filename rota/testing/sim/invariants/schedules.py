"""Invariants of schedules: each nominal time fires at most once and is accounted for once,
and, at rest, every nominal time already due is fired or skipped with a reason (seed 003,
and `rota.domain.events.schedule`'s rule that every nominal time has one answer).

The state mirrors what the runner plans from: each schedule's boundary (the last nominal
time accounted for), moved by its definition's `since`, live fires, skipped ranges,
quarantines and resumes (`rota.projections.schedules_projection`); backfilled nominal
times past the boundary are kept until the boundary passes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from rota.application.ports import RecordedEvent
from rota.domain.events import (
    ScheduleDefined,
    ScheduleFired,
    SchedulePaused,
    ScheduleQuarantined,
    ScheduleRemoved,
    ScheduleResumed,
    ScheduleSkipped,
)
from rota.domain.schedule_specs import SpecError, jitter, parse_stored, times_after
from rota.testing.sim.invariants.base import Invariant, Violation
from rota.testing.sim.invariants.model import Model


@dataclass(slots=True)
class Schedule:
    """One schedule as the invariants see it."""

    definition: ScheduleDefined
    boundary: datetime
    boundary_at: int  # the position that last moved the boundary
    removed: bool = False
    quarantined: bool = False
    ahead: dict[datetime, int] = field(default_factory=dict)  # backfilled past the boundary

    def advance(self, to: datetime, at: int) -> None:
        if to > self.boundary:
            self.boundary, self.boundary_at = to, at
            if self.ahead:
                self.ahead = {n: p for n, p in self.ahead.items() if n > to}


class ScheduleFiredOnce(Invariant):
    """Every schedule nominal time fires at most once and is accounted for by exactly one
    fire or skipped range.

    Seed 003 (003_651bbef6f4e1a956.txt): the quarantine must "advance the row's
    `next_fire_at` past now (the tick's skip-forward helper — the row must not spin)" and
    keep "the boundary guarantee the quarantine advance must preserve"; DESIGN.md: a
    schedule "fires as events with identity `schedule/<name>/<nominal UTC time>`" and "each
    nominal time fires once as an event, or is recorded skipped with its reason". So no
    nominal time fires twice (whatever its delivery identity), a live fire or a skipped
    range lies past the boundary already accounted for, and no skipped range covers a time a
    backfill fired. Manual fires (`trigger now`) have identities of their own.
    """

    name = "schedule_fired_once"
    events = (
        ScheduleDefined,
        ScheduleFired,
        ScheduleSkipped,
        ScheduleQuarantined,
        SchedulePaused,
        ScheduleResumed,
        ScheduleRemoved,
    )

    def __init__(self) -> None:
        self.schedules: dict[str, Schedule] = {}
        self.fired: dict[tuple[str, datetime], int] = {}  # (name, nominal) -> position

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        if isinstance(event, ScheduleDefined):
            row = self.schedules.get(event.name)
            if row is None or row.removed:
                self.schedules[event.name] = Schedule(event, event.since, at)
            else:
                row.definition, row.quarantined = event, False
                row.advance(event.since, at)
            return []
        row = self.schedules.get(getattr(event, "name", ""))
        if row is None:
            return []
        if isinstance(event, ScheduleFired):
            return self._fired(row, event, at)
        if isinstance(event, ScheduleSkipped):
            found = self._skipped(row, event, at)
            row.advance(event.last, at)
            return found
        if isinstance(event, ScheduleQuarantined):
            row.quarantined = True
            row.advance(max(event.boundary, recorded.recorded_time), at)
        elif isinstance(event, ScheduleResumed):
            row.quarantined = False
            row.advance(event.since, at)
        elif isinstance(event, ScheduleRemoved):
            row.removed = True
        return []

    def _fired(self, row: Schedule, event: ScheduleFired, at: int) -> list[Violation]:
        if event.manual:
            return []
        name, nominal = event.name, event.nominal
        shown = f"{name} at {nominal.isoformat()}"
        found: list[Violation] = []
        first = self.fired.get((name, nominal))
        if first is not None:
            found.append(self.violation(f"schedule {shown} fired twice", first, at))
        else:
            self.fired[(name, nominal)] = at
        if event.backfill:
            if nominal > row.boundary:
                row.ahead[nominal] = at
            return found
        if nominal <= row.boundary and first is None:
            found.append(
                self.violation(
                    f"schedule {shown} fired, but its times up to "
                    f"{row.boundary.isoformat()} were already accounted for",
                    row.boundary_at,
                    at,
                )
            )
        row.advance(nominal, at)
        return found

    def _skipped(self, row: Schedule, event: ScheduleSkipped, at: int) -> list[Violation]:
        shown = f"{event.first.isoformat()}..{event.last.isoformat()}"
        if event.first <= row.boundary:
            return [
                self.violation(
                    f"schedule {event.name} skipped {shown} ({event.reason}), but its times up "
                    f"to {row.boundary.isoformat()} were already accounted for",
                    row.boundary_at,
                    at,
                )
            ]
        covered = sorted(p for n, p in row.ahead.items() if event.first <= n <= event.last)
        if covered:
            return [
                self.violation(
                    f"schedule {event.name} skipped {shown} ({event.reason}) over a time a "
                    "backfill fired",
                    *covered,
                    at,
                )
            ]
        return []


class SchedulePastResolved(Invariant):
    """At rest, every nominal time already due of an active schedule is fired or skipped
    with a reason.

    Seed 003 (003_651bbef6f4e1a956.txt): "schedules never fire without a runner, and the runner dies
    on any hiccup rather than skipping/retrying" was the bug; the fix is a runner that survives, so
    every due time gets its answer. `rota.domain.events.schedule`: "Every nominal time of a schedule
    is accounted for by exactly one of `core.schedule.fired` or a `core.schedule.skipped` /
    `core.schedule.quarantined` range that covers it". Checked only at rest (the runner ran a pass
    at `now` holding the leader lease): the first nominal time past a schedule's boundary must not
    be due (nominal plus jitter) by `now`. Removed and quarantined schedules fire no more by design;
    a spec that no longer parses is the quarantine's business.
    """

    name = "schedule_past_resolved"

    def __init__(self, fired_once: ScheduleFiredOnce) -> None:
        self.fired_once = fired_once

    def at_rest(self, now: datetime, model: Model) -> list[Violation]:
        found: list[Violation] = []
        for name, row in sorted(self.fired_once.schedules.items()):
            if row.removed or row.quarantined:
                continue
            d = row.definition
            try:
                spec = parse_stored(d.spec, d.timezone)
            except SpecError:
                continue
            for nominal in times_after(spec, d.anchor, row.boundary):
                if nominal in row.ahead:
                    continue  # a backfill fired it already
                due = nominal + jitter(name, nominal, d.jitter_seconds)
                if due <= now:
                    found.append(
                        self.violation(
                            f"schedule {name}: nominal time {nominal.isoformat()} was due at "
                            f"{due.isoformat()}, before {now.isoformat()}, and neither fired "
                            "nor skipped",
                            row.boundary_at,
                        )
                    )
                break
        return found


@dataclass(slots=True)
class Coalesced:
    """A `coalesced` skip of a catch-up-`all` schedule, and what its append chose."""

    name: str
    recorded_at: str
    position: int
    count: int
    last: datetime
    max_catchup: int
    chosen: int = 0


class CatchupAllKeepsEvery(Invariant):
    """Under catch-up `all`, a due time is coalesced only when more than `max_catchup` were
    due together: the append that records the coalesced range also answers the newest
    `max_catchup` due times (each fired, or skipped for overlap).

    docs/schedules.md, "Policies": "`all` fires every due time in the window, the newest
    `max_catchup` (older: `coalesced`)"; DESIGN.md: "each nominal time fires once as an
    event, or is recorded skipped with its reason" (the reason must be the true one). A
    time fired before by a backfill counts as answered.
    """

    name = "catchup_all_keeps_every"
    events = (ScheduleDefined, ScheduleFired, ScheduleSkipped)

    def __init__(self) -> None:
        self.policy: dict[str, tuple[str, int]] = {}  # name -> (catchup, max_catchup)
        self.backfilled: dict[str, set[datetime]] = {}
        self.pending: list[Coalesced] = []

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event = recorded.event
        found = self._resolve(recorded.recorded_at)
        if isinstance(event, ScheduleDefined):
            self.policy[event.name] = (event.catchup, event.max_catchup)
        elif isinstance(event, ScheduleFired):
            if event.backfill:
                self.backfilled.setdefault(event.name, set()).add(event.nominal)
            elif not event.manual:
                self._count(event.name, recorded.recorded_at)
        elif isinstance(event, ScheduleSkipped):
            if event.reason == "overlap":
                self._count(event.name, recorded.recorded_at, event.count)
            elif event.reason == "coalesced" and self.policy.get(event.name, ("",))[0] == "all":
                limit = self.policy[event.name][1]
                self.pending.append(
                    Coalesced(
                        event.name, recorded.recorded_at, recorded.position, event.count,
                        event.last, limit,
                    )
                )  # fmt: skip
        return found

    def _count(self, name: str, recorded_at: str, n: int = 1) -> None:
        for item in self.pending:
            if item.name == name and item.recorded_at == recorded_at:
                item.chosen += n

    def _resolve(self, recorded_at: str | None) -> list[Violation]:
        """Judge the coalesced ranges whose append is over (a later append, or at rest)."""
        found: list[Violation] = []
        keep: list[Coalesced] = []
        for item in self.pending:
            if item.recorded_at == recorded_at:
                keep.append(item)
                continue
            ahead = sum(1 for n in self.backfilled.get(item.name, ()) if n > item.last)
            if item.chosen + ahead < item.max_catchup:
                found.append(
                    self.violation(
                        f"schedule {item.name} (catch-up all, max_catchup {item.max_catchup}) "
                        f"coalesced {item.count} due times while its append answered only "
                        f"{item.chosen + ahead} newer ones",
                        item.position,
                    )
                )
        self.pending = keep
        return found

    def at_rest(self, now: datetime, model: Model) -> list[Violation]:
        return self._resolve(None)
