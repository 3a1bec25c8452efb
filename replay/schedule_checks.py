"""Doctor's schedule checks: every nominal time accounted for, projection agreement,
quarantine, health (no schedule stuck: `rota.application.queries.schedule_health`).

`account(store)` walks each schedule's stream on its own terms (not through the
projection): it re-parses every definition, enumerates the nominal times of each stretch
the schedule was active under one version, and checks that each is accounted for exactly
once, by a `core.schedule.fired` or a `core.schedule.skipped` range (whose `count` must
match the times it covers); a quarantine covers the time from its boundary until the
schedule is redefined or resumed. It also derives each schedule's boundary, which
`check_drift` compares with the schedules projection's fold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

import msgspec

from rota.application.ports import EventStore, RecordedEvent
from rota.application.queries.schedule_health import STUCK_AFTER, assess_all, unhealthy
from rota.application.timestamps import schedule_fold_time
from rota.domain.events.schedule import (
    ScheduleDefined,
    ScheduleFired,
    ScheduleQuarantined,
    ScheduleRemoved,
    ScheduleResumed,
    ScheduleSkipped,
)
from rota.domain.schedule_specs import Spec, SpecError, parse_stored, rfc3339, times_between
from rota.domain.state import WorkState
from rota.projections.schedules_projection import SchedulesProjection, quarantine_boundary
from rota.replay.doctor_report import Check

CHECK_LIMIT = 200_000  # nominal times one stretch is enumerated to at most
HEALTH_ADVICE = (
    "a stuck schedule's runs are not taking its fires: look at its Work ('rota schedule "
    "history NAME', 'rota work show WORK'): a run that does not end, a pool or budget that "
    "admits nothing; cancelling that Work ends the run and the next fire starts a fresh one"
)
RELEASE_ADVICE = (
    "fix what the quarantine names, then release it: 'rota schedule apply' with a valid "
    "definition, or 'rota schedule resume NAME' (or remove it: 'rota schedule remove NAME')"
)


class Accounting(msgspec.Struct):
    """What the walk of the schedule streams found."""

    schedules: int = 0
    checked: int = 0
    problems: list[str] = msgspec.field(default_factory=list)
    boundaries: dict[str, datetime] = msgspec.field(default_factory=dict)
    quarantined: dict[str, str] = msgspec.field(default_factory=dict)


class _Walk:
    def __init__(self, name: str, out: Accounting) -> None:
        self.name, self.out = name, out
        self.spec: Spec | None = None
        self.anchor = datetime.min
        self.boundary: datetime | None = None
        self.low: datetime | None = None  # where the current stretch began
        self.seen: dict[datetime, str] = {}
        self.quarantined = False

    def problem(self, text: str) -> None:
        self.out.problems.append(f"schedule {self.name}: {text}")

    def close_stretch(self) -> None:
        """Every nominal time of the stretch (low, boundary] must be accounted for."""
        if self.spec is None or self.low is None or self.boundary is None or self.quarantined:
            return
        times = times_between(self.spec, self.anchor, self.low, self.boundary, CHECK_LIMIT)
        self.out.checked += len(times)
        missing = [t for t in times if t not in self.seen]
        if missing:
            shown = ", ".join(rfc3339(t) for t in missing[:3])
            self.problem(f"{len(missing)} nominal time(s) unaccounted for: {shown}")

    def restart(self, since: datetime) -> None:
        self.close_stretch()
        self.boundary = since if self.boundary is None else max(self.boundary, since)
        self.low = self.boundary
        self.seen = {}

    def mark(self, at: datetime, how: str) -> None:
        if at in self.seen:
            self.problem(f"{rfc3339(at)} accounted for twice ({self.seen[at]}, then {how})")
        self.seen[at] = how

    def event(self, r: RecordedEvent) -> None:
        e = r.event
        if isinstance(e, ScheduleDefined):
            self.restart(e.since)
            self.quarantined = False  # a redefinition releases a quarantine
            self.out.quarantined.pop(self.name, None)
            try:
                self.spec, self.anchor = parse_stored(e.spec, e.timezone), e.anchor
            except SpecError:
                self.spec = None
        elif isinstance(e, ScheduleFired):
            if not (e.manual or e.backfill):
                self.mark(e.nominal, f"fired at {r.position}")
                self.boundary = max(self.boundary or e.nominal, e.nominal)
        elif isinstance(e, ScheduleSkipped):
            self.skipped(e, r.position)
        elif isinstance(e, ScheduleQuarantined):
            self.close_stretch()
            self.quarantined = True
            until = quarantine_boundary(e, schedule_fold_time(r))
            self.boundary = max(self.boundary or until, until)
            self.out.quarantined[self.name] = e.reason
        elif isinstance(e, ScheduleResumed):
            if self.quarantined:
                self.quarantined = False
                self.out.quarantined.pop(self.name, None)
                self.boundary = max(self.boundary or e.since, e.since)
                self.low, self.seen = self.boundary, {}
            else:
                self.restart(e.since)
        elif isinstance(e, ScheduleRemoved):
            self.close_stretch()
            self.spec = None
            self.out.quarantined.pop(self.name, None)

    def skipped(self, e: ScheduleSkipped, position: int) -> None:
        if self.spec is not None:
            inside = times_between(
                self.spec, self.anchor, e.first - timedelta(microseconds=1), e.last, CHECK_LIMIT
            )
            if len(inside) != e.count:
                self.problem(
                    f"skipped range at {position} counts {e.count}, its times are {len(inside)}"
                )
            for at in inside:
                self.mark(at, f"skipped ({e.reason}) at {position}")
        self.boundary = max(self.boundary or e.last, e.last)


def account(store: EventStore, events: Iterable[RecordedEvent] | None = None) -> Accounting:
    """Walk every schedule stream of the log (see the module docstring)."""
    out = Accounting()
    walks: dict[str, _Walk] = {}
    source = events if events is not None else _all(store)
    for r in source:
        if not r.stream.startswith("schedule/"):
            continue
        name = r.stream[len("schedule/") :]
        walk = walks.get(name)
        if walk is None:
            walk = walks[name] = _Walk(name, out)
        walk.event(r)
    for name, walk in walks.items():
        walk.close_stretch()
        if (walk.boundary is not None and walk.spec is not None) or walk.quarantined:
            out.boundaries[name] = walk.boundary  # type: ignore[assignment]
    out.schedules = len(walks)
    return out


def _all(store: EventStore) -> Iterable[RecordedEvent]:
    """The events of the schedule streams (and the leader's), in position order."""
    position = 0
    while True:
        batch = store.read_prefix("schedule", position, 10_000)
        if not batch:
            return
        yield from batch
        position = batch[-1].position


def check_accounting(found: Accounting) -> Check:
    if found.problems:
        return Check(
            "schedule_accounting",
            "fail",
            "; ".join(found.problems[:5]),
            "a nominal time is unaccounted for or accounted twice: report it with "
            "'rota export' of the schedule's stream; nothing to repair by hand",
        )
    return Check(
        "schedule_accounting",
        "ok",
        f"{found.schedules} schedule(s), {found.checked} nominal time(s), each accounted for once",
    )


def check_drift(found: Accounting, projection: SchedulesProjection) -> Check:
    differ = []
    for name, boundary in found.boundaries.items():
        row = projection.schedules.get(name)
        if row is None or row.removed:
            continue
        if row.boundary != boundary:
            differ.append(f"{name} ({rfc3339(row.boundary)} != {rfc3339(boundary)})")
    if differ:
        return Check(
            "schedule_drift",
            "fail",
            "the schedules projection's boundary differs from the log's: " + ", ".join(differ[:5]),
            "report it: the fold and the log disagree (nothing is stored to repair)",
        )
    return Check("schedule_drift", "ok", "the schedules projection agrees with the log")


def check_quarantine(found: Accounting) -> Check:
    if found.quarantined:
        named = ", ".join(f"{n} ({why})" for n, why in sorted(found.quarantined.items())[:5])
        return Check("schedule_quarantine", "fail", f"quarantined: {named}", RELEASE_ADVICE)
    return Check("schedule_quarantine", "ok", "no schedule is quarantined")


def check_health(projection: SchedulesProjection, works: Mapping[str, WorkState] | None) -> Check:
    """`schedule_health`: no schedule stuck or quarantined (the read the Schedules page,
    `/readyz` and `/metrics` show: `rota.application.queries.schedule_health`)."""
    if works is None:
        return Check("schedule_health", "ok", "not checked: no folded state to read runs from")
    flagged = unhealthy(assess_all(projection.active(), works))
    if flagged:
        named = "; ".join(f"{h.name} {h.status} ({h.reason})" for h in flagged[:5])
        return Check("schedule_health", "fail", named, HEALTH_ADVICE)
    return Check(
        "schedule_health",
        "ok",
        f"no schedule stuck: none has its newest {STUCK_AFTER} nominal times unrun",
    )


def schedule_checks(store: EventStore, works: Mapping[str, WorkState] | None = None) -> list[Check]:
    """The four checks, from one read of the log (`works`: the folded scheduler state's
    Works, which `schedule_health` reads the runs from)."""
    projection = SchedulesProjection()

    def teed() -> Iterable[RecordedEvent]:
        for r in _all(store):
            projection.apply(r.position, r.stream, r.version, schedule_fold_time(r), r.event)
            yield r

    found = account(store, teed())
    return [
        check_accounting(found),
        check_drift(found, projection),
        check_quarantine(found),
        check_health(projection, works),
    ]


SCHEDULE_CHECKS = (
    "schedule_accounting",
    "schedule_drift",
    "schedule_quarantine",
    "schedule_health",
)
