"""The schedules' read models: what `rota schedule list | show | next | history`, `rota
explain schedule`, `GET /v1/schedules...`, the web view and `/metrics` show.

`rows` and `show` read the schedules projection at the log head (`schedule_view` is the
one builder of a `ScheduleView`); `upcoming` lists the next nominal times with their due
time (jitter) and DST flag; `history` every nominal time of a range, fired (the Work and
its outcome) or skipped (the reason and the event's position); `explain` answers why a
nominal time did or did not fire. Each takes the service's lock itself.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rota.application.ports import RecordedEvent
from rota.application.queries import schedule_health
from rota.application.queries.schedule_config_reads import apply_plan as config_plan
from rota.application.queries.schedule_config_reads import not_in_config as config_lacks
from rota.application.queries.schedule_health import ScheduleHealth
from rota.application.queries.schedule_views import (
    HistoryEntry,
    ScheduleApplyPlan,
    ScheduleExplanation,
    ScheduleVersion,
    ScheduleView,
    UpcomingTime,
)
from rota.application.service import SchedulerService
from rota.domain.errors import DomainCode, Refusal
from rota.domain.events.schedule import (
    ScheduleDefined,
    ScheduleFired,
    ScheduleQuarantined,
    ScheduleSkipped,
)
from rota.domain.schedule_specs import (
    Spec,
    SpecError,
    dst_flag,
    jitter,
    parse_stored,
    rfc3339,
    times_after,
    times_between,
)
from rota.domain.state import WorkState
from rota.projections.schedules_projection import ScheduleRow, schedule_stream, source_of

REASONS = {
    "outside_catchup_window": "it was older than the catch-up window when the runner came to "
    "it (no runner was up, or the clock jumped forward)",
    "coalesced": "the catch-up policy fired a later nominal time instead",
    "overlap": "the previous run was still pending or running (the overlap policy)",
    "paused": "the schedule was paused",
}


class ScheduleMetricsRead(msgspec.Struct, frozen=True, kw_only=True):
    """What `/metrics` reads of the schedules: the rows by name, who holds the runner's
    leader lease now (None: nobody) and this process's owner name."""

    rows: tuple[ScheduleRow, ...]
    leader: str | None
    owner: str


def schedule_view(row: ScheduleRow, works: Mapping[str, WorkState]) -> ScheduleView:
    """The view of `row`, its health judged against the Works its fires fed."""
    d = row.definition
    state = "quarantined" if row.quarantined else "paused" if row.paused else "active"
    found = schedule_health.assess(row, works)
    return ScheduleView(
        name=row.name,
        state=state,
        version=d.schedule_version,
        spec=d.spec,
        timezone=d.timezone,
        binding=d.binding,
        scope=d.scope,
        source=row.source,
        input=d.input,
        catchup=d.catchup,
        catchup_window_seconds=d.catchup_window_seconds,
        max_catchup=d.max_catchup,
        overlap=d.overlap,
        jitter_seconds=d.jitter_seconds,
        priority=d.priority,
        keys=list(d.keys),
        boundary=rfc3339(row.boundary),
        fired=row.fired,
        skipped=row.skipped,
        last_fired=rfc3339(row.last_fired) if row.last_fired else None,
        quarantined=row.quarantined,
        health=found.status,
        health_reason=found.reason,
    )


def rows(service: SchedulerService) -> list[ScheduleView]:
    """Every schedule's view, by name, at the log head."""
    with service.lock:
        service.catch_up()
        found = sorted(service.schedules.projection.active(), key=lambda r: r.name)
        return [schedule_view(row, service.projection.works) for row in found]


def show(service: SchedulerService, name: str) -> ScheduleView:
    """One schedule's view with its versions (unknown: `unknown_schedule`)."""
    with service.lock:
        service.catch_up()
        row = service.schedules.projection.get(name)
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
                source=source_of(d),
            )
            for d in row.versions
        ]
        view = schedule_view(row, service.projection.works)
        return msgspec.structs.replace(view, versions=versions)


def next_times(service: SchedulerService, name: str, count: int = 10) -> list[UpcomingTime]:
    """The schedule's next `count` nominal times (unknown: `unknown_schedule`)."""
    return upcoming(service.schedules.row(name), count)


