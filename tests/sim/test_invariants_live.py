"""The invariants over logs the real engine writes here, on the in-memory store with a
manual clock: schedules through a pause, a clock step back and a gap (and each schedule
invariant against a tampering of that log), capacity and retries under load, budgets,
cancel and confirmed stops; and the real bug the invariants found (two results of one
attempt in one observe batch were both recorded; fixed in `Host._observe`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

import rota
from rota.application.ports import RecordedEvent
from rota.domain.events import ScheduleFired, ScheduleSkipped
from rota.infrastructure.clock import ManualClock
from rota.testing.sim.invariants import Checker, Violation, check_store, store_records

from .invariant_logs import reported

START = datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def run(scheduler: rota.Scheduler, clock: ManualClock, seconds: float, every: float = 30) -> None:
    """Let `seconds` pass in steps of `every`, running the cadence until idle at each."""
    while seconds > 0:
        clock.advance(min(every, seconds))
        seconds -= every
        scheduler.run_until_idle(timeout=10)


def log_of(scheduler: rota.Scheduler) -> list[RecordedEvent]:
    return [event for event, _ in store_records(scheduler.store)]


@pytest.fixture
def scheduled(clock: ManualClock) -> Iterator[rota.Scheduler]:
    """Two schedules run for a while: one paused and resumed, a clock step back and a gap
    larger than the catch-up window."""
    with rota.open("memory://", clock=clock) as scheduler:
        scheduler.register("job", lambda ctx: None, inline=True)
        scheduler.schedule("tick", binding="job", every="1m")
        scheduler.schedule("cron", binding="job", cron="*/5 * * * *", catchup="all")
        run(scheduler, clock, 600)
        scheduler.schedules.pause("tick")
        run(scheduler, clock, 180)
        scheduler.schedules.resume("tick")
        clock.step(-120)  # wall time goes back two minutes
        run(scheduler, clock, 300)
        clock.advance(2 * 3600)  # a gap past the one-hour catch-up window
        run(scheduler, clock, 120)
        yield scheduler


def test_schedules_through_pause_step_back_and_gap_violate_nothing(
    scheduled: rota.Scheduler, clock: ManualClock
) -> None:
    found = check_store(scheduled.store, scheduled.settings, now=clock.now())
    assert found == [], [str(v) for v in found]
    kinds = {e.type for e in log_of(scheduled)}
    assert {"core.schedule.fired", "core.schedule.skipped"} <= kinds


def test_schedule_fired_once_reports_a_nominal_time_fired_again(scheduled: rota.Scheduler) -> None:
    log = log_of(scheduled)
    fire = next(r for r in log if isinstance(r.event, ScheduleFired))
    last = log[-1]
    stream_version = max(r.version for r in log if r.stream == fire.stream)
    again = msgspec.structs.replace(
        fire, position=last.position + 1, version=stream_version + 1, delivery_id=None
    )
    found = Checker(scheduled.settings).observe_all([*log, again])
    assert reported(found) == {"schedule_fired_once"}, [str(v) for v in found]
    assert [v.positions for v in found] == [(fire.position, again.position)]


def test_schedule_fired_once_reports_a_fire_of_a_time_already_skipped(
    scheduled: rota.Scheduler,
) -> None:
    log = log_of(scheduled)
    skip = next(r for r in log if r.type == "core.schedule.skipped")
    fire = next(r for r in log if isinstance(r.event, ScheduleFired))
    assert isinstance(skip.event, ScheduleSkipped)
    forged = msgspec.structs.replace(
        fire.event, name=skip.event.name, nominal=skip.event.first, due=skip.event.first
    )
    stream_version = max(r.version for r in log if r.stream == skip.stream)
    again = msgspec.structs.replace(
        fire,
        position=log[-1].position + 1,
        stream=skip.stream,
        version=stream_version + 1,
        delivery_id=None,
        event=forged,
    )
    found = Checker(scheduled.settings).observe_all([*log, again])
    assert reported(found) == {"schedule_fired_once"}, [str(v) for v in found]
    assert "already accounted for" in found[0].message


def test_schedule_past_resolved_reports_a_due_time_left_unanswered(
    scheduled: rota.Scheduler, clock: ManualClock
) -> None:
    log = log_of(scheduled)
    last_fire = max(
        (r for r in log if isinstance(r.event, ScheduleFired) and r.event.name == "tick"),
        key=lambda r: r.position,
    )
    checker = Checker(scheduled.settings)
    assert checker.observe_all(r for r in log if r.position < last_fire.position) == []
    found = checker.at_rest(clock.now())
    assert reported(found) == {"schedule_past_resolved"}, [str(v) for v in found]
    assert "schedule tick" in found[0].message and "neither fired nor skipped" in found[0].message


def test_at_rest_is_quiet_when_no_time_is_due_yet(scheduled: rota.Scheduler) -> None:
    checker = Checker(scheduled.settings)
    checker.observe_all(store_records(scheduled.store))
    assert checker.at_rest(START) == []


class Flaky:
    """Fails the first `failures` calls of each Work, then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: dict[str, int] = {}

    def __call__(self, ctx: rota.LaunchContext) -> Any:
        n = self.calls[ctx.work_id] = self.calls.get(ctx.work_id, 0) + 1
        if n <= self.failures:
            raise rota.Fail("flaky", f"call {n}")
        return {"usd": 1.0}


