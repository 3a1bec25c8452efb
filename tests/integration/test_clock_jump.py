"""A clock jump does not fail running work (issue 15 item 2), with an injected clock.

`ManualClock.advance` lets time pass (wall and monotonic); `ManualClock.step` jumps wall time
alone, as an NTP correction or a resumed VM does. For in-process calls and shell jobs, after
a step back, a step forward, or back then forward, the Work completes exactly once: no
`lost` with `not_running`, no failure charged, no timeout, and the log holds either no
recovery at all or this host's adoption of its own attempt. On PostgreSQL the database's
clock is the one that jumps.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres import DatabaseClock, temporary_schema
from trial_scale import scale

import rota
from rota.domain.results import Result
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.executors.inproc import InProcessExecutor
from rota.infrastructure.executors.shell_supervision import Run, _stop_reason
from rota.scheduler import default_owner

WAIT = 10.0  # seconds: a bound for waits that normally end in milliseconds
FAILURES = {"core.execution.lost", "core.execution.failed", "core.execution.timed_out"}


class Blocked:
    """An in-process callable that runs until released, counting its calls."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.returned = threading.Event()
        self.calls = 0

    def __call__(self, ctx: rota.LaunchContext) -> str:
        self.calls += 1
        assert self.release.wait(WAIT)
        self.returned.set()
        return "finished"


def types(s: rota.Scheduler) -> list[str]:
    return [e.type for e in s.events()]


def recovered(s: rota.Scheduler) -> list[dict[str, Any]]:
    return [e.data for e in s.events() if e.type == "core.execution.recovered"]


def settle(s: rota.Scheduler, work: str = "w") -> dict[str, Any]:
    """Tick (without moving the clock) until the Work ends; its view."""
    for _ in range(int(WAIT / 0.02)):
        s.tick()
        view = s.work(work)
        assert view is not None
        if view.state in ("completed", "failed"):
            return view
        s.host.wake.wait(0.02)
        s.host.wake.clear()
    raise AssertionError(f"{work} did not end: {types(s)}")


def passes(s: rota.Scheduler, clock: ManualClock, seconds: float, every: float = 10) -> None:
    """Let `seconds` pass, ticking every `every` seconds (the daemon's cadence)."""
    while seconds > 0:
        clock.advance(min(every, seconds))
        seconds -= every
        s.tick()


def assert_completed_once(s: rota.Scheduler, view: dict[str, Any]) -> None:
    assert view.state == "completed", types(s)
    assert [a.outcome for a in view.attempts] == ["completed"]
    assert view.attempts[0].data == "finished"
    assert types(s).count("core.execution.completed") == 1
    assert not FAILURES & set(types(s)), types(s)
    assert not [e for e in s.events() if e.type == "core.timer.armed"]
    for claim in recovered(s):  # only this host, adopting its own attempt
        assert claim["mode"] == "adopt" and claim["reason"] == "lease_expired"
        assert claim["owner"] == claim["previous_owner"]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 10, 1, 9, tzinfo=UTC))


@pytest.fixture
def scheduler(clock: ManualClock) -> Iterator[rota.Scheduler]:
    with rota.open("memory://", clock=clock) as s:
        yield s


@pytest.fixture
def call(scheduler: rota.Scheduler) -> Blocked:
    fn = Blocked()
    scheduler.register("slow", fn)
    scheduler.submit("w", binding="slow")
    assert scheduler.tick().started == 1
    return fn


def test_back_two_hours_then_forward_two_hours_adopts_the_running_call(
    scheduler: rota.Scheduler, clock: ManualClock, call: Blocked
) -> None:
    passes(scheduler, clock, 30)
    clock.step(-7200)
    passes(scheduler, clock, 120)  # renewals cannot move the lease past its expiry
    clock.step(7200)  # ... so it lapsed: recovery adopts the attempt this process runs
    report = scheduler.tick()
    assert report.recovered == 1 and report.relaunched == 0
    call.release.set()
    view = settle(scheduler)
    assert_completed_once(scheduler, view)
    assert len(recovered(scheduler)) == 1 and "core.execution.adopted" in types(scheduler)
    assert view.attempts[0].epoch == 2 and call.calls == 1


def test_a_call_that_returns_while_its_lease_lapsed_completes(
    scheduler: rota.Scheduler, clock: ManualClock, call: Blocked
) -> None:
    # The trial: the result reached the host after the jump, was refused (the lease
    # had lapsed), and recovery found no call running: `lost`, `not_running`, Work failed.
    clock.step(-7200)
    passes(scheduler, clock, 120)
    clock.step(7200)
    call.release.set()
    assert call.returned.wait(WAIT)
    for _ in range(int(WAIT / 0.02)):
        if not scheduler.host.results.empty():
            break
        scheduler.host.wake.wait(0.02)
        scheduler.host.wake.clear()
    view = settle(scheduler)
    assert_completed_once(scheduler, view)
    assert "core.execution.adopted" in types(scheduler)
    assert call.calls == 1


