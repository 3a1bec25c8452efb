"""Seed 003: a quarantine advances the schedule's boundary past now, i.e. never before the
quarantine event's own recorded time (the store stamps an event after its decision read
the clock: a clock that moves on every read shows the gap)."""

from __future__ import annotations

from datetime import UTC, datetime

import rota
from rota.application.ports import NewEvent
from rota.application.timestamps import parse_timestamp, schedule_fold_time
from rota.domain.events.schedule import ScheduleDefined
from rota.infrastructure.clock import ManualClock
from rota.projections.schedules_projection import SchedulesProjection
from rota.replay.doctor import doctor

START = datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC)


class TickingClock(ManualClock):
    """Every read of the wall clock finds it `step` seconds later, as a real one does."""

    def __init__(self, start: datetime, step: float) -> None:
        super().__init__(start)
        self.step_seconds = step

    def now(self) -> datetime:
        return self.advance(self.step_seconds)


def _quarantine(step: float) -> tuple[rota.Scheduler, TickingClock]:
    clock = TickingClock(START, step=0.0)
    s = rota.open("memory://", clock=clock, owner="host-a")
    s.register("job", lambda ctx: None)
    s.service.schedules.define("bad", binding="job", every="1m")
    row = s.service.schedules.row("bad")
    fields = {f: getattr(row.definition, f) for f in row.definition.__struct_fields__}
    fields.update(spec="every banana", schedule_version=2)
    s.store.append([NewEvent("schedule/bad", ScheduleDefined(**fields))], {"schedule/bad": 1})
    clock.advance(90)
    clock.step_seconds = step  # from now on every clock read moves it on
    report = s.tick()
    assert not report.errors
    return s, clock


def _the_quarantine(s: rota.Scheduler) -> tuple[datetime, datetime]:
    (r,) = [r for r in s.store.read(0, 10_000) if r.type == "core.schedule.quarantined"]
    return r.event.boundary, parse_timestamp(r.recorded_at)


def test_the_quarantine_boundary_is_not_before_its_recorded_time() -> None:
    s, _ = _quarantine(step=0.0006)  # 0.6 ms a read: the gap seen from outside
    with s:
        boundary, recorded = _the_quarantine(s)
        assert boundary >= recorded, (boundary, recorded)
        row = s.service.schedules.row("bad")
        assert row.quarantined is not None and row.boundary >= recorded
        view = s.queries.schedules.show("bad")
        assert parse_timestamp(view.boundary.replace("+00:00", "Z")) >= recorded


def test_an_append_slower_than_the_margin_still_folds_a_boundary_past_its_time() -> None:
    s, _ = _quarantine(step=1.5)  # each read 1.5 s on: the append stamps past the margin
    with s:
        boundary, recorded = _the_quarantine(s)
        assert boundary < recorded  # the event's own field lags this slow append
        row = s.service.schedules.row("bad")
        assert row.boundary == recorded  # the fold takes the later: never before it
        rebuilt = SchedulesProjection()
        for r in s.store.read(0, 10_000):
            rebuilt.apply(r.position, r.stream, r.version, schedule_fold_time(r), r.event)
        assert rebuilt.schedules["bad"].boundary == recorded
        report = doctor(str(s.store.url))
        assert report.check("schedule_drift").status == "ok", report.check("schedule_drift")
        assert report.check("schedule_accounting").status == "ok"
