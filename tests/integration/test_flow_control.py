"""Flow control through the real scheduler: priority, concurrency keys, rate buckets,
throttles and fair share (docs/guide.md, "Flow control")."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.infrastructure.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))


class Blocking(rota.Executor):
    """Runs until released, so attempts hold their slots while a test looks."""

    def __init__(self, name: str = "agent", pool: str = "agents") -> None:
        self.name, self.pool = name, pool
        self.release = threading.Event()
        self.started: list[str] = []

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        self.started.append(ctx.work_id)
        threading.Thread(target=lambda: (self.release.wait(30), done(rota.Result()))).start()


def open_with(clock: ManualClock, **config: Any) -> rota.Scheduler:
    return rota.open("memory://", clock=clock, config=config, owner="flow")


def states(s: rota.Scheduler) -> dict[str, str]:
    return {w.id: w.state for w in s.works()}


def running(s: rota.Scheduler) -> set[str]:
    return {w.id for w in s.works() if w.state == "running"}


def test_higher_priority_starts_first_whatever_its_age(clock: ManualClock) -> None:
    with open_with(clock, settings={"concurrency": 1}) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        for n in range(5):
            s.submit(f"low{n}", binding="agent")
        s.submit("urgent", binding="agent", priority=5)
        s.tick()
        assert running(s) == {"urgent"}


def test_a_full_key_never_holds_back_work_of_other_keys(clock: ManualClock) -> None:
    keys = [{"key": "tenant:*", "concurrency": 1}]
    with open_with(clock, settings={"concurrency": 10}, keys=keys) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        for n in range(300):  # far more than one pass looks at
            s.submit(f"acme{n}", binding="agent", keys=["tenant:acme"])
        s.submit("globex", binding="agent", keys=["tenant:globex"])
        s.tick()
        assert running(s) == {"acme0", "globex"}
        waiting = s.work("acme1").waiting
        assert waiting is not None and waiting.code == "capacity_key"
        assert "tenant:acme at 1/1" in waiting.detail
        agent.release.set()


def test_a_rate_lets_burst_then_one_start_a_token(clock: ManualClock) -> None:
    rates = [{"key": "resource:stripe", "rate": "60/min", "burst": 2}]
    with open_with(clock, settings={"concurrency": 100}, rates=rates) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        for n in range(5):
            s.submit(f"w{n}", binding="agent", keys=["resource:stripe"])
        s.tick()
        assert running(s) == {"w0", "w1"}
        waiting = s.work("w2").waiting
        assert waiting is not None and waiting.code == "rate_limited"
        assert "rate:resource:stripe 60/min" in waiting.detail
        assert "next token in 1.0 s" in waiting.detail
        clock.advance(1)
        s.tick()
        assert running(s) == {"w0", "w1", "w2"}
        taken = [e for e in s.events() if e.type == "core.rate.taken"]
        assert [len(e.data["takes"]) for e in taken] == [2, 1]
        agent.release.set()


def test_a_throttle_lets_one_start_a_period(clock: ManualClock) -> None:
    with open_with(clock, settings={"concurrency": 10}) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        for n in range(3):
            s.submit(f"sync{n}", binding="agent", throttle=rota.Throttle("sync:acme", 60))
        s.tick()
        assert running(s) == {"sync0"}
        clock.advance(30)
        s.tick()
        assert running(s) == {"sync0"}
        clock.advance(30)
        s.tick()
        assert running(s) == {"sync0", "sync1"}
        agent.release.set()


def test_fair_share_serves_a_small_tenant_beside_a_noisy_one(clock: ManualClock) -> None:
    with open_with(clock, settings={"concurrency": 4}) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        for n in range(100):
            s.submit(f"big{n}", binding="agent", keys=["tenant:big"])
        for n in range(2):
            s.submit(f"small{n}", binding="agent", keys=["tenant:small"])
        s.tick()
        assert running(s) == {"big0", "big1", "small0", "small1"}
        agent.release.set()