def test_forward_two_hours_moves_the_deadline_instead_of_timing_out(
    scheduler: rota.Scheduler, clock: ManualClock, call: Blocked
) -> None:
    passes(scheduler, clock, 60)
    jumped = clock.step(7200)  # past the one-hour deadline by wall time; 60 s of run time
    report = scheduler.tick()
    assert report.recovered == 1 and report.timed_out == 0
    [claim] = recovered(scheduler)
    # Moved to now plus the run time left (3600 - 60 s), measured by the monotonic clock.
    assert datetime.fromisoformat(claim["deadline"]) == jumped.replace(hour=12, minute=0)
    passes(scheduler, clock, 600)  # later passes neither time it out nor lose it
    call.release.set()
    view = settle(scheduler)
    assert_completed_once(scheduler, view)
    assert view.attempts[0].deadline.startswith("2026-10-01T12:00:00")


def test_back_two_hours_alone_keeps_renewing_and_recovers_nothing(
    scheduler: rota.Scheduler, clock: ManualClock, call: Blocked
) -> None:
    clock.step(-7200)
    renewed = 0
    for _ in range(12):  # two minutes of passes, two hours behind the lease's wall time
        clock.advance(10)
        renewed += scheduler.tick().renewed
    assert renewed >= 5  # due by elapsed (monotonic) time, though the wall went back
    call.release.set()
    view = settle(scheduler)
    assert_completed_once(scheduler, view)
    assert recovered(scheduler) == []
    assert view.attempts[0].epoch == 1


def test_run_time_still_times_out_after_a_step_forward(
    scheduler: rota.Scheduler, clock: ManualClock, call: Blocked
) -> None:
    # Negative control: the timeout is run time, not disabled. After the jump moved the
    # deadline, an hour of run time times the attempt out.
    clock.step(7200)
    scheduler.tick()
    passes(scheduler, clock, 3600, every=20)
    assert "core.execution.timed_out" in types(scheduler)
    call.release.set()


def test_a_step_back_never_times_out_early(
    scheduler: rota.Scheduler, clock: ManualClock, call: Blocked
) -> None:
    # An hour of run time with the wall clock two hours behind: not timed out (the wall
    # deadline is not due), so a step back gives the attempt the step's length at most.
    clock.step(-7200)
    passes(scheduler, clock, 3600, every=20)
    assert "core.execution.timed_out" not in types(scheduler)
    call.release.set()
    assert_completed_once(scheduler, settle(scheduler))


SCRIPT = "while [ ! -e release ]; do sleep 0.02; done; echo finished"


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[tuple[rota.Scheduler, ManualClock, Path]]:
    # The shell executor's supervisor reads the system clock: start the manual one there.
    clock = ManualClock(datetime.now(UTC))
    work_dir = tmp_path / "job"
    work_dir.mkdir()
    config = {
        "bindings": [
            {
                "name": "job",
                "executor": "shell",
                "cwd": str(work_dir),
                "command": ["sh", "-c", SCRIPT],
            }
        ]
    }
    with rota.open("memory://", clock=clock, config=config) as s:
        s.submit("w", binding="job")
        assert s.tick().started == 1
        for _ in range(int(WAIT / 0.02)):  # launched and pinned: from here it is adopted
            held = s.host.held.get("w/1")
            pinned = "core.execution.recovery_persisted" in types(s)
            if pinned and held is not None and not held.launching:
                break
            s.host.wake.wait(0.02)
            s.host.wake.clear()
        else:
            raise AssertionError("the shell job was not launched")
        yield s, clock, work_dir


@pytest.mark.parametrize(
    "jumps", [[-7200, 7200], [7200], [-7200]], ids=["back-then-forward", "forward", "back"]
)
def test_a_shell_job_completes_once_across_a_clock_jump(
    shell: tuple[rota.Scheduler, ManualClock, Path], jumps: list[int]
) -> None:
    s, clock, work_dir = shell
    passes(s, clock, 30)
    for jump in jumps:
        clock.step(jump)
        passes(s, clock, 120)
    (work_dir / "release").touch()
    view = settle(s)
    assert_completed_once_shell(s, view)
    if jumps == [-7200]:
        assert recovered(s) == []
    else:
        assert "core.execution.adopted" in types(s)


