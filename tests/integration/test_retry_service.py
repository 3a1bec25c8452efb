"""Retry rules through the real service and host, on wall time frozen by freezegun."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import msgspec
import pytest
from freezegun import freeze_time

import rota
from rota.application.service import SchedulerService
from rota.application.timestamps import parse_timestamp
from rota.projections.scheduler import SchedulerProjection


def always_fails(ctx: rota.LaunchContext) -> None:
    raise rota.Fail("boom", "always fails")


@pytest.fixture
def frozen() -> Iterator[object]:
    with freeze_time("2026-09-01 08:00:00", tick=False) as frozen_time:
        yield frozen_time


def tick_twice(scheduler: rota.Scheduler) -> None:
    scheduler.tick()  # start (the inline callable runs and reports)
    scheduler.tick()  # observe


def test_failures_wait_five_then_ten_minutes_then_exhaust(frozen: object) -> None:
    with rota.open("memory://") as scheduler:
        scheduler.register("job", always_fails, inline=True)
        scheduler.submit("w", binding="job")
        tick_twice(scheduler)
        assert scheduler.work("w").retry.next_due == "2026-09-01T08:05:00.000000Z"
        frozen.tick(299)  # type: ignore[attr-defined]
        tick_twice(scheduler)
        assert len(scheduler.work("w").attempts) == 1
        frozen.tick(1)  # type: ignore[attr-defined]
        tick_twice(scheduler)
        work = scheduler.work("w")
        assert work is not None and len(work.attempts) == 2
        assert work.retry.next_due == "2026-09-01T08:15:00.000000Z"
        frozen.tick(600)  # type: ignore[attr-defined]
        tick_twice(scheduler)
        work = scheduler.work("w")
        assert work is not None
        assert work.state == "failed"
        assert msgspec.to_builtins(work.retry) == {
            "failures": 3,
            "budget": 3,
            "next_due": None,
            "blocked_reason": "exhausted",
        }
        scheduler.retry("w", reason="config fixed")
        assert scheduler.work("w").state == "ready"
        scheduler.retry("w")  # repeating the same request is a no-op
        tick_twice(scheduler)
        assert len(scheduler.work("w").attempts) == 4


def test_rebuilding_from_the_log_reproduces_every_armed_timer(frozen: object) -> None:
    with rota.open("memory://") as scheduler:
        scheduler.register("job", always_fails, inline=True)
        for i in range(5):
            scheduler.submit(f"w{i}", binding="job")
            frozen.tick(7)  # type: ignore[attr-defined]
            tick_twice(scheduler)
        live = dict(scheduler.service.projection.timers)
        assert len(live) == 5
        fresh = SchedulerProjection()
        for r in scheduler.store.read(0, 100_000):
            fresh.apply(r.position, r.stream, r.version, parse_timestamp(r.recorded_at), r.event)
        assert fresh.timers == live
        assert fresh.digest() == scheduler.service.projection.digest()


def test_manual_retry_racing_a_due_timer_gives_exactly_one_attempt(
    memory_url: str, frozen: object
) -> None:
    path = memory_url
    with rota.open(path, owner="a") as scheduler:
        scheduler.register("job", always_fails, inline=True)
        scheduler.submit("w", binding="job")
        tick_twice(scheduler)
        frozen.tick(300)  # type: ignore[attr-defined]
        other = rota.open(path, owner="b")
        try:
            other.register("job", always_fails, inline=True)
            barrier = threading.Barrier(2)
            errors: list[BaseException] = []

            def manual(service: SchedulerService) -> None:
                barrier.wait()
                try:
                    service.lifecycle.request_retry("w")
                except rota.Refusal as refusal:
                    errors.append(refusal)

            def timer(service: SchedulerService) -> None:
                barrier.wait()
                service.lifecycle.fire_due_timers()

            threads = [
                threading.Thread(target=manual, args=(other.service,)),
                threading.Thread(target=timer, args=(scheduler.service,)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            scheduler.tick()
            other.tick()
            scheduler.tick()
            other.tick()
            claims = [e for e in scheduler.events() if e.type == "core.execution.claimed"]
            assert [c.data["attempt"] for c in claims] == [1, 2]
            assert all(r.code in {"nothing_to_retry"} for r in errors)  # type: ignore[attr-defined]
        finally:
            other.close()
