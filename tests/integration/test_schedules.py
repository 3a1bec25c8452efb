"""Schedules through the service and the host: a fire is one append with its input, bad
rows are quarantined (forged newer event, direct SQL UPDATE, unknown binding), transient
store errors are retried as pinned, the leader lease, pause/resume/remove, trigger now,
backfill, and the projection rebuilt by replay equals the live one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import pytest

import rota
from rota.application import schedule_runner
from rota.application.errors import StoreUnavailable
from rota.application.ports import NewEvent
from rota.application.schedule_fires import work_fences
from rota.application.schedule_runner import RETRIES, ScheduleRunnerError, backoff
from rota.domain.events import WorkSubmitted, accepted_input
from rota.domain.events.schedule import ScheduleDefined
from rota.infrastructure.clock import ManualClock
from rota.projections.schedules_projection import SchedulesProjection
from rota.replay.doctor import doctor
from rota.replay.schedule_checks import account

START = datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "schedules.db"


@pytest.fixture
def scheduler(memory_url: str, clock: ManualClock) -> Iterator[rota.Scheduler]:
    with rota.open(memory_url, clock=clock, owner="host-a") as s:
        s.register("job", lambda ctx: None)
        yield s


def events(s: rota.Scheduler, kind: str) -> list[Any]:
    return [r for r in s.store.read(0, 100_000) if r.type == kind]


def test_a_fire_is_one_append_with_its_input(scheduler: rota.Scheduler, clock: ManualClock) -> None:
    scheduler.service.schedules.define("tick", binding="job", every="1m", input={"n": 1})
    clock.advance(30)  # 09:01:00: the first nominal time
    report = scheduler.tick()
    assert report.scheduled == 1 and not report.errors
    (fired,) = events(scheduler, "core.schedule.fired")
    identity = "schedule/tick/2026-11-02T09:01:00Z"
    assert fired.delivery_id == identity
    assert fired.event.nominal == datetime(2026, 11, 2, 9, 1, tzinfo=UTC)
    assert (fired.event.schedule_version, fired.event.binding) == (1, "job")
    after = scheduler.store.read(fired.position - 1, 2)
    # The fire and the standing Work carrying its input: one append (one recorded time).
    assert [r.type for r in after] == ["core.schedule.fired", "core.work.submitted"]
    assert len({r.recorded_at for r in after}) == 1
    submitted = after[1].event
    accepted = accepted_input(submitted)
    assert isinstance(submitted, WorkSubmitted) and accepted is not None
    assert after[1].delivery_id == f"input/schedule.tick@job/{identity}"
    assert (submitted.kind, submitted.trigger) == ("standing", "first")
    assert accepted.key == identity
    assert accepted.payload == {
        "schedule": "tick",
        "nominal": "2026-11-02T09:01:00Z",
        "version": 1,
        "input": {"n": 1},
    }
    assert report.started == 1  # admission came after the schedules slot, in the same pass
    scheduler.tick()
    assert len(events(scheduler, "core.schedule.fired")) == 1  # not due again yet


def test_the_same_identity_appended_twice_is_one_fire(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    schedules = scheduler.service.schedules
    schedules.define("tick", binding="job", every="1m")
    clock.advance(30)
    row = schedules.row("tick")
    emits, _ = schedules.tick_emits(row, clock.now())
    assert work_fences(emits) == {"work/schedule.tick@job": 0}  # two cannot create the Work
    first = scheduler.store.append([NewEvent(e.stream, e.event, e.delivery_id) for e in emits])
    assert first.written == 2  # the fire, the Work carrying its input
    # A decider that raced it appends the same fire and input: the identities make it a no-op.
    again_emits = [e for e in emits if e.delivery_id is not None]
    again = scheduler.store.append(
        [NewEvent(e.stream, e.event, e.delivery_id) for e in again_emits]
    )
    assert again.duplicate
    assert [r.position for r in again.recorded] == [
        first.recorded[0].position,
        first.recorded[1].position,
    ]
    scheduler.tick()
    assert len(events(scheduler, "core.schedule.fired")) == 1


def _forge(s: rota.Scheduler, name: str, **changes: Any) -> None:
    """Append a definition as a newer rota (or a tamperer) would, bypassing validation."""
    row = s.service.schedules.row(name)
    fields = {f: getattr(row.definition, f) for f in row.definition.__struct_fields__}
    fields.update(changes, schedule_version=row.definition.schedule_version + 1)
    event = ScheduleDefined(**fields)
    s.store.append([NewEvent(f"schedule/{name}", event)], {f"schedule/{name}": row.stream_version})


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"spec_format": 2}, "newer rota"),
        ({"spec": "every banana"}, "banana"),
        ({"timezone": "Mars/Olympus"}, "Mars/Olympus"),
        ({"binding": "gone"}, "unknown binding 'gone'"),
    ],
)
def test_a_forged_definition_is_quarantined_and_the_others_fire(
    scheduler: rota.Scheduler,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    changes: dict[str, Any],
    why: str,
) -> None:
    schedules = scheduler.service.schedules
    schedules.define("good", binding="job", every="1m", overlap="allow_all")
    schedules.define("bad", binding="job", every="1m")
    _forge(scheduler, "bad", **changes)
    clock.advance(30 + 120)  # 09:03:00
    with caplog.at_level(logging.WARNING, logger="rota.schedules"):
        report = scheduler.tick()
    assert not report.errors and report.scheduled == 1  # the runner survived
    (quarantined,) = events(scheduler, "core.schedule.quarantined")
    assert quarantined.event.name == "bad" and why in quarantined.event.reason
    row = schedules.row("bad")
    assert row.quarantined is not None and row.boundary >= clock.now()
    assert any("bad" in r.getMessage() and "quarantined" in r.getMessage() for r in caplog.records)
    head = scheduler.store.head().position  # the port's head (memory has no head_position)
    clock.advance(60)
    scheduler.tick()  # no spin: nothing more for the bad row, the good one fires again
    later = [r for r in scheduler.store.read(head, 100) if r.stream.startswith("schedule/")]
    assert [(r.type, r.stream) for r in later] == [("core.schedule.fired", "schedule/good")]
    assert [e.event.name for e in events(scheduler, "core.schedule.fired")] == ["good", "good"]
    report_ = doctor(str(scheduler.store.url))
    check = report_.check("schedule_quarantine")
    assert check.status == "fail" and "bad" in check.detail
    assert "rota schedule apply" in check.advice and "resume" in check.advice
    assert report_.check("schedule_accounting").status == "ok", report_.check("schedule_accounting")


def test_a_tampered_row_updated_by_sql_is_quarantined(path: Path, clock: ManualClock) -> None:
    with rota.open(path, clock=clock, owner="host-a") as s:
        s.register("job", lambda ctx: None)
        s.service.schedules.define("good", binding="job", every="1m", overlap="allow_all")
        s.service.schedules.define("bad", binding="job", every="1m")
    connection = apsw.Connection(str(path))
    connection.execute(
        "UPDATE events SET data = replace(data, '\"every 1m\"', '\"every 1 fortnight\"') "
        "WHERE type = 'core.schedule.defined' AND stream = 'schedule/bad'"
    )
    connection.close()
    clock.advance(30)
    with rota.open(path, clock=clock, owner="host-a") as s:
        s.register("job", lambda ctx: None)
        report = s.tick()
        assert not report.errors and report.scheduled == 1
        (quarantined,) = events(s, "core.schedule.quarantined")
        assert quarantined.event.name == "bad" and "fortnight" in quarantined.event.reason
        assert s.service.schedules.row("bad").boundary >= clock.now()
        assert [e.event.name for e in events(s, "core.schedule.fired")] == ["good"]


def test_releasing_a_quarantine_by_redefining(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    schedules = scheduler.service.schedules
    schedules.define("bad", binding="job", every="1m")
    _forge(scheduler, "bad", spec="every banana")
    clock.advance(90)
    scheduler.tick()
    assert schedules.row("bad").quarantined is not None
    schedules.define("bad", binding="job", every="1m", reason="fixed")
    clock.advance(60)
    assert scheduler.tick().scheduled == 1
    assert schedules.row("bad").quarantined is None
    assert account(scheduler.store).problems == []


def test_the_retry_policy_is_pinned() -> None:
    assert RETRIES == 3
    assert [backoff(n) for n in range(RETRIES)] == [0.05, 0.1, 0.2]


class Flaky:
    """A store append that fails `failures` times with a transient error, then works."""

    def __init__(self, real: Any, failures: int) -> None:
        self.real, self.failures, self.calls = real, failures, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("database is locked (injected)")
        return self.real(*args, **kwargs)


def test_a_transient_store_error_is_retried_with_backoff(
    scheduler: rota.Scheduler, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler.service.schedules.define("tick", binding="job", every="1m")
    scheduler.tick()  # takes the lease
    slept: list[float] = []
    runner = scheduler.host.schedule_runner
    runner.sleep = slept.append
    clock.advance(30)
    flaky = Flaky(scheduler.store.append, failures=2)
    monkeypatch.setattr(scheduler.service.transactions.store, "append", flaky)
    report = runner.run()
    assert slept == [0.05, 0.1] and report.retries == 2 and report.fired == 1


def test_the_runner_gives_up_after_three_retries_naming_schedule_and_phase(
    scheduler: rota.Scheduler, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler.service.schedules.define("nightly", binding="job", every="10s")
    scheduler.tick()
    runner = scheduler.host.schedule_runner
    slept: list[float] = []
    runner.sleep = slept.append
    clock.advance(10)  # due again; the lease (60 s) needs no renewal yet
    monkeypatch.setattr(
        scheduler.service.transactions.store, "append", Flaky(scheduler.store.append, 99)
    )
    with pytest.raises(ScheduleRunnerError) as gave_up:
        runner.run()
    assert slept == [0.05, 0.1, 0.2]
    assert "nightly" in str(gave_up.value) and "fire" in str(gave_up.value)
    assert isinstance(gave_up.value.__cause__, StoreUnavailable)
    # In the host: the pass reports it and starts nothing new; the lease is not released.
    report = scheduler.tick()
    assert report.errors and report.errors[0].startswith("schedules: schedule_runner")
    assert report.started == 0
    monkeypatch.undo()
    assert not events(scheduler, "core.schedule.leader_lost")


def test_the_retry_checks_the_lease_first_and_never_masks_a_lost_one(
    memory_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = memory_url
    with rota.open(path, clock=clock, owner="a") as a, rota.open(path, clock=clock, owner="b") as b:
        for s in (a, b):
            s.register("job", lambda ctx: None)
        a.service.schedules.define("tick", binding="job", every="1m")
        assert a.host.schedule_runner.run().leader
        assert not b.host.schedule_runner.run().leader  # a holds it
        clock.advance(61)  # a's lease lapsed; b takes it over
        assert b.host.schedule_runner.run().leader
        runner = a.host.schedule_runner
        calls: list[str] = []
        real = runner.ensure_lease
        monkeypatch.setattr(runner, "ensure_lease", lambda: calls.append("lease") or real())
        report = runner.run()
        assert calls == ["lease"] and not report.leader and report.fired == 0
        (lost,) = events(a, "core.schedule.leader_lost")
        assert (lost.event.owner, lost.event.term) == ("a", 1)


def test_pause_resume_and_remove_account_for_every_time(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    schedules = scheduler.service.schedules
    schedules.define("tick", binding="job", every="1m", overlap="allow_all")
    clock.advance(30)
    scheduler.tick()
    schedules.pause("tick", actor="ops", reason="maintenance")
    clock.advance(180)
    scheduler.tick()
    skipped = events(scheduler, "core.schedule.skipped")
    assert [(e.event.reason, e.event.count) for e in skipped] == [("paused", 3)]
    schedules.resume("tick", actor="ops")
    clock.advance(60)
    assert scheduler.tick().scheduled == 1
    schedules.remove("tick", actor="ops", reason="done")
    clock.advance(600)
    assert scheduler.tick().scheduled == 0
    defined, paused = (
        events(scheduler, "core.schedule.defined"),
        events(scheduler, "core.schedule.paused"),
    )
    assert (paused[0].event.actor, paused[0].event.reason) == ("ops", "maintenance")
    assert defined[0].event.actor == "api"
    assert account(scheduler.store).problems == []


def test_trigger_now_has_its_own_identity_and_backfill_the_live_ones(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    schedules = scheduler.service.schedules
    schedules.define("tick", binding="job", every="1m", overlap="buffer_all")
    fired = schedules.trigger_now("tick", key="deploy-42", actor="ops")
    assert fired is not None and fired.delivery_id == "schedule/tick/manual/deploy-42"
    assert fired.event.manual and fired.event.actor == "ops"
    assert schedules.trigger_now("tick", key="deploy-42") is None  # the same key: once
    clock.advance(30 + 240)  # 09:05:00; nothing ran the cadence meanwhile
    scheduler.tick()  # latest: 09:05 fires, 09:01..09:04 coalesced
    done, again = schedules.backfill(
        "tick", datetime(2026, 11, 2, 9, 3, tzinfo=UTC), datetime(2026, 11, 2, 9, 5, tzinfo=UTC)
    )
    assert (done, again) == (2, 1)  # 09:05 fired live already: the same identity, no-op
    ids = [e.delivery_id for e in events(scheduler, "core.schedule.fired")]
    assert len(ids) == len(set(ids)) == 4
    assert account(scheduler.store).problems == []


def test_the_projection_rebuilt_by_replay_equals_the_live_one(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    schedules = scheduler.service.schedules
    schedules.define("a", binding="job", every="1m")
    schedules.define("b", binding="job", cron="*/5 * * * *", timezone="Europe/Berlin", jitter=20)
    for _ in range(12):
        clock.advance(97)
        scheduler.tick()
    schedules.pause("a")
    clock.advance(400)
    scheduler.tick()
    rebuilt = SchedulesProjection()
    for r in scheduler.store.read(0, 100_000):
        rebuilt.apply(r.position, r.stream, r.version, None, r.event)
    scheduler.service.catch_up()
    assert rebuilt.digest() == schedules.projection.digest()
    report = doctor(str(scheduler.store.url))
    for name in ("schedule_accounting", "schedule_drift", "schedule_quarantine"):
        assert report.check(name).status == "ok", report.check(name)


def test_a_new_definition_is_planned_on_the_next_pass(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    scheduler.tick()
    runner = scheduler.host.schedule_runner
    assert runner.next_due() is None
    scheduler.service.schedules.define("soon", binding="job", every="10s")
    scheduler.tick()  # planned at once (the loop wakes on the commit)
    due = runner.next_due()
    assert due is not None and due - clock.now() <= timedelta(seconds=10)
    assert scheduler.host.next_wake(60.0) <= 10.0


def test_runner_module_docs_state_the_error_exit_posture() -> None:
    doc = schedule_runner.__doc__ or ""
    assert "NOT released" in doc and "TTL lapse" in doc


def test_cancel_other_interrupts_the_running_attempt_in_the_fire_s_append(
    scheduler: rota.Scheduler, clock: ManualClock
) -> None:
    schedules = scheduler.service.schedules
    schedules.define("tick", binding="job", every="1m", overlap="cancel_other")
    clock.advance(30)
    scheduler.host.schedule_runner.run()  # 09:01 fires
    (claimed,) = scheduler.service.lifecycle.start_pass().claimed  # its attempt is running
    clock.advance(60)
    report = scheduler.host.schedule_runner.run()  # 09:02: fire, and interrupt 09:01's run
    assert report.fired == 1
    (fired,) = [e for e in events(scheduler, "core.schedule.fired") if e.event.nominal.minute == 2]
    after = scheduler.store.read(fired.position - 1, 3)
    assert [r.type for r in after] == [
        "core.schedule.fired",
        "core.control.requested",
        "core.execution.interrupted",
    ]
    assert after[2].event.attempt == claimed.attempt.number
    work = scheduler.service.projection.works.get("schedule.tick@job:latest")
    # An interrupt leaves the interrupted run's input pending (seed 001): both stay queued,
    assert work is not None and work.trigger == "last"
    assert [p.key[-9:] for p in work.pending] == ["09:01:00Z", "09:02:00Z"]
    # and the next run (once the interrupted one is confirmed stopped) takes both,
    # triggered by the newest fire: 09:01 is not run again on its own.
    scheduler.run_until_idle(timeout=30)
    claims = [e.event for e in events(scheduler, "core.execution.claimed")]
    assert [(c.attempt, c.consumed, c.trigger) for c in claims] == [
        (1, [work.pending[0].position], work.pending[0].position),
        (2, [p.position for p in work.pending], work.pending[1].position),
    ]
    done = scheduler.service.projection.works.get("schedule.tick@job:latest")
    assert done is not None and done.pending == ()
