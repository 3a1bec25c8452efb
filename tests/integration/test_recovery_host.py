"""Recovery through the real host: adopt, relaunch, lose, unsupported generations, order."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import rota
from rota.application.errors import StoreUnavailable
from rota.infrastructure.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 10, 1, 9, tzinfo=UTC))


@pytest.fixture
def scheduler(memory_url: str, clock: ManualClock) -> Iterator[rota.Scheduler]:
    with rota.open(memory_url, clock=clock, owner="host-a") as s:
        yield s


def wait_for_result(scheduler: rota.Scheduler) -> None:
    for _ in range(200):
        if not scheduler.host.results.empty():
            return
        scheduler.host.wake.wait(0.05)
        scheduler.host.wake.clear()
    raise AssertionError("no result arrived")


def kinds(scheduler: rota.Scheduler, work: str) -> list[str]:
    view = scheduler.work(work)
    assert view is not None
    return [s.kind for s in view.attempts[-1].segments]


def test_a_running_call_whose_lease_lapsed_is_adopted_not_rerun(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    release, calls = threading.Event(), []

    def slow(ctx: rota.LaunchContext) -> str:
        calls.append(ctx.epoch)
        assert release.wait(30)
        return "finished"

    scheduler.register("slow", slow)
    scheduler.submit("w", binding="slow")
    scheduler.tick()
    clock.advance(61)  # no renewal: the lease lapses while the call runs
    report = scheduler.tick()
    assert report.lost == 1 and report.recovered == 1 and report.relaunched == 0
    release.set()
    wait_for_result(scheduler)
    scheduler.tick()
    work = scheduler.work("w")
    assert work is not None and work.state == "completed"
    assert calls == [1]  # never run again
    attempt = work.attempts[0]
    assert attempt.epoch == 2 and attempt.data == "finished"
    assert kinds(scheduler, "w") == ["start", "recovered"]


def test_a_claim_whose_executor_was_never_called_is_relaunched(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    calls: list[int] = []
    scheduler.register("job", lambda ctx: calls.append(ctx.epoch) or "ok", inline=True)
    scheduler.submit("w", binding="job")
    scheduler.service.lifecycle.start_pass()  # claimed, then the host "crashed" before invoking
    clock.advance(60)
    report = scheduler.tick()
    assert report.relaunched == 1
    scheduler.tick()
    work = scheduler.work("w")
    assert work is not None and work.state == "completed"
    assert calls == [2]
    assert work.retry.failures == 0
    assert kinds(scheduler, "w") == ["start", "relaunched"]


def test_an_attempt_of_a_dead_process_is_lost_and_fails_closed(
    scheduler: rota.Scheduler, clock: ManualClock, memory_url: str
) -> None:
    dead_owner = f"{socket.gethostname()}:999999999:gone"
    with rota.open(memory_url, clock=clock, owner=dead_owner) as crashed:
        crashed.register("job", lambda ctx: None)
        crashed.submit("w", binding="job")
        claimed = crashed.service.lifecycle.start_pass().claimed[0]
        crashed.service.lifecycle.invoke(claimed.attempt.execution_id, 1)
        crashed.host.held.clear()  # it dies holding nothing it could release
    scheduler.register("job", lambda ctx: None)
    clock.advance(61)
    scheduler.tick()
    for _ in range(200):
        view = scheduler.work("w")
        if view is not None and view.state == "failed":
            break
        scheduler.host.wake.wait(0.05)
        scheduler.host.wake.clear()
    view = scheduler.work("w")
    assert view is not None and view.state == "failed"
    assert view.retry.blocked_reason == "lost"
    assert view.attempts[0].outcome == "lost"


def test_an_attempt_of_an_unknown_owner_fails_closed_and_is_stopped_not_recovered_again(
    scheduler: rota.Scheduler, clock: ManualClock, memory_url: str
) -> None:
    with rota.open(memory_url, clock=clock, owner="elsewhere:1:x") as other:
        other.register("job", lambda ctx: None)
        other.submit("w", binding="job")
        claimed = other.service.lifecycle.start_pass().claimed[0]
        other.service.lifecycle.invoke(claimed.attempt.execution_id, 1)
        other.host.held.clear()
    scheduler.register("job", lambda ctx: None)
    clock.advance(61)
    report = scheduler.tick()
    assert report.recovered == 1
    for _ in range(200):  # its recovery runs off the loop
        view = scheduler.work("w")
        if view is not None and view.attempts[0].outcome is not None:
            break
        scheduler.host.wake.wait(0.05)
        scheduler.host.wake.clear()
    scheduler.tick()  # the stop verification asks the executor
    view = scheduler.work("w")
    assert view is not None
    # No evidence: a safe failure whose slot is kept: the call may still run on the other
    # host, so this process cannot verify its stop.
    first = view.attempts[0]
    assert first.outcome == "failed" and first.error is not None
    assert first.error.code == "recovery_failed" and not first.stop_confirmed
    clock.advance(400)  # past its retry delay
    assert scheduler.tick().recovered == 0  # not recovered again at a higher epoch
    view = scheduler.work("w")
    assert view is not None and len(view.attempts) == 1  # nothing replaces it yet
    scheduler.confirm_stopped("w/1", 2)  # an operator checked the other host
    scheduler.run_until_idle(timeout=10)
    view = scheduler.work("w")
    assert view is not None and view.state == "completed" and len(view.attempts) == 2


def test_a_missing_generation_is_unsupported_never_replaced(
    scheduler: rota.Scheduler, clock: ManualClock, memory_url: str
) -> None:
    scheduler.register("job", lambda ctx: None)
    scheduler.submit("w", binding="job")
    scheduler.service.lifecycle.start_pass()
    scheduler.service.lifecycle.invoke("w/1", 1)
    # A process that registers one more executor has another configuration generation;
    # it does not have the implementation the attempt was pinned to (in this process a
    # replaced registration would keep serving it: test_historical_executors.py).
    scheduler.close()
    with rota.open(memory_url, clock=clock, owner="host-b") as later:
        # Registered in this order, the process never has the attempt's generation.
        later.register("another", lambda ctx: None)
        later.register("job", lambda ctx: None)
        clock.advance(61)
        report = later.tick()
        assert report.recovered == 0
        assert any(e.startswith("unsupported_generation: w/1") for e in report.errors)
        view = later.work("w")
        assert view is not None and view.attempts[0].epoch == 1


def test_when_recovery_fails_the_pass_starts_nothing(
    scheduler: rota.Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler.register("job", lambda ctx: None)
    scheduler.submit("w", binding="job")

    def broken(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("database is locked")

    monkeypatch.setattr(scheduler.service.recovery, "recovery_pass", broken)
    report = scheduler.tick()
    assert report.started == 0
    assert report.errors == ["runtime recovery: store_unavailable: database is locked"]
    monkeypatch.undo()
    assert scheduler.tick().started == 1


def test_a_timed_out_attempt_keeps_its_slot_until_its_stop_is_confirmed(clock: ManualClock) -> None:
    config = {"settings": {"concurrency": 1}}
    release = threading.Event()
    with rota.open("memory://", clock=clock, config=config) as scheduler:
        scheduler.register("slow", lambda ctx: release.wait(30), timeout_seconds=100)
        scheduler.register("next", lambda ctx: "ran")
        scheduler.submit("a", binding="slow")
        scheduler.tick()
        scheduler.submit("b", binding="next")
        for _ in range(5):
            clock.advance(20)
            scheduler.tick()
        view = scheduler.work("a")
        assert view is not None and view.attempts[0].outcome == "timed_out"
        assert not view.attempts[0].stop_confirmed
        assert scheduler.work("b").state == "ready"
        release.set()
        scheduler.run_until_idle(timeout=10)
        assert scheduler.work("a").attempts[0].stop_confirmed
        assert scheduler.work("b").state == "completed"


def test_a_failed_recovery_of_a_live_owner_here_is_stopped_once_that_process_is_gone(
    scheduler: rota.Scheduler, clock: ManualClock, memory_url: str
) -> None:
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    owner = f"{socket.gethostname()}:{alive.pid}:paused"
    try:
        with rota.open(memory_url, clock=clock, owner=owner) as paused:
            paused.register("job", lambda ctx: None)
            paused.submit("w", binding="job")
            claimed = paused.service.lifecycle.start_pass().claimed[0]
            paused.service.lifecycle.invoke(claimed.attempt.execution_id, 1)
            paused.host.held.clear()  # it stalls holding nothing it could release
        scheduler.register("job", lambda ctx: None)
        clock.advance(61)
        scheduler.tick()
        for _ in range(200):  # its recovery runs off the loop
            view = scheduler.work("w")
            if view is not None and view.attempts[0].outcome is not None:
                break
            scheduler.host.wake.wait(0.05)
            scheduler.host.wake.clear()
        scheduler.tick()
        view = scheduler.work("w")
        assert view is not None and view.attempts[0].error is not None
        assert view.attempts[0].error.code == "recovery_failed"
        assert not view.attempts[0].stop_confirmed
        # Its owner lives: the call may run there, so the stop is not verified from here.
        assert scheduler.executors["job"].stop("w/1", 2, None) == "unknown"
    finally:
        alive.kill()
        alive.wait(timeout=10)
    scheduler.host.stops.request("w/1")  # ask again now (the check is paced in real time)
    for _ in range(200):
        scheduler.tick()
        view = scheduler.work("w")
        if view is not None and view.attempts[0].stop_confirmed:
            break
        scheduler.host.wake.wait(0.05)
        scheduler.host.wake.clear()
    view = scheduler.work("w")
    assert view is not None and view.attempts[0].stop_confirmed  # its owner is gone
