"""Issue 28 item 1: a schedule whose fires pile up (overlap-skipped, pending) or that is
quarantined is flagged by the health read (`scheduler.queries.schedules.health()`), and
doctor's `schedule_health` check answers the same from the log."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import pytest

import rota
from rota.application.ports import NewEvent
from rota.application.queries.schedule_health import STUCK_AFTER, ScheduleHealth
from rota.domain.events.schedule import ScheduleDefined
from rota.infrastructure.clock import ManualClock
from rota.replay.doctor import doctor

START = datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def scheduler(
    memory_url: str, clock: ManualClock, gate: threading.Event
) -> Iterator[rota.Scheduler]:
    with rota.open(memory_url, clock=clock, owner="host-a") as s:
        s.register("slow", lambda ctx: gate.wait(60))  # runs until the test lets it end
        s.register("job", lambda ctx: None)
        yield s
        gate.set()


def _health(s: rota.Scheduler) -> dict[str, ScheduleHealth]:
    return {h.name: h for h in s.queries.schedules.health()}


def _doctor_says(s: rota.Scheduler) -> str:
    check = doctor(str(s.store.url)).check("schedule_health")
    return f"{check.status}: {check.detail}"


def test_the_threshold_is_pinned() -> None:
    assert STUCK_AFTER == 3


def test_a_run_that_does_not_end_makes_its_schedule_stuck_after_three_overlaps(
    scheduler: rota.Scheduler, clock: ManualClock, gate: threading.Event
) -> None:
    scheduler.service.schedules.define("tick", binding="slow", every="1m")
    clock.advance(30)
    scheduler.tick()  # 09:01 fires; its run does not end
    for _ in range(STUCK_AFTER - 1):
        clock.advance(60)
        scheduler.tick()
    assert _health(scheduler)["tick"] == ScheduleHealth(name="tick", status="ok", streak=2)
    assert _doctor_says(scheduler).startswith("ok")
    clock.advance(60)
    scheduler.tick()  # the third overlap in a row
    stuck = _health(scheduler)["tick"]
    assert (stuck.status, stuck.streak) == ("stuck", 3)
    assert stuck.reason == "the newest 3 nominal times did not run: 3 skipped (overlap)"
    said = _doctor_says(scheduler)
    assert said == f"fail: tick stuck ({stuck.reason})", said  # doctor agrees, word for word
    (listed,) = scheduler.schedules.list()  # `rota schedule list/show` carry it too
    shown = scheduler.schedules.show("tick")
    for view in (listed, shown):
        assert (view.state, view.health, view.health_reason) == ("active", "stuck", stuck.reason)
    gate.set()  # the run ends; the next nominal time fires and runs
    scheduler.run_until_idle(timeout=30)
    clock.advance(60)
    scheduler.run_until_idle(timeout=30)
    assert _health(scheduler)["tick"].status == "ok"
    assert _doctor_says(scheduler).startswith("ok")
    healthy = scheduler.schedules.show("tick")
    assert (healthy.health, healthy.health_reason) == ("ok", None)
    assert "health" not in msgspec.to_builtins(healthy)  # left out of the JSON while ok


def test_fires_piling_up_as_pending_make_a_schedule_stuck(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    scheduler.service.schedules.define("tick", binding="slow", every="1m", overlap="buffer_all")
    clock.advance(30)
    scheduler.tick()  # 09:01 runs (and does not end)
    for _ in range(STUCK_AFTER):
        clock.advance(60)
        scheduler.tick()  # each fire buffered behind it, pending
    stuck = _health(scheduler)["tick"]
    assert stuck.status == "stuck"
    assert stuck.reason == "the newest 3 nominal times did not run: 3 pending in schedule.tick@slow"
    assert _doctor_says(scheduler) == f"fail: tick stuck ({stuck.reason})"


def test_a_quarantined_schedule_is_unhealthy_and_a_paused_one_is_not(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    schedules = scheduler.service.schedules
    schedules.define("bad", binding="job", every="1m")
    schedules.define("resting", binding="job", every="1m")
    row = schedules.row("bad")
    fields = {f: getattr(row.definition, f) for f in row.definition.__struct_fields__}
    fields.update(spec="every banana", schedule_version=2)
    scheduler.store.append(
        [NewEvent("schedule/bad", ScheduleDefined(**fields))], {"schedule/bad": 1}
    )
    schedules.pause("resting")
    clock.advance(30 + 60 * 5)
    scheduler.tick()
    health = _health(scheduler)
    assert health["bad"].status == "quarantined"
    assert health["bad"].reason is not None and "banana" in health["bad"].reason
    assert health["resting"].status == "ok"  # five paused skips: a decision, not a pile-up
    said = _doctor_says(scheduler)
    assert said.startswith("fail: bad quarantined") and "resting" not in said