def test_capacity_retries_budgets_and_cancel_under_load_violate_nothing(
    clock: ManualClock,
) -> None:
    config: dict[str, Any] = {
        "settings": {"concurrency": 2, "job_concurrency": 1},
        "scopes": [{"path": "root/team", "limits": {"concurrency": 1}}],
        "budgets": [{"id": "turns", "unit": "turns", "max": 3, "per": "work"}],
    }
    with rota.open("memory://", clock=clock, config=config) as scheduler:
        flaky = Flaky(failures=1)
        scheduler.register("flaky", flaky, inline=True)
        scheduler.register("steady", lambda ctx: "ok", inline=True)
        for n in range(6):
            scheduler.submit(f"f{n}", binding="flaky", scope="root/team" if n % 2 else "root")
            scheduler.submit(f"s{n}", binding="steady", input={"n": n})
        scheduler.submit("doomed", binding="flaky")
        scheduler.cancel("doomed")
        run(scheduler, clock, 3600, every=120)
        states = {w.id: w.state for w in scheduler.works()}
        assert states["doomed"] == "cancelled"
        assert {states[f"f{n}"] for n in range(6)} == {"completed"}
        found = check_store(scheduler.store, scheduler.settings, now=clock.now())
        assert found == [], [str(v) for v in found]
        assert "core.retry.fired" in {e.type for e in log_of(scheduler)}
        # Negative control: the same log judged under one agent slot overruns it.
        tighter = msgspec.structs.replace(scheduler.settings, concurrency=1)
        over = Checker(tighter).observe_all(store_records(scheduler.store))
        assert over and reported(over) == {"capacity_respected"}
        assert all("pool agents" in v.message for v in over)


def test_the_checker_folds_a_long_log_quickly(clock: ManualClock) -> None:
    with rota.open("memory://", clock=clock) as scheduler:
        scheduler.register("steady", lambda ctx: "ok", inline=True)
        for n in range(300):
            scheduler.submit(f"w{n}", binding="steady")
        scheduler.run_until_idle(timeout=30)
        checker = Checker(scheduler.settings)
        assert checker.observe_all(store_records(scheduler.store)) == []
        assert checker.checked >= 300 * 3  # three events a job: submitted, claimed, completed


