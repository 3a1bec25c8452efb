"""Flow control through the real scheduler: priority, concurrency keys, rate buckets,
throttles and fair share (docs/guide.md, "Flow control")."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.infrastructure.clock import ManualClock
from rota.replay.rebuild import folded


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


def claimed_order(s: rota.Scheduler) -> list[str]:
    return [e.data["work_id"] for e in s.events() if e.type == "core.execution.claimed"]


def test_the_oldest_ready_work_gets_one_start_in_every_share_across_passes(
    clock: ManualClock,
) -> None:
    settings = {"concurrency": 1, "starvation_share": 10}
    with open_with(clock, settings=settings) as s:
        s.register("job", lambda ctx: None, inline=True)
        for n in range(3):
            s.submit(f"low{n}", binding="job")
        for n in range(30):
            s.submit(f"high{n}", binding="job", priority=5)
        s.run_until_idle(timeout=30)
        order = claimed_order(s)
        assert [i for i, w in enumerate(order) if w.startswith("low")] == [9, 19, 29]
        assert order[9] == "low0" and order[19] == "low1" and order[29] == "low2"
        claims = [e for e in s.events() if e.type == "core.execution.claimed"]
        assert [c.data["passes"] for c in claims[9:10]] == [["oldest"]]


def test_a_rebuilt_projection_has_the_same_buckets_fair_share_and_key_slots(
    clock: ManualClock, tmp_path: Any
) -> None:
    keys = [{"key": "tenant:*", "concurrency": 2, "weight": 1}, {"key": "tenant:big", "weight": 3}]
    rates = [{"key": "resource:api", "rate": "10/min", "burst": 3}]
    store = f"sqlite:///{tmp_path}/flow.db"
    config = {"keys": keys, "rates": rates}
    with rota.open(store, clock=clock, config=config, owner="a") as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        for n in range(6):
            s.submit(f"big{n}", binding="agent", keys=["tenant:big", "resource:api"])
            s.submit(f"small{n}", binding="agent", keys=["tenant:small"], priority=n % 2)
        s.tick()
        clock.advance(30)
        s.tick()
        position, live = s.queries.state.digest()
        rebuilt, folded_to = folded(s.service.store)
        assert (folded_to, rebuilt.digest()) == (position, live)
        assert rebuilt.flow.buckets and rebuilt.fair.finish and rebuilt.key_slots["tenant:big"]
        agent.release.set()
    with rota.open(store, clock=clock, config=config, owner="b") as s:  # from stored rows
        rebuilt, folded_to = folded(s.service.store)
        assert s.queries.state.digest() == (folded_to, rebuilt.digest())
        assert folded_to > position and rebuilt.flow.buckets


def test_a_pool_rate_bounds_the_starts_of_its_pool_only(clock: ManualClock) -> None:
    rates = [{"key": "pool:jobs", "rate": "1/min", "burst": 1}]
    settings = {"concurrency": 10, "job_concurrency": 10}
    with open_with(clock, settings=settings, rates=rates) as s:
        agent, job = Blocking("agent", "agents"), Blocking("job", "jobs")
        s.register("agent", executor=agent)
        s.register("job", executor=job)
        for n in range(3):
            s.submit(f"j{n}", binding="job")
            s.submit(f"a{n}", binding="agent")
        s.tick()
        assert running(s) == {"j0", "a0", "a1", "a2"}
        waiting = s.work("j1").waiting
        assert waiting is not None and waiting.code == "rate_limited"
        assert "rate:pool:jobs 1/min" in waiting.detail and "next token in 60.0 s" in waiting.detail
        agent.release.set()
        job.release.set()


def test_two_schedulers_on_one_store_share_a_key_limit_and_a_bucket_exactly(
    clock: ManualClock, tmp_path: Any
) -> None:
    config = {
        "settings": {"concurrency": 50},
        "keys": [{"key": "tenant:acme", "concurrency": 3}],
        "rates": [{"key": "resource:api", "rate": "4/min", "burst": 2}],
    }
    store = f"sqlite:///{tmp_path}/shared.db"
    with (
        rota.open(store, clock=clock, config=config, owner="h1") as one,
        rota.open(store, clock=clock, config=config, owner="h2") as two,
    ):
        agents = [Blocking(), Blocking()]
        one.register("agent", executor=agents[0])
        two.register("agent", executor=agents[1])
        for n in range(10):
            one.submit(f"acme{n}", binding="agent", keys=["tenant:acme"])
            two.submit(f"api{n}", binding="agent", keys=["resource:api"])
        for _ in range(3):
            one.tick()
            two.tick()
        started = len(agents[0].started) + len(agents[1].started)
        assert started == 3 + 2  # the key's 3 slots and the bucket's burst of 2, once
        clock.advance(15)
        for _ in range(2):
            two.tick()
            one.tick()
        assert len(agents[0].started) + len(agents[1].started) == started + 1  # one token
        for agent in agents:
            agent.release.set()
