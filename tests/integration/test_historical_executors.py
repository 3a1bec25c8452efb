"""Historical executors (seed 001): the executor implementation of an older configuration
generation keeps serving recovery, stop and control of the attempts pinned to it; a
missing generation is an explicit unsupported error, never a silent replacement, a
leaked capacity slot or a control intent left dispatched for ever."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.infrastructure.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 8, 1, 9, tzinfo=UTC))


@pytest.fixture
def scheduler(clock: ManualClock) -> Iterator[rota.Scheduler]:
    with rota.open("memory://", clock=clock) as s:
        yield s


def _blocking(entered: threading.Event) -> Any:
    def job(ctx: rota.LaunchContext) -> str:
        entered.set()
        ctx.cancel.wait(30)  # runs until interrupted
        return "interrupted"

    return job


def test_a_second_register_keeps_the_old_implementation_for_its_attempts(
    scheduler: rota.Scheduler,
) -> None:
    entered = threading.Event()
    scheduler.register("job", _blocking(entered))
    scheduler.submit("w", binding="job", kind="standing", input=1, input_key="1")
    scheduler.tick()
    assert entered.wait(10)
    first = scheduler.service.generation
    scheduler.register("job", lambda ctx: "new implementation", timeout_seconds=60, replace=True)
    assert scheduler.service.generation != first
    scheduler.interrupt("w")  # the attempt pinned to the first generation
    scheduler.accept("w", 2, key="2")
    report = scheduler.run_until_idle(timeout=20)
    assert report.errors == []
    work = scheduler.work("w")
    assert work is not None
    assert [c.state for c in work.controls] != ["dispatched"]
    _, second = work.attempts
    assert second.data == "new implementation"  # the slot was freed, the Work went on
    assert scheduler.capacity()["pools"]["agents"]["in_use"] == 0


def test_after_a_restart_a_missing_generation_is_an_explicit_unsupported_error(
    memory_url: str, clock: ManualClock
) -> None:
    entered = threading.Event()
    with rota.open(memory_url, clock=clock) as before:
        before.register("job", _blocking(entered))
        before.submit("w", binding="job")
        before.tick()
        assert entered.wait(10)
        old = before.service.generation
    # The host stopped (its lease released); the next one runs another configuration.
    with rota.open(memory_url, clock=clock) as after:
        after.register("job", lambda ctx: "replacement", timeout_seconds=60)
        assert after.service.generation != old
        report = after.tick()
        assert any(e.startswith("unsupported_generation: w/1") for e in report.errors)
        work = after.work("w")
        assert work is not None and len(work.attempts) == 1  # never given to "replacement"

    with rota.open(memory_url, clock=clock) as fixed:
        fixed.register("job", lambda ctx: "replacement", timeout_seconds=60)
        fixed.register_historical(old, "job", lambda ctx: "the old implementation")
        report = fixed.run_until_idle(timeout=20)
        assert not any(e.startswith("unsupported_generation") for e in report.errors)
        work = fixed.work("w")
        assert work is not None and work.attempts[0].state != "running"


def test_the_config_can_name_generations_the_current_implementation_serves(
    memory_url: str, clock: ManualClock
) -> None:
    entered = threading.Event()
    with rota.open(memory_url, clock=clock) as before:
        before.register("job", _blocking(entered))
        before.submit("w", binding="job")
        before.tick()
        assert entered.wait(10)
        old = before.service.generation
    config = {"historical": [{"generation": old, "executors": ["job"]}]}
    with rota.open(memory_url, clock=clock, config=config) as after:
        after.register("job", lambda ctx: "current", timeout_seconds=60)
        report = after.run_until_idle(timeout=20)
        assert not any(e.startswith("unsupported_generation") for e in report.errors)


def test_a_historical_generation_in_the_config_is_validated() -> None:
    with pytest.raises(rota.RotaError) as caught:
        rota.open("memory://", config={"historical": [{"generation": "not-a-hash"}]})
    assert caught.value.code == "invalid_config"
    assert "historical[0].generation" in str(caught.value)
