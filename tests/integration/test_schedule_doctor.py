"""Doctor's schedule checks can fail: a nominal time unaccounted for, a skipped range whose
count lies, a time fired twice, and a quarantine (released by redefining)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import rota
from rota.application.ports import NewEvent
from rota.domain.events.schedule import ScheduleFired, ScheduleSkipped
from rota.infrastructure.clock import ManualClock
from rota.replay.doctor import doctor

T0 = datetime(2026, 5, 1, 9, 0, 30, tzinfo=UTC)


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[tuple[rota.Scheduler, ManualClock]]:
    clock = ManualClock(T0)
    with rota.open(tmp_path / "doctor.db", clock=clock, owner="host-a") as s:
        s.register("job", lambda ctx: None)
        s.schedule("tick", binding="job", every="1m", overlap="allow_all")
        yield s, clock


def forge(s: rota.Scheduler, event: ScheduleFired | ScheduleSkipped) -> None:
    version = s.store.stream_version("schedule/tick")
    s.store.append([NewEvent("schedule/tick", event)], {"schedule/tick": version})


def fired(minute: int) -> ScheduleFired:
    at = datetime(2026, 5, 1, 9, minute, tzinfo=UTC)
    return ScheduleFired(
        name="tick",
        nominal=at,
        due=at,
        schedule_version=1,
        binding="job",
        work_id="schedule.tick@job",
        input_key=f"forged-{minute}",
    )


def test_healthy_schedules_pass(scheduler: tuple[rota.Scheduler, ManualClock]) -> None:
    s, clock = scheduler
    for _ in range(5):
        clock.advance(60)
        s.tick()
    report = doctor(str(s.store.url))
    accounting = report.check("schedule_accounting")
    assert accounting.status == "ok" and "5 nominal time(s)" in accounting.detail


def test_a_fire_that_jumps_the_boundary_leaves_times_unaccounted(
    scheduler: tuple[rota.Scheduler, ManualClock],
) -> None:
    s, _ = scheduler
    forge(s, fired(4))  # 09:01 .. 09:03 were never decided
    check = doctor(str(s.store.url)).check("schedule_accounting")
    assert check.status == "fail" and "3 nominal time(s) unaccounted for" in check.detail
    assert "2026-05-01T09:01:00Z" in check.detail


def test_a_skipped_range_whose_count_lies_and_a_time_twice(
    scheduler: tuple[rota.Scheduler, ManualClock],
) -> None:
    s, _ = scheduler
    first, last = datetime(2026, 5, 1, 9, 1, tzinfo=UTC), datetime(2026, 5, 1, 9, 3, tzinfo=UTC)
    forge(
        s,
        ScheduleSkipped(
            name="tick", schedule_version=1, first=first, last=last, count=2, reason="coalesced"
        ),
    )
    forge(s, fired(3))
    check = doctor(str(s.store.url)).check("schedule_accounting")
    assert check.status == "fail"
    assert "counts 2, its times are 3" in check.detail and "accounted for twice" in check.detail


def test_drift_is_ok_and_quarantine_fails_until_redefined(
    scheduler: tuple[rota.Scheduler, ManualClock],
) -> None:
    s, clock = scheduler
    row = s.service.schedules.row("tick")
    bad = {f: getattr(row.definition, f) for f in row.definition.__struct_fields__}
    bad.update(spec="every now and then", schedule_version=2)
    from rota.domain.events.schedule import ScheduleDefined

    version = s.store.stream_version("schedule/tick")
    s.store.append([NewEvent("schedule/tick", ScheduleDefined(**bad))], {"schedule/tick": version})
    clock.advance(120)
    s.tick()
    report = doctor(str(s.store.url))
    assert report.check("schedule_quarantine").status == "fail"
    assert report.check("schedule_drift").status == "ok"
    assert not report.ok
    s.schedule("tick", binding="job", every="1m", overlap="allow_all", reason="released")
    clock.advance(timedelta(minutes=2).total_seconds())
    s.tick()
    report = doctor(str(s.store.url))
    assert report.check("schedule_quarantine").status == "ok"
    assert report.check("schedule_accounting").status == "ok", report.check("schedule_accounting")


def test_doctor_checks_schedules_on_postgresql() -> None:
    from postgres import DatabaseClock, temporary_schema

    with temporary_schema() as schema:
        clock = DatabaseClock(schema, T0)
        with rota.open(clock.url, owner="host-a") as s:
            s.register("job", lambda ctx: None)
            s.service.store._clock.refresh = 0  # the test's database clock
            s.schedule("tick", binding="job", every="1m", overlap="allow_all")
            for _ in range(3):
                clock.advance(60)
                s.tick()
            assert s.schedules.show("tick").fired == 3
        report = doctor(clock.url)
        accounting = report.check("schedule_accounting")
        assert accounting.status == "ok" and "3 nominal time(s)" in accounting.detail
        assert report.check("schedule_drift").status == "ok"


def test_the_daemon_notices_a_new_schedule_on_its_commit() -> None:
    import threading
    import time

    clock = ManualClock(T0)
    with rota.open("memory://", clock=clock, owner="host-a") as s:
        s.register("job", lambda ctx: None)
        # Without a commit to wake it, this loop would sleep an hour between passes.
        s.host.next_wake = lambda default=5.0: 3600.0  # type: ignore[method-assign]
        stop = threading.Event()
        daemon = threading.Thread(target=s.run, args=(stop,))
        daemon.start()
        try:
            s.schedule("soon", binding="job", every="1m")
            runner = s.host.schedule_runner
            deadline = time.monotonic() + 30
            while "soon" not in runner._next:  # what the loop's pass planned for it
                assert time.monotonic() < deadline, "the new schedule was not noticed"
                s.store.wait_for_commit(s.store.head().position, 0.1)  # its lease's commit
            assert runner._next["soon"][1] == datetime(2026, 5, 1, 9, 1, tzinfo=UTC)
        finally:
            stop.set()
            daemon.join(timeout=30)
