"""Small rules of attempts through the real service: the defaults and what an attempt pins,
a binding's timeout, the capacity a parked attempt gives back, and stop confirmations
fenced by the epoch that adopted the attempt."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import rota
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.config import Config

T0 = datetime(2026, 12, 7, 9, tzinfo=UTC)
WAITING = rota.Result(outcome="waiting")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def scheduler(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[rota.Scheduler]:
    monkeypatch.chdir(tmp_path)  # no ./rota.toml: the defaults, as a first run has them
    with rota.open("memory://", clock=clock, owner="host-a") as s:
        yield s


# -- the defaults ------------------------------------------------------------------------


def test_the_defaults_are_four_concurrent_a_minute_lease_an_hour_and_three_attempts(
    tmp_path: Path,
) -> None:
    settings = rota.Settings()
    assert (settings.concurrency, settings.job_concurrency) == (4, 4)
    assert (settings.lease_seconds, settings.timeout_seconds) == (60.0, 3600.0)
    assert rota.RetryPolicy().max_attempts == 3
    # The configuration file's defaults are the same values: an empty file, no file, and a
    # binding that names no timeout or retry policy.
    (tmp_path / "empty.toml").write_text("")
    for config in (Config.parse({}), Config.load(tmp_path / "empty.toml")):
        assert config.settings == settings
    config = Config.parse({"bindings": [{"name": "b", "executor": "shell", "command": ["true"]}]})
    binding = config.bindings["b"]
    assert (binding.timeout_seconds, binding.retry) == (None, rota.RetryPolicy())


def test_an_attempt_pins_the_defaults_and_a_fifth_start_waits(
    scheduler: rota.Scheduler,
) -> None:
    scheduler.register("job", lambda ctx: None)
    for i in range(5):
        scheduler.submit(f"w{i}", binding="job")
    start = scheduler.service.lifecycle.start_pass()
    assert len(start.claimed) == 4
    assert [(w.work_id, w.code) for w in start.waiting] == [("w4", "capacity_concurrency")]
    for claimed in start.claimed:
        attempt = claimed.attempt
        pinned = attempt.pinned
        assert (pinned.lease_seconds, pinned.timeout_seconds) == (60.0, 3600.0)
        assert pinned.binding.retry.max_attempts == 3
        assert attempt.lease_expires_at == T0 + timedelta(minutes=1)
        assert attempt.deadline == T0 + timedelta(hours=1)


def test_shell_jobs_are_four_at_a_time_by_default(scheduler: rota.Scheduler) -> None:
    scheduler.bind("nightly", executor="shell", config={"command": ["true"]})
    for i in range(5):
        scheduler.submit(f"j{i}", binding="nightly")
    start = scheduler.service.lifecycle.start_pass()
    assert len(start.claimed) == 4
    assert [(w.work_id, w.code) for w in start.waiting] == [("j4", "capacity_job_concurrency")]


# -- a binding's timeout -------------------------------------------------------------------


def test_a_binding_timeout_replaces_the_default_and_a_resume_keeps_what_is_left(
    clock: ManualClock,
) -> None:
    config = {"settings": {"lease_seconds": 1000}}
    with rota.open("memory://", clock=clock, config=config) as scheduler:
        scheduler.register("agent", lambda ctx: None, timeout_seconds=600)
        scheduler.register("plain", lambda ctx: None)
        scheduler.submit("a", binding="agent", kind="standing", input="first")
        scheduler.submit("p", binding="plain")
        lifecycle = scheduler.service.lifecycle
        claims = {c.work.work_id: c.attempt for c in lifecycle.start_pass().claimed}
        assert claims["a"].pinned.timeout_seconds == 600
        assert claims["a"].deadline == T0 + timedelta(seconds=600)
        assert claims["p"].pinned.timeout_seconds == 3600  # the default, for other bindings

        clock.advance(100)
        lifecycle.finish("a/1", 1, WAITING)  # parked with 500 s of its budget left
        # Redefining the binding changes future attempts only, not the parked one.
        scheduler.register("agent", lambda ctx: None, timeout_seconds=50, replace=True)
        clock.advance(900)
        scheduler.accept("a", "wake")
        (resumed,) = [c for c in lifecycle.start_pass().claimed if c.work.work_id == "a"]
        assert resumed.resume and resumed.attempt.epoch == 2
        assert resumed.attempt.pinned.timeout_seconds == 600
        assert resumed.attempt.deadline == clock.now() + timedelta(seconds=500)

        clock.advance(499)
        with pytest.raises(rota.Refusal) as early:
            lifecycle.time_out("a/1", 2)
        assert early.value.code == "not_due"
        clock.advance(1)
        lifecycle.time_out("a/1", 2)  # exactly 600 s of lease-held time in all
        view = scheduler.work("a")
        assert view is not None and view.attempts[0].outcome == "timed_out"


@pytest.mark.parametrize("timeout", [0, -5, float("nan")])
def test_a_binding_timeout_must_be_positive(scheduler: rota.Scheduler, timeout: float) -> None:
    with pytest.raises(rota.InvalidCommand) as refused:
        scheduler.register("job", lambda ctx: None, timeout_seconds=timeout)
    assert refused.value.code == "invalid_config"
    assert "bindings.job.timeout_seconds" in str(refused.value)
    assert "job" not in scheduler.executors  # refused before anything was registered
    with pytest.raises(rota.InvalidCommand):
        scheduler.bind("other", executor="shell", timeout_seconds=timeout)


# -- capacity of a parked attempt -----------------------------------------------------------


def test_a_parked_attempt_frees_its_capacity_slot(clock: ManualClock) -> None:
    config = {"settings": {"concurrency": 1}}
    with rota.open("memory://", clock=clock, config=config) as scheduler:
        scheduler.register("agent", lambda ctx: None)
        scheduler.submit("a", binding="agent", kind="standing", input="first")
        scheduler.submit("b", binding="agent")
        lifecycle = scheduler.service.lifecycle
        projection = scheduler.service.projection
        start = lifecycle.start_pass()
        assert [c.work.work_id for c in start.claimed] == ["a"]
        assert [(w.work_id, w.code) for w in start.waiting] == [("b", "capacity_concurrency")]

        lifecycle.finish("a/1", 1, WAITING)
        assert scheduler.work("a").state == "waiting"
        assert projection.in_use("agents") == 0
        start = lifecycle.start_pass()
        assert [c.work.work_id for c in start.claimed] == ["b"]

        # Woken while b holds the only slot, the parked attempt waits for capacity too.
        scheduler.accept("a", "wake")
        start = lifecycle.start_pass()
        assert (start.claimed, [(w.work_id, w.code) for w in start.waiting]) == (
            [],
            [("a", "capacity_concurrency")],
        )
        assert scheduler.capacity()["pools"]["agents"]["in_use"] == 1


# -- stop confirmations ---------------------------------------------------------------------


def test_a_stop_confirmation_from_before_an_adoption_is_refused(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    scheduler.register("job", lambda ctx: None, timeout_seconds=100)
    scheduler.submit("w", binding="job")
    lifecycle, recovery = scheduler.service.lifecycle, scheduler.service.recovery
    lifecycle.start_pass()
    lifecycle.invoke("w/1", 1)
    clock.advance(61)  # the lease lapsed: recovery adopts the attempt at epoch 2
    (adopted,) = recovery.recovery_pass().recovered
    assert (adopted.mode, adopted.attempt.epoch) == ("adopt", 2)
    with pytest.raises(rota.LeaseLost):
        lifecycle.confirm_stopped("w/1", 1)  # the attempt is still running at epoch 2
    clock.advance(39)
    lifecycle.time_out("w/1", 2)  # ended; its slot is held until a stop is confirmed
    with pytest.raises(rota.LeaseLost) as stale:
        lifecycle.confirm_stopped("w/1", 1)
    assert "adopted at epoch 2, not 1" in str(stale.value)
    assert scheduler.service.projection.in_use("agents") == 1
    lifecycle.confirm_stopped("w/1", 2)
    assert scheduler.service.projection.in_use("agents") == 0
