"""Issue 28 item 1: cancelling a schedule's Work ends only that run. The next fire starts a
fresh run (`schedule.<name>@<binding>:run<N>`), so no later nominal time is skipped as a
permanent `overlap`; doctor, `schedule show` and the health read agree."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.infrastructure.clock import ManualClock
from rota.replay.doctor import doctor

START = datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC)
WORK = "schedule.tick@job"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def scheduler(memory_url: str, clock: ManualClock) -> Iterator[rota.Scheduler]:
    with rota.open(memory_url, clock=clock, owner="host-a") as s:
        s.register("job", lambda ctx: None)
        yield s


def _ten_more(s: rota.Scheduler, clock: ManualClock) -> list[Any]:
    """Ten nominal times, each run to the end; their history entries."""
    for _ in range(10):
        clock.advance(60)
        s.run_until_idle(timeout=30)
    return s.queries.schedules.history("tick", limit=10)


def _every_one_ran(entries: list[Any]) -> None:
    assert len(entries) == 10
    for entry in entries:
        assert entry.status == "fired", entry
        assert entry.outcome == "completed", entry


def test_cancel_of_an_idle_schedule_work_ends_that_run_only(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    scheduler.service.schedules.define("tick", binding="job", every="1m")
    clock.advance(30)  # 09:01:00, the first nominal time
    scheduler.run_until_idle(timeout=30)
    scheduler.cancel(WORK, reason="ops")  # as `rota cancel schedule.tick@job` does
    entries = _ten_more(scheduler, clock)
    _every_one_ran(entries)
    assert {e.work for e in entries} == {f"{WORK}:run2"}  # the fresh run after the cancel
    view = scheduler.queries.schedules.show("tick")
    assert view.state == "active" and view.fired == 11 and view.skipped == 0
    (health,) = scheduler.queries.schedules.health()
    assert health.status == "ok", health
    report = doctor(str(scheduler.store.url))
    assert report.check("schedule_health").status == "ok", report.check("schedule_health")
    assert report.check("schedule_accounting").status == "ok"


def test_cancel_of_a_running_schedule_work_ends_that_run_only(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    gate = threading.Event()
    scheduler.register("slow", lambda ctx: gate.wait(30))
    scheduler.service.schedules.define("tick", binding="slow", every="1m")
    clock.advance(30)
    assert scheduler.tick().started == 1  # the first run is running
    scheduler.cancel("schedule.tick@slow", reason="ops")
    gate.set()
    scheduler.run_until_idle(timeout=30)
    entries = _ten_more(scheduler, clock)
    _every_one_ran(entries)
    assert {e.work for e in entries} == {"schedule.tick@slow:run2"}
    first = scheduler.queries.schedules.history("tick", limit=11)[0]
    assert (first.work, first.outcome) == ("schedule.tick@slow", "cancelled")


def test_each_cancelled_run_is_followed_by_the_next(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    scheduler.service.schedules.define("tick", binding="job", every="1m")
    clock.advance(30)
    scheduler.run_until_idle(timeout=30)
    for run in (1, 2, 3):
        work = WORK if run == 1 else f"{WORK}:run{run}"
        scheduler.cancel(work)
        clock.advance(60)
        scheduler.run_until_idle(timeout=30)
        (last,) = scheduler.queries.schedules.history("tick", limit=1)
        assert (last.work, last.outcome) == (f"{WORK}:run{run + 1}", "completed")
