"""The host cadence with real in-process executors and an injected clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

import rota
from rota.infrastructure.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 8, 1, 9, tzinfo=UTC))


@pytest.fixture
def scheduler(clock: ManualClock) -> Iterator[rota.Scheduler]:
    with rota.open("memory://", clock=clock, owner="host-a") as s:
        yield s


def log_text(s: rota.Scheduler) -> bytes:
    return msgspec.json.encode([r.event for r in s.store.read(0, 100_000)])


def test_a_run_once_work_runs_and_completes(scheduler: rota.Scheduler) -> None:
    scheduler.register("double", lambda ctx: {"twice": ctx.trigger["n"] * 2})
    scheduler.submit("w", binding="double", input={"n": 21})
    scheduler.run_until_idle(timeout=10)
    work = scheduler.work("w")
    assert work is not None
    assert work.state == "completed"
    (attempt,) = work.attempts
    assert (attempt.outcome, attempt.data) == ("completed", {"twice": 42})
    assert attempt.segments[0].invoke == "called"
    types = [e.type for e in scheduler.events()]
    assert types == [
        "core.work.submitted",  # carrying its input
        "core.execution.claimed",  # carrying its invoke marker
        "core.capacity.claimed",
        "core.execution.completed",
    ]


def test_a_failure_waits_for_its_retry_timer_and_run_until_idle_returns(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    def flaky(ctx: rota.LaunchContext) -> str:
        if ctx.attempt == 1:
            raise rota.Fail("quota", "quota reached")
        return "ok"

    scheduler.register("flaky", flaky)
    scheduler.submit("w", binding="flaky")
    scheduler.run_until_idle(timeout=10)
    work = scheduler.work("w")
    assert work is not None and work.state == "retry_wait"
    assert work.attempts[0].error == rota.ErrorView(code="quota", message="quota reached")
    assert msgspec.to_builtins(work.retry) == {
        "failures": 1,
        "budget": 3,
        "next_due": "2026-08-01T09:05:00.000000Z",
        "blocked_reason": None,
    }
    clock.advance(300)
    scheduler.run_until_idle(timeout=10)
    work = scheduler.work("w")
    assert work is not None and work.state == "completed"
    assert [a.number for a in work.attempts] == [1, 2]
    fired = [e for e in scheduler.events() if e.type == "core.retry.fired"]
    assert [e.delivery_id for e in fired] == ["retry/w/1"]


def test_unhandled_exception_text_never_reaches_the_log(scheduler: rota.Scheduler) -> None:
    canary = "sk-canary-7f3a9"

    def leaky(ctx: rota.LaunchContext) -> None:
        raise RuntimeError(f"provider said: token {canary} rejected")

    scheduler.register("leaky", leaky)
    scheduler.submit("w", binding="leaky")
    scheduler.run_until_idle(timeout=10)
    work = scheduler.work("w")
    assert work is not None
    assert msgspec.to_builtins(work.attempts[0].error) == {
        "code": "unhandled_exception",
        "message": "RuntimeError",
    }
    assert canary.encode() not in log_text(scheduler)


def test_run_environment_reaches_the_executor_and_never_the_log(
    tmp_path: Path, clock: ManualClock
) -> None:
    secret = "canary-secret-51e0"
    seen: list[str] = []

    def environment(work: object, attempt: object) -> dict[str, str]:
        return {"API_TOKEN": secret}

    with rota.open(tmp_path / "env.db", clock=clock, environment=environment) as scheduler:
        scheduler.register("uses_env", lambda ctx: seen.append(ctx.env["API_TOKEN"]) or "ok")
        scheduler.submit("w", binding="uses_env")
        scheduler.run_until_idle(timeout=10)
        assert seen == [secret]
        work = scheduler.work("w")
        assert work is not None and work.state == "completed"
        phases = work.attempts[0].segments[0].phases
        assert [(p.name, p.outcome) for p in phases] == [("environment", "ok")]
        assert secret.encode() not in log_text(scheduler)
        assert secret.encode() not in (tmp_path / "env.db").read_bytes()


def test_unavailable_environment_fails_before_the_executor_is_called(clock: ManualClock) -> None:
    called: list[int] = []

    def environment(work: object, attempt: object) -> dict[str, str]:
        raise OSError("vault unreachable")

    with rota.open("memory://", clock=clock, environment=environment) as scheduler:
        scheduler.register("job", lambda ctx: called.append(1))
        scheduler.submit("w", binding="job")
        scheduler.run_until_idle(timeout=10)
        work = scheduler.work("w")
        assert work is not None
        attempt = work.attempts[0]
        assert attempt.error.code == "environment_unavailable"
        assert attempt.segments[0].invoke == "pending"
        assert called == []
        assert b"vault" not in log_text(scheduler)


class SlowExecutor(rota.Executor):
    """Blocks its launch until released: a container that takes ages to create."""

    name = "slow"
    pool = "agents"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def launch(self, ctx: rota.LaunchContext, done: object) -> None:
        self.entered.set()
        with ctx.phase("container"):
            assert self.release.wait(30)
        done(rota.Result(data="created"))  # type: ignore[operator]


def test_a_held_launch_outlasts_its_lease(scheduler: rota.Scheduler, clock: ManualClock) -> None:
    slow = SlowExecutor()
    scheduler.register("slow", executor=slow)
    scheduler.submit("w", binding="slow")
    scheduler.tick()
    assert slow.entered.wait(10)
    for _ in range(9):  # three lease durations, renewed every third
        clock.advance(20)
        report = scheduler.tick()
        assert report.lost == 0
    slow.release.set()
    scheduler.run_until_idle(timeout=10)
    work = scheduler.work("w")
    assert work is not None and work.state == "completed"
    renewals = [e for e in scheduler.events() if e.type == "core.execution.renewed"]
    assert len(renewals) >= 8
    phases = work.attempts[0].segments[0].phases
    assert [(p.name, p.outcome) for p in phases] == [("container", "ok")]


def test_negative_control_without_renewal_the_lease_is_lost(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    slow = SlowExecutor()
    scheduler.register("slow", executor=slow)
    scheduler.submit("w", binding="slow")
    scheduler.tick()
    assert slow.entered.wait(10)
    clock.advance(61)
    slow.release.set()
    for _ in range(100):
        scheduler.host.wake.wait(1)
        if not scheduler.host.results.empty():
            break
    scheduler.host.wake.clear()
    scheduler.tick()
    # The refused result is not recorded; recovery cannot adopt the attempt (this executor
    # has no `recover`): it fails it (`recovery_failed`) rather than recovering it again
    # every lease.
    for _ in range(100):
        work = scheduler.work("w")
        if work is not None and work.attempts[0].outcome is not None:
            break
        scheduler.host.wake.wait(0.05)
        scheduler.host.wake.clear()
    work = scheduler.work("w")
    assert work is not None
    attempt = work.attempts[0]
    assert attempt.outcome == "failed" and attempt.error is not None
    assert attempt.error.code == "recovery_failed"
    assert not any(e.type == "core.execution.completed" for e in scheduler.events())


def test_hold_ends_with_lease_lost_when_a_renewal_is_refused() -> None:
    config = {"settings": {"lease_seconds": 0.3}}
    with rota.open("memory://", config=config) as scheduler:
        scheduler.register("job", lambda ctx: None)
        scheduler.submit("w", binding="job")
        claimed = scheduler.service.lifecycle.start_pass().claimed[0]
        execution, epoch = claimed.attempt.execution_id, claimed.attempt.epoch
        hold = scheduler.hold(execution, epoch)
        scheduler.service.lifecycle.release(execution, epoch, "test")
        assert hold.cancel.wait(10)
        assert isinstance(hold.reason, rota.LeaseLost)
        hold.stop()


def test_hold_keeps_a_short_lease_alive() -> None:
    config = {"settings": {"lease_seconds": 0.3}}
    with rota.open("memory://", config=config) as scheduler:
        scheduler.register("job", lambda ctx: None)
        scheduler.submit("w", binding="job")
        claimed = scheduler.service.lifecycle.start_pass().claimed[0]
        execution, epoch = claimed.attempt.execution_id, claimed.attempt.epoch
        with scheduler.hold(execution, epoch) as hold:
            done = threading.Event()
            # Work for three lease durations while the hold renews.
            assert not done.wait(0.9)
            assert not hold.lost and hold.renewals >= 2
            scheduler.service.lifecycle.finish(execution, epoch, rota.Result(data="late but held"))
        work = scheduler.work("w")
        assert work is not None and work.state == "completed"


def test_a_reentrant_tick_coalesces(scheduler: rota.Scheduler) -> None:
    inner: list[bool] = []

    def reenter(ctx: rota.LaunchContext) -> None:
        inner.append(scheduler.tick().coalesced)

    scheduler.register("reenter", reenter, inline=True)
    scheduler.submit("w", binding="reenter")
    scheduler.tick()
    assert inner == [True]


def test_same_submit_twice_is_a_noop_and_another_definition_is_refused(
    scheduler: rota.Scheduler,
) -> None:
    scheduler.register("job", lambda ctx: None)
    scheduler.submit("w", binding="job", input={"a": 1})
    before = scheduler.store.head().position
    scheduler.submit("w", binding="job", input={"a": 1})
    assert scheduler.store.head().position == before
    with pytest.raises(rota.Refusal) as caught:
        scheduler.submit("w", binding="job", scope="root/other")
    assert caught.value.code == "work_conflict"


def test_the_daemon_writes_audit_checkpoints_as_it_runs(tmp_path: Path) -> None:
    from rota.replay.audit import verify_chain
    from rota.replay.checkpoint import latest

    notes = tmp_path / "checkpoints"
    config = {"audit": {"checkpoint_dir": str(notes), "every_events": 1}}
    with rota.open("memory://", config=config) as scheduler:
        scheduler.register("job", lambda ctx: "ok")
        scheduler.submit("w", binding="job")
        stop = threading.Event()
        runner = threading.Thread(target=scheduler.run, args=(stop,))
        runner.start()
        for _ in range(200):
            view = scheduler.work("w")
            if view is not None and view.state == "completed":
                break
            scheduler.store.wait_for_commit(scheduler.store.head().position, 0.1)
        scheduler.stop()
        runner.join(timeout=30)
        checkpoint = latest(notes)
        assert checkpoint is not None
        assert checkpoint.position == scheduler.store.head().position
        assert verify_chain(scheduler.store, checkpoint=checkpoint).ok


class ManyPhases(rota.Executor):
    """A launch that walks through more phases than a segment keeps."""

    name = "many_phases"
    pool = "agents"

    def __init__(self, phases: int) -> None:
        self.phases = phases
        self.bodies_run = 0

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        for n in range(self.phases):
            with ctx.phase(f"step-{n}"):
                self.bodies_run += 1
        done(rota.Result(data="launched"))


def test_phases_past_the_cap_leave_the_trail_short_and_the_launch_goes_on(
    scheduler: rota.Scheduler,
) -> None:
    from rota.domain.fences import MAX_LAUNCH_PHASES

    many = ManyPhases(MAX_LAUNCH_PHASES + 4)
    scheduler.register("many", executor=many)
    scheduler.submit("w", binding="many")
    scheduler.run_until_idle(timeout=10)
    work = scheduler.work("w")
    assert work is not None and work.state == "completed"
    assert many.bodies_run == MAX_LAUNCH_PHASES + 4  # every phase's work ran
    phases = work.attempts[0].segments[0].phases
    assert len(phases) == MAX_LAUNCH_PHASES
    assert all(p.outcome == "ok" for p in phases)


def test_a_phase_write_refused_by_a_lost_lease_does_not_raise_into_the_launch(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    reached: list[str] = []

    class LateLaunch(rota.Executor):
        name = "late"
        pool = "agents"
        inline = True  # launched on the ticking thread: the test reads `reached` after tick()

        def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
            clock.advance(3600)  # the lease lapses while the launch runs
            with ctx.phase("container"):  # both phase writes are refused: lease lost
                reached.append("body")
            reached.append("after")

    scheduler.register("late", executor=LateLaunch())
    scheduler.submit("w", binding="late")
    scheduler.tick()
    assert reached == ["body", "after"]
    work = scheduler.work("w")
    assert work is not None
    assert work.attempts[0].segments[0].phases == ()


class CancellableLaunch(rota.Executor):
    """A launch that waits for its cancellation (a container that is slow to come up)."""

    name = "cancellable"
    pool = "agents"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.cancelled = threading.Event()
        self.reason: BaseException | None = None

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        self.entered.set()
        if ctx.cancel.wait(30):
            self.reason = ctx.cancel_reason
            self.cancelled.set()


def test_a_lost_lease_ends_the_launch_at_once(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    """The host's renewal, like LeaseHold, cancels a launch whose renewal is refused."""
    launch = CancellableLaunch()
    scheduler.register("slowstart", executor=launch)
    scheduler.submit("w", binding="slowstart")
    scheduler.tick()
    assert launch.entered.wait(10)
    clock.advance(61)  # the lease lapsed before its renewal: the renewal is refused
    report = scheduler.tick()
    assert report.lost == 1
    assert launch.cancelled.wait(5), "the launch was left running to its next fenced write"
    assert isinstance(launch.reason, rota.LeaseLost)


def test_a_lost_lease_leaves_a_launched_running_attempt_to_recovery(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    """Negative control: once launched, a running attempt whose renewal is refused is not
    cancelled by the renewal step (recovery decides what becomes of it)."""
    release = threading.Event()
    running: list[rota.LaunchContext] = []

    class Detached(rota.Executor):
        name = "detached"
        pool = "agents"
        inline = True  # launched on the ticking thread: launched once tick() returns

        def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
            running.append(ctx)
            threading.Thread(target=lambda: release.wait(30) and None, daemon=True).start()

    scheduler.register("detached", executor=Detached())
    scheduler.submit("w", binding="detached")
    scheduler.tick()
    assert len(running) == 1
    clock.advance(61)
    scheduler.host.runtime_recovery.run = lambda report: None  # type: ignore[method-assign]
    report = scheduler.tick()
    assert report.lost == 1
    assert not running[0].cancel.is_set()
    release.set()
