"""Issue 28 item 3: a graceful stop hands the schedule leader lease back
(`core.schedule.leader_released`), so the next runner fires at once instead of a lease
period later (the clock never moves in these tests)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
from integration.test_schedule_racing import CONFIG, backend
from rota.infrastructure.clock import ManualClock

START = datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC)


def _types(s: rota.Scheduler, prefix: str) -> list[Any]:
    return [r for r in s.store.read(0, 100_000) if r.type.startswith(prefix)]


def _open(url: str, clock: ManualClock, owner: str) -> rota.Scheduler:
    s = rota.open(url, clock=clock, owner=owner)
    s.register("job", lambda ctx: None)
    return s


def test_a_daemon_stopped_gracefully_hands_the_lease_to_the_next_at_once(
    memory_url: str,
) -> None:
    clock = ManualClock(START)
    a = _open(memory_url, clock, "a")
    # each fire its own Work: the run a left behind does not matter here
    a.service.schedules.define("tick", binding="job", every="1m", overlap="allow_all")
    clock.advance(30)  # 09:01:00
    assert a.tick().scheduled == 1  # a leads and fired 09:01
    stop = threading.Event()
    stop.set()
    a.run(stop)  # the daemon loop's graceful stop
    (released,) = _types(a, "core.schedule.leader_released")
    assert (released.event.owner, released.event.term) == ("a", 1)
    assert released.delivery_id == "schedules/leader/1/released"
    a.close()
    clock.advance(29)  # 09:01:29: well inside a's lease period, had it kept the lease
    with _open(memory_url, clock, "b") as b:
        assert len(_types(b, "core.schedule.leader_released")) == 1  # once per term
        report = b.host.schedule_runner.run()
        assert report.leader and report.fired == 0  # leads at once; 09:02 not due yet
        clock.advance(31)  # 09:02:00
        assert b.host.schedule_runner.run().fired == 1
        (_, taken) = _types(b, "core.schedule.leader_acquired")
        assert (taken.event.owner, taken.event.term) == ("b", 2)


def test_closing_an_embedded_scheduler_hands_the_lease_back(memory_url: str) -> None:
    clock = ManualClock(START)
    with _open(memory_url, clock, "a") as a:
        a.service.schedules.define("tick", binding="job", every="1m")
        assert a.host.schedule_runner.run().leader
    with _open(memory_url, clock, "b") as b:
        assert b.host.schedule_runner.run().leader  # the same instant: a gave it back


def test_without_a_release_the_next_runner_waits_out_the_lease(memory_url: str) -> None:
    """What the release saves (the lease held by a runner that died without stopping)."""
    clock = ManualClock(START)
    a = _open(memory_url, clock, "a")
    a.service.schedules.define("tick", binding="job", every="1m")
    assert a.host.schedule_runner.run().leader
    with _open(memory_url, clock, "b") as b:
        assert not b.host.schedule_runner.run().leader  # a holds it (it never stopped)
        clock.advance(a.settings.lease_seconds + 1)
        assert b.host.schedule_runner.run().leader
    a.close()


def test_a_lease_already_taken_over_is_not_released(memory_url: str) -> None:
    clock = ManualClock(START)
    a = _open(memory_url, clock, "a")
    a.service.schedules.define("tick", binding="job", every="1m")
    assert a.host.schedule_runner.run().leader
    clock.advance(a.settings.lease_seconds + 1)
    with _open(memory_url, clock, "b") as b:
        assert b.host.schedule_runner.run().leader
        assert a.host.schedule_runner.release() is False  # b's term now: left alone
        assert _types(b, "core.schedule.leader_released") == []
        with _open(memory_url, clock, "c") as c:
            assert not c.host.schedule_runner.run().leader
    a.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_release_on_a_durable_store(kind: str, tmp_path: Path) -> None:
    """SQLite and PostgreSQL (the database's clock, held still by the test)."""
    with backend(kind, tmp_path) as (url, clock):
        manual = clock if isinstance(clock, ManualClock) else None
        with rota.open(url, config=CONFIG, owner="a", clock=manual) as a:  # type: ignore[arg-type]
            a.register("job", lambda ctx: None)
            a.service.schedules.define("tick", binding="job", every="1m", overlap="allow_all")
            assert a.host.schedule_runner.run().leader
            stop = threading.Event()
            stop.set()
            a.run(stop)
        with rota.open(url, config=CONFIG, owner="b", clock=manual) as b:  # type: ignore[arg-type]
            b.register("job", lambda ctx: None)
            assert b.host.schedule_runner.run().leader  # no time passed: a handed it back
            owners = [r.event.owner for r in _types(b, "core.schedule.leader_released")]
            assert owners == ["a"]