def metrics_read(service: SchedulerService) -> ScheduleMetricsRead:
    """The schedules as one `/metrics` scrape reads them, at the log head."""
    with service.lock:
        service.catch_up()
        projection = service.schedules.projection
        return ScheduleMetricsRead(
            rows=tuple(sorted(projection.active(), key=lambda r: r.name)),
            leader=projection.leader.holder(service.now()),
            owner=service.owner,
        )


def _spec(d: ScheduleDefined) -> Spec | None:
    try:
        return parse_stored(d.spec, d.timezone)
    except SpecError:
        return None


def upcoming(row: ScheduleRow, count: int = 10) -> list[UpcomingTime]:
    d = row.definition
    spec = _spec(d)
    if spec is None or row.quarantined:
        return []
    found: list[UpcomingTime] = []
    for nominal in times_after(spec, d.anchor, row.boundary):
        if len(found) >= count:
            break
        delay = jitter(d.name, nominal, d.jitter_seconds)
        found.append(
            UpcomingTime(
                nominal=rfc3339(nominal),
                local=nominal.astimezone(spec.zone).isoformat(),
                due=rfc3339(nominal + delay),
                jitter_seconds=delay.total_seconds(),
                dst=dst_flag(spec, nominal),
                paused=row.paused,
            )
        )
    return found


def _stream(service: SchedulerService, name: str) -> list[RecordedEvent]:
    recorded = service.store.read_stream(schedule_stream(name))
    if not recorded:
        raise Refusal(f"no schedule {name!r}", code=DomainCode.UNKNOWN_SCHEDULE)
    return recorded


def _outcome(service: SchedulerService, fired: ScheduleFired) -> dict[str, Any]:
    work = service.projection.works.get(fired.work_id)
    if work is None:
        return {"work": fired.work_id, "outcome": None}
    for attempt in work.attempts:
        if any(p.key == fired.input_key for p in attempt.consumed):
            return {
                "work": fired.work_id,
                "attempt": attempt.execution_id,
                "outcome": attempt.outcome or attempt.status,
            }
    pending = any(p.key == fired.input_key for p in work.pending)
    return {"work": fired.work_id, "outcome": "pending" if pending else None}


def history(
    service: SchedulerService,
    name: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 100,
) -> list[HistoryEntry]:
    """Every accounted nominal time in [since, until], newest `limit`, oldest first."""
    with service.lock:
        service.catch_up()
        entries: list[HistoryEntry] = []
        spec: Spec | None = None
        anchor = None
        for r in _stream(service, name):
            e = r.event
            if isinstance(e, ScheduleDefined):
                spec, anchor = _spec(e), e.anchor
            elif isinstance(e, ScheduleFired):
                if _inside(e.nominal, since, until):
                    entries.append(
                        HistoryEntry(
                            nominal=rfc3339(e.nominal),
                            status="fired",
                            position=r.position,
                            manual=e.manual,
                            backfill=e.backfill,
                            version=e.schedule_version,
                            **_outcome(service, e),
                        )
                    )
            elif isinstance(e, ScheduleSkipped):
                if spec is None or anchor is None or e.count > 10 * limit:
                    if _overlaps(e.first, e.last, since, until):
                        entries.append(
                            HistoryEntry(
                                nominal=rfc3339(e.first),
                                last=rfc3339(e.last),
                                count=e.count,
                                status="skipped",
                                reason=e.reason,
                                position=r.position,
                            )
                        )
                    continue
                start = e.first - timedelta(microseconds=1)
                for at in times_between(spec, anchor, start, e.last):
                    if _inside(at, since, until):
                        entries.append(
                            HistoryEntry(
                                nominal=rfc3339(at),
                                status="skipped",
                                reason=e.reason,
                                position=r.position,
                            )
                        )
            elif isinstance(e, ScheduleQuarantined):
                entries.append(
                    HistoryEntry(
                        nominal=rfc3339(e.boundary),
                        status="quarantined",
                        reason=e.reason,
                        position=r.position,
                    )
                )
        entries.sort(key=lambda x: x.nominal)
        return entries[-limit:]


def _inside(at: datetime, since: datetime | None, until: datetime | None) -> bool:
    return (since is None or at >= since) and (until is None or at <= until)


def _overlaps(
    first: datetime, last: datetime, since: datetime | None, until: datetime | None
) -> bool:
    return (since is None or last >= since) and (until is None or first <= until)


