"""What `rota schedule next | history` and `rota explain schedule` show, read from the log.

`upcoming` lists the next nominal times with their due time (jitter) and DST flag;
`history` every nominal time of a range, fired (the Work and its outcome) or skipped (the
reason and the event's position); `explain` answers why a nominal time did or did not fire.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from rota.application.ports import RecordedEvent
from rota.application.queries.schedule_views import HistoryEntry, ScheduleExplanation, UpcomingTime
from rota.application.service import SchedulerService
from rota.domain.errors import DomainCode, Refusal
from rota.domain.events.schedule import (
    ScheduleDefined,
    ScheduleFired,
    ScheduleQuarantined,
    ScheduleSkipped,
)
from rota.domain.schedules import (
    Spec,
    SpecError,
    dst_flag,
    jitter,
    parse_stored,
    rfc3339,
    times_after,
    times_between,
)
from rota.projections.schedules import ScheduleRow, schedule_stream

REASONS = {
    "outside_catchup_window": "it was older than the catch-up window when the runner came to "
    "it (no runner was up, or the clock jumped forward)",
    "coalesced": "the catch-up policy fired a later nominal time instead",
    "overlap": "the previous run was still pending or running (the overlap policy)",
    "paused": "the schedule was paused",
}


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
