"""The host's cadence (seed 002): the fixed order of one pass, the lost-retry step's pages,
and a failed recovery or lost-retry step starting nothing new."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.application.errors import StoreUnavailable
from rota.infrastructure.clock import ManualClock

FAILED = rota.Result(outcome="failed", error_code="boom")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 2, 9, tzinfo=UTC))


@pytest.fixture
def scheduler(clock: ManualClock) -> Iterator[rota.Scheduler]:
    with rota.open("memory://", clock=clock, owner="host-a") as s:
        yield s


def fail_once(scheduler: rota.Scheduler, *work_ids: str) -> None:
    """Each Work's first attempt fails (through the service, one start pass at a time), so
    each waits for its retry timer."""
    for work_id in work_ids:
        scheduler.submit(work_id, binding="flaky")
        (claimed,) = scheduler.service.lifecycle.start_pass().claimed
        attempt = claimed.attempt
        scheduler.service.lifecycle.finish(attempt.execution_id, attempt.epoch, FAILED)
        assert scheduler.work(work_id).state == "retry_wait"


def spy(
    monkeypatch: pytest.MonkeyPatch, calls: list[str], target: object, method: str, name: str
) -> None:
    real: Callable[..., Any] = getattr(target, method)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, method, recorded)


def test_one_pass_runs_recovery_then_lost_retry_then_starts(
    scheduler: rota.Scheduler, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler.register("flaky", lambda ctx: None, retry=rota.RetryPolicy(delays=(60.0, 60.0)))
    fail_once(scheduler, "retried")  # its timer is due at +60
    scheduler.submit("abandoned", binding="flaky")
    scheduler.service.lifecycle.start_pass()  # claimed, never launched: its lease lapses
    clock.advance(60)
    scheduler.submit("fresh", binding="flaky")
    calls: list[str] = []
    service = scheduler.service
    spy(monkeypatch, calls, service.recovery, "recovery_pass", "recovery")
    spy(monkeypatch, calls, service.lifecycle, "fire_due_timers", "lost retry")
    spy(monkeypatch, calls, service.admission, "settle_pass", "settle")
    spy(monkeypatch, calls, service.lifecycle, "start_pass", "start")
    head = scheduler.store.head().position  # the port's head (memory has no head_position)

    report = scheduler.tick()

    assert calls == ["recovery", "lost retry", "settle", "start"]
    assert (report.recovered, report.fired, report.started) == (1, 1, 2)
    # The log says the same: what each step appended follows the fixed order.
    steps = {"core.execution.recovered", "core.retry.fired", "core.execution.claimed"}
    appended = [(r.type, r.stream) for r in scheduler.store.read(head, 1000) if r.type in steps]
    assert appended == [
        ("core.execution.recovered", "work/abandoned"),
        ("core.retry.fired", "work/retried"),
        ("core.execution.claimed", "work/retried"),
        ("core.execution.claimed", "work/fresh"),
    ]


def test_when_recovery_fails_neither_lost_retry_nor_starts_run(
    scheduler: rota.Scheduler, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler.register("flaky", lambda ctx: None, retry=rota.RetryPolicy(delays=(0.0, 0.0)))
    fail_once(scheduler, "retried")
    scheduler.submit("fresh", binding="flaky")

    def broken(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("database is locked")

    calls: list[str] = []
    monkeypatch.setattr(scheduler.service.recovery, "recovery_pass", broken)
    spy(monkeypatch, calls, scheduler.service.lifecycle, "fire_due_timers", "lost retry")
    spy(monkeypatch, calls, scheduler.service.lifecycle, "start_pass", "start")
    report = scheduler.tick()
    assert report.errors == ["runtime recovery: store_unavailable: database is locked"]
    assert (calls, report.fired, report.started) == ([], 0, 0)
    assert scheduler.work("retried").state == "retry_wait"
    monkeypatch.undo()
    report = scheduler.tick()
    assert (report.fired, report.started) == (1, 2)


def test_when_lost_retry_fails_the_pass_starts_nothing(
    scheduler: rota.Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler.register("job", lambda ctx: None)
    scheduler.submit("w", binding="job")

    def broken(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("database is locked")

    calls: list[str] = []
    monkeypatch.setattr(scheduler.service.lifecycle, "fire_due_timers", broken)
    spy(monkeypatch, calls, scheduler.service.lifecycle, "start_pass", "start")
    report = scheduler.tick()
    assert report.errors == ["retry timers: store_unavailable: database is locked"]
    assert (calls, report.started) == ([], 0)
    assert scheduler.work("w").state == "ready"
    monkeypatch.undo()
    assert scheduler.tick().started == 1


def test_lost_retry_fires_sixteen_timers_a_page_by_default(clock: ManualClock) -> None:
    config = {"settings": {"concurrency": 20}}
    with rota.open("memory://", clock=clock, config=config) as scheduler:
        scheduler.register("flaky", lambda ctx: None, retry=rota.RetryPolicy(delays=(5.0, 5.0)))
        ids = [f"w{i:02}" for i in range(20)]
        for work_id in ids:
            scheduler.submit(work_id, binding="flaky")
        claimed = scheduler.service.lifecycle.start_pass().claimed
        assert len(claimed) == 20
        refused = scheduler.service.lifecycle.finish_many(
            [(c.attempt.execution_id, c.attempt.epoch, FAILED) for c in claimed]
        )
        assert refused == {}
        lifecycle = scheduler.service.lifecycle
        assert lifecycle.fire_due_timers() == lifecycle.fire_due_timers(16)  # nothing due yet
        clock.advance(5)
        first = lifecycle.fire_due_timers()
        assert (first.fired, first.has_more) == (16, True)
        second = lifecycle.fire_due_timers()
        assert (second.fired, second.has_more) == (4, False)
        assert all(scheduler.work(w).state == "ready" for w in ids)
        with pytest.raises(rota.Refusal) as refused_page:
            lifecycle.fire_due_timers(65)
        assert refused_page.value.code == "invalid_page"


def test_a_full_page_of_timers_wakes_the_loop_for_the_rest(clock: ManualClock) -> None:
    running, release = threading.Event(), threading.Event()

    def hog(ctx: rota.LaunchContext) -> None:
        running.set()
        release.wait(30)

    config = {"settings": {"concurrency": 1}}
    with rota.open("memory://", clock=clock, config=config) as scheduler:
        scheduler.host.timer_page = 2
        scheduler.register("flaky", lambda ctx: None, retry=rota.RetryPolicy(delays=(10.0, 10.0)))
        scheduler.register("hog", hog)
        fail_once(scheduler, "r1", "r2", "r3")
        scheduler.submit("hog", binding="hog")
        try:
            assert scheduler.tick().started == 1  # the hog holds the only slot from now on
            assert running.wait(10)  # its launch is done: nothing of it wakes the loop now
            clock.advance(10)
            scheduler.host.wake.clear()
            first = scheduler.tick()
            assert (first.fired, first.started) == (2, 0)
            assert scheduler.host.wake.is_set()  # more were due: the loop comes back at once
            scheduler.host.wake.clear()
            second = scheduler.tick()
            assert (second.fired, second.started) == (1, 0)
            assert not scheduler.host.wake.is_set()  # nothing left: the loop may sleep
            assert [scheduler.work(w).state for w in ("r1", "r2", "r3")] == ["ready"] * 3
        finally:
            release.set()