def explain(service: SchedulerService, name: str, at: datetime) -> ScheduleExplanation:
    """Why the nominal time at (or last before) `at` fired or did not."""
    return ScheduleExplanation(**_explain(service, name, at))


def _explain(service: SchedulerService, name: str, at: datetime) -> dict[str, Any]:
    with service.lock:
        service.catch_up()
        recorded = _stream(service, name)
        row = service.schedules.projection.schedules.get(name)
        definition: ScheduleDefined | None = None
        for r in recorded:
            if isinstance(r.event, ScheduleDefined) and (definition is None or r.event.since <= at):
                definition = r.event
        assert definition is not None
        answer: dict[str, Any] = {
            "schedule": name,
            "at": rfc3339(at),
            "version": definition.schedule_version,
        }
        if at < definition.since and definition.schedule_version == 1:
            answer.update(
                verdict="before_definition",
                why=(
                    f"the schedule was defined at {rfc3339(definition.since)}; no nominal time "
                    "before its definition is due"
                ),
            )
            return answer
        spec = _spec(definition)
        if spec is None:
            answer.update(
                verdict="unreadable", why="its stored definition cannot be read (see quarantine)"
            )
            return answer
        before = times_between(spec, definition.anchor, at - timedelta(days=400), at)
        if not before:
            answer.update(
                verdict="no_nominal_time", why="no nominal time of its spec at or before then"
            )
            return answer
        nominal = before[-1]
        answer["nominal"] = rfc3339(nominal)
        if nominal != at:
            answer["note"] = (
                f"{rfc3339(at)} is not a nominal time; the last one before it is {rfc3339(nominal)}"
            )
        answer["due"] = rfc3339(nominal + jitter(name, nominal, definition.jitter_seconds))
        answer["dst"] = dst_flag(spec, nominal)
        for r in recorded:
            e = r.event
            if isinstance(e, ScheduleFired) and e.nominal == nominal and not e.manual:
                answer.update(verdict="fired", position=r.position, **_outcome(service, e))
                answer["why"] = (
                    f"fired (schedule version {e.schedule_version}, binding {e.binding!r})"
                )
                return answer
            if isinstance(e, ScheduleSkipped) and e.first <= nominal <= e.last:
                answer.update(
                    verdict="skipped",
                    reason=e.reason,
                    position=r.position,
                    why=f"skipped: {REASONS[e.reason]}",
                )
                return answer
            if isinstance(e, ScheduleQuarantined) and nominal <= e.boundary:
                answer.update(
                    verdict="quarantined",
                    reason=e.reason,
                    position=r.position,
                    why=f"the schedule was quarantined: {e.reason}",
                )
                # a fire or skip before the quarantine would have been found earlier
                return answer
        boundary = row.boundary if row is not None else None
        if boundary is None or nominal > boundary:
            answer.update(
                verdict="not_yet",
                why=(
                    "not accounted for yet: the runner has decided up to "
                    f"{rfc3339(boundary) if boundary else 'nothing'}; it decides at its first pass "
                    f"after {answer['due']}"
                ),
            )
            return answer
        answer.update(
            verdict="superseded",
            why=(
                "not accounted for under this version: the schedule was redefined, resumed or "
                "removed before it was due"
            ),
        )
        return answer


class ScheduleQueries:
    """The schedule read models over one service (the functions above, bound to it)."""

    def __init__(self, service: SchedulerService) -> None:
        self.service = service

    def rows(self) -> list[ScheduleView]:
        return rows(self.service)

    def show(self, name: str) -> ScheduleView:
        return show(self.service, name)

    def next(self, name: str, count: int = 10) -> list[UpcomingTime]:
        return next_times(self.service, name, count)

    def history(
        self,
        name: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[HistoryEntry]:
        return history(self.service, name, since=since, until=until, limit=limit)

    def explain(self, name: str, at: datetime) -> ScheduleExplanation:
        return explain(self.service, name, at)

    def metrics(self) -> ScheduleMetricsRead:
        return metrics_read(self.service)

    def not_in_config(self, names: Collection[str]) -> list[str]:
        return config_lacks(self.service, names)

    def apply_plan(self, definitions: Mapping[str, Mapping[str, Any]]) -> ScheduleApplyPlan:
        return config_plan(self.service, definitions)

    def health(self) -> list[ScheduleHealth]:
        """Every schedule's health (`schedule_health`: ok, stuck or quarantined)."""
        return schedule_health.health(self.service)