def duplicate_result(outcome: str) -> list[Violation]:
    """One attempt's result reported twice in one observe batch (an executor calling its
    `done` again), the second one `outcome`."""
    clock = ManualClock(START)
    with rota.open("memory://", clock=clock) as scheduler:
        scheduler.register("job", lambda ctx: None, inline=True)
        scheduler.submit("w", binding="job")
        scheduler.tick()  # claims, launches and queues w/1's result
        launches = scheduler.host.launches
        held = next(iter(launches.held.values()))
        launches.done(held)(rota.Result(outcome=outcome, error_code="late"))  # type: ignore[arg-type]
        scheduler.run_until_idle(timeout=10)  # observes both results in one batch
        run(scheduler, clock, 3600, every=600)
        work = scheduler.work("w")
        assert work.state == "completed" and len(work.attempts) == 1, work
        return check_store(scheduler.store, scheduler.settings)


def test_a_result_reported_twice_in_one_batch_is_recorded_once() -> None:
    found = duplicate_result("failed")
    assert found == [], [str(v) for v in found]


class QuickAdoptable(rota.Executor):
    """An adoptable executor (`recover`) whose launch finishes at once: it reports its
    result from inside `launch` and persists no recovery metadata (nothing is left to
    adopt). The launcher then reports a second result for the same attempt and epoch
    (`launch_unacknowledged`, holding resources)."""

    capabilities = frozenset({"recover"})
    inline = True

    def __init__(self) -> None:
        self.name = "quick"

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        done(rota.Result(data="done"))

    def recover(self, ctx: rota.LaunchContext, metadata: Any, done: Any) -> Any:
        return "unknown"


def quick_adoptable() -> list[Violation]:
    clock = ManualClock(START)
    with rota.open("memory://", clock=clock) as scheduler:
        scheduler.register("quick", executor=QuickAdoptable())
        scheduler.submit("w", binding="quick")
        run(scheduler, clock, 3600, every=600)
        work = scheduler.work("w")
        assert work.state == "completed" and len(work.attempts) == 1, work
        return check_store(scheduler.store, scheduler.settings)


def test_an_adoptable_launch_that_reports_at_once_completes_once() -> None:
    found = quick_adoptable()
    assert found == [], [str(v) for v in found]


@pytest.fixture
def caught_up(clock: ManualClock) -> Iterator[rota.Scheduler]:
    """A catch-up-`all` schedule (max_catchup 3) after a ten-minute gap: seven due times
    coalesced, the newest three answered (one fired, two skipped for overlap)."""
    with rota.open("memory://", clock=clock) as scheduler:
        scheduler.register("job", lambda ctx: None, inline=True)
        scheduler.schedule("each", binding="job", every="1m", catchup="all", max_catchup=3)
        run(scheduler, clock, 120)
        clock.advance(600)
        run(scheduler, clock, 30)
        yield scheduler


def test_catchup_all_coalescing_past_max_catchup_violates_nothing(
    caught_up: rota.Scheduler,
) -> None:
    log = log_of(caught_up)
    coalesced = [
        r.event
        for r in log
        if isinstance(r.event, ScheduleSkipped) and r.event.reason == "coalesced"
    ]
    assert len(coalesced) == 1 and coalesced[0].count > 3
    checker = Checker(caught_up.settings)
    found = checker.observe_all(log) + checker.at_rest(caught_up.service.now())
    assert found == [], [str(v) for v in found]


def test_catchup_all_keeps_every_reports_a_time_coalesced_below_max_catchup(
    caught_up: rota.Scheduler,
) -> None:
    # The overlap skips of the catch-up's append recorded as coalesced instead: only one
    # due time answered, so coalescing was not the true reason.
    log = log_of(caught_up)
    target = next(
        r for r in log if isinstance(r.event, ScheduleSkipped) and r.event.reason == "overlap"
    )
    assert isinstance(target.event, ScheduleSkipped)
    forged = msgspec.structs.replace(
        target, event=msgspec.structs.replace(target.event, reason="coalesced")
    )
    tampered = [forged if r.position == target.position else r for r in log]
    checker = Checker(caught_up.settings)
    found = checker.observe_all(tampered) + checker.at_rest(caught_up.service.now())
    assert reported(found) == {"catchup_all_keeps_every"}, [str(v) for v in found]
    assert "coalesced" in found[0].message and "answered only 1" in found[0].message