def assert_completed_once_shell(s: rota.Scheduler, view: dict[str, Any]) -> None:
    assert view.state == "completed", types(s)
    assert [a.outcome for a in view.attempts] == ["completed"]
    assert types(s).count("core.execution.completed") == 1
    assert not FAILURES & set(types(s)), types(s)
    for claim in recovered(s):
        assert claim["mode"] == "adopt" and claim["owner"] == claim["previous_owner"]


JUMPS = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.integers(-4 * 3600, 4 * 3600)),
        st.tuples(st.just("advance"), st.integers(1, 90)),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=scale(12, 500),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(jumps=JUMPS, return_before_last_tick=st.booleans())
def test_a_call_that_runs_to_completion_here_completes_exactly_once(
    jumps: list[tuple[str, int]],
    return_before_last_tick: bool,
) -> None:
    clock = ManualClock(datetime(2026, 10, 1, 9, tzinfo=UTC))
    with rota.open("memory://", clock=clock) as s:
        fn = Blocked()
        s.register("slow", fn)
        s.submit("w", binding="slow")
        s.tick()
        for kind, seconds in jumps:  # run time stays far below the one-hour timeout
            (clock.step if kind == "step" else clock.advance)(seconds)
            if return_before_last_tick and (kind, seconds) == jumps[-1]:
                fn.release.set()
                assert fn.returned.wait(WAIT)
            s.tick()
        fn.release.set()
        view = settle(s)
        assert_completed_once(s, view)
        assert fn.calls == 1


def test_an_in_process_result_is_kept_until_forgotten_for_the_adopting_recovery() -> None:
    # The executor's evidence: a call this process ran to its end, whose result the log
    # has not recorded, is "attached" and reports to the new epoch; `forget` drops it.
    executor = InProcessExecutor("fast", lambda ctx: "done")
    first: queue.Queue[Result] = queue.Queue()
    executor.launch(context(epoch=1), first.put)
    assert first.get(timeout=WAIT).data == "done"
    again: list[Result] = []
    ctx = context(epoch=2)
    ctx.previous_owner = default_owner()  # this very process: nothing of it could run
    assert executor.recover(ctx, None, again.append) == "attached"
    assert [r.data for r in again] == ["done"]
    executor.forget("w/1", 2)  # the outcome is durable: now nothing of it is here
    ctx = context(epoch=3)
    ctx.previous_owner = default_owner()
    assert executor.recover(ctx, None, again.append) == "stopped"
    assert len(again) == 1
    executor.close()


def context(epoch: int) -> rota.LaunchContext:
    return rota.LaunchContext(
        work_id="w", attempt=1, epoch=epoch, inputs=[], input_positions=[], config={},
        deadline=datetime(2026, 10, 1, 10, tzinfo=UTC), persist=lambda metadata: None,
        record_phase=lambda name, outcome: None,
    )  # fmt: skip


def test_a_shell_run_is_timed_out_by_run_time_not_by_a_wall_step(tmp_path: Path) -> None:
    ctx = replace(context(epoch=1), deadline=datetime.now(UTC) + timedelta(seconds=60))
    run = Run(ctx, lambda result: None, tmp_path, os.getpid(), None, ())
    closed = threading.Event()
    assert _stop_reason(run, closed) is None
    # The wall clock jumped two hours forward: past the deadline, a minute of run time left.
    run.ctx = replace(ctx, deadline=datetime.now(UTC) - timedelta(hours=2))
    assert _stop_reason(run, closed) is None
    run.budget_end = time.monotonic() - 1  # negative control: run time spent as well
    assert _stop_reason(run, closed) == "timed_out"


def test_on_postgresql_a_database_clock_step_forward_is_adopted(tmp_path: Path) -> None:
    # The store judges leases by the database's clock; the host measures run time by the
    # system's monotonic clock. The database clock jumps two hours: the attempt is adopted
    # by its own host with its deadline moved, and completes once.
    with temporary_schema() as schema:
        start = datetime.now(UTC).replace(microsecond=0)
        database = DatabaseClock(schema, start)
        fn = Blocked()
        with rota.open(database.url) as s:
            s.register("slow", fn)
            s.submit("w", binding="slow")
            assert s.tick().started == 1
            database.set(start + timedelta(hours=2))
            for _ in range(int(WAIT / 0.02)):  # the store's clock sample follows it
                if s.store.now() >= start + timedelta(hours=2):
                    break
                s.host.wake.wait(0.02)
                s.host.wake.clear()
            report = s.tick()
            assert report.recovered == 1 and report.timed_out == 0
            [claim] = recovered(s)
            moved = datetime.fromisoformat(claim["deadline"])
            assert moved > start + timedelta(hours=2, minutes=59)  # an hour of run time left
            fn.release.set()
            view = settle(s)
            assert_completed_once(s, view)
            assert fn.calls == 1
