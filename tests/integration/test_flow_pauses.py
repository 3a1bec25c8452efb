"""Pause and resume of a pool, a key or a scope, and priority changes, through the real
scheduler (`scheduler.flow`): each is one event; a pause deletes and re-queues nothing,
holds back only the ready Work it covers (`flow_paused`, saying which pause), and the
Work starts at the first pass after the resume."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
import rota.aio
from rota.domain.errors import RotaError
from rota.infrastructure.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))


class Blocking(rota.Executor):
    """Runs until released, so attempts hold their slots while a test looks."""

    def __init__(self, name: str, pool: str) -> None:
        self.name, self.pool = name, pool
        self.release = threading.Event()
        self.started: list[str] = []

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        self.started.append(ctx.work_id)
        threading.Thread(target=lambda: (self.release.wait(30), done(rota.Result()))).start()


def open_with(clock: ManualClock, **settings: Any) -> rota.Scheduler:
    config = {"settings": {"concurrency": 10, "job_concurrency": 10, **settings}}
    return rota.open("memory://", clock=clock, config=config, owner="flow")


def running(s: rota.Scheduler) -> set[str]:
    return {w.id for w in s.works() if w.state == "running"}


def shape(s: rota.Scheduler) -> list[tuple[str, str, list[int]]]:
    """Every Work with its binding and pending inputs' positions: what a pause must keep."""
    return [(w.id, w.binding, [p.position for p in s.work(w.id).pending]) for w in s.works()]  # type: ignore[union-attr]


def types(s: rota.Scheduler, after: int = 0) -> list[str]:
    return [e.type for e in s.events(after)]


def code(call: Any) -> str:
    with pytest.raises(RotaError) as raised:
        call()
    return str(raised.value.code)


def test_a_paused_pool_holds_its_ready_work_and_deletes_nothing(clock: ManualClock) -> None:
    with open_with(clock) as s:
        jobs, agents = Blocking("job", "jobs"), Blocking("agent", "agents")
        s.register("job", executor=jobs)
        s.register("agent", executor=agents)
        s.submit("early", binding="job")
        s.tick()
        assert running(s) == {"early"}
        paused_at = clock.now()
        paused = s.flow.pause("pool", "jobs", reason="db upgrade", by="ada")
        assert paused.type == "core.flow.paused" and not paused.repeated
        for name in ("j1", "j2"):
            s.submit(name, binding="job")
        s.submit("a1", binding="agent")  # another pool: not held
        before = shape(s)
        head = s.store.head().position
        for _ in range(3):
            clock.advance(5)
            s.tick()
        assert running(s) == {"early", "a1"}  # the running attempt goes on
        for name in ("j1", "j2"):
            waiting = s.work(name).waiting  # type: ignore[union-attr]
            assert waiting is not None and waiting.code == "flow_paused"
            assert waiting.detail == "pool jobs is paused (db upgrade)"
            assert s.work(name).state == "ready"  # type: ignore[union-attr]
        # Nothing deleted or re-queued: the same Works with the same pending inputs, and
        # the passes appended nothing to the held Work's streams.
        assert [w for w in shape(s) if w[0] != "a1"] == [w for w in before if w[0] != "a1"]
        held = [e for e in s.events(head) if e.stream in ("work/j1", "work/j2")]
        assert held == []
        [view] = s.flow.paused()
        assert (view.target, view.name, view.reason, view.by) == (
            "pool",
            "jobs",
            "db upgrade",
            "ada",
        )
        assert view.position == paused.position and view.since == paused_at
        resumed = s.flow.resume("pool", "jobs")
        assert resumed.type == "core.flow.resumed"
        assert s.flow.paused() == []
        s.tick()
        assert running(s) == {"early", "a1", "j1", "j2"}
        jobs.release.set()
        agents.release.set()


def test_a_paused_key_holds_only_work_carrying_that_key(clock: ManualClock) -> None:
    with open_with(clock) as s:
        agent = Blocking("agent", "agents")
        s.register("agent", executor=agent)
        s.flow.pause("key", "tenant:acme", reason="noisy")
        s.submit("acme1", binding="agent", keys=["tenant:acme"])
        s.submit("acme2", binding="agent", keys=["region:eu", "tenant:acme"])
        s.submit("globex", binding="agent", keys=["tenant:globex"])
        s.submit("plain", binding="agent")
        s.tick()
        assert running(s) == {"globex", "plain"}
        for name in ("acme1", "acme2"):
            waiting = s.work(name).waiting  # type: ignore[union-attr]
            assert waiting is not None and waiting.code == "flow_paused"
            assert waiting.detail == "key tenant:acme is paused (noisy)"
        s.flow.resume("key", "tenant:acme")
        s.tick()
        assert running(s) == {"globex", "plain", "acme1", "acme2"}
        agent.release.set()


def test_a_paused_scope_holds_its_descendants_and_no_sibling(clock: ManualClock) -> None:
    with open_with(clock) as s:
        agent = Blocking("agent", "agents")
        s.register("agent", executor=agent)
        s.flow.pause("scope", "root/batch")
        s.submit("in", binding="agent", scope="root/batch")
        s.submit("below", binding="agent", scope="root/batch/nightly")
        s.submit("sibling", binding="agent", scope="root/batches")  # a prefix, not below
        s.submit("top", binding="agent", scope="root")
        s.tick()
        assert running(s) == {"sibling", "top"}
        waiting = s.work("below").waiting  # type: ignore[union-attr]
        assert waiting is not None and waiting.code == "flow_paused"
        assert waiting.detail == "scope root/batch is paused"
        s.flow.resume("scope", "root/batch")
        s.tick()
        assert running(s) == {"sibling", "top", "in", "below"}
        agent.release.set()


def test_pausing_what_is_paused_appends_nothing_and_resuming_the_unpaused_is_refused(
    clock: ManualClock,
) -> None:
    with open_with(clock) as s:
        s.flow.pause("pool", "jobs", reason="first")
        head = s.store.head()
        again = s.flow.pause("pool", "jobs", reason="second")
        assert again.repeated and again.type == ""
        assert s.store.head() == head
        assert s.flow.paused()[0].reason == "first"
        assert code(lambda: s.flow.resume("pool", "agents")) == "not_paused"
        assert code(lambda: s.flow.resume("key", "jobs")) == "not_paused"
        assert code(lambda: s.flow.pause("queue", "jobs")) == "invalid_flow"
        assert code(lambda: s.flow.pause("key", "not a key")) == "invalid_flow"
        assert s.store.head() == head


def test_a_priority_change_is_one_event_and_moves_the_work_ahead(clock: ManualClock) -> None:
    with open_with(clock, concurrency=1) as s:
        agent = Blocking("agent", "agents")
        s.register("agent", executor=agent)
        for name in ("old1", "old2", "old3", "late"):
            s.submit(name, binding="agent")
        head = s.store.head().position
        done = s.flow.reprioritize("late", 5, reason="the board meets at noon", by="ada")
        assert done.type == "core.work.reprioritized"
        [event] = s.events(head)
        assert (event.stream, event.type) == ("work/late", "core.work.reprioritized")
        assert event.data["priority"] == 5 and event.data["previous"] == 0
        assert event.data["by"] == "ada" and event.data["reason"] == "the board meets at noon"
        same = s.flow.reprioritize("late", 5)  # what it has: nothing appended
        assert same.repeated and s.store.head().position == head + 1
        s.tick()
        assert running(s) == {"late"}
        assert code(lambda: s.flow.reprioritize("nope", 1)) == "unknown_work"
        assert code(lambda: s.flow.reprioritize("old1", 1001)) == "invalid_flow"
        agent.release.set()


def test_a_repeated_request_id_appends_nothing_and_answers_the_first_receipt(
    clock: ManualClock,
) -> None:
    with open_with(clock) as s:
        s.register("echo", lambda ctx: {})
        s.submit("w", binding="echo")
        first = s.flow.pause("pool", "jobs", reason="r", request_id="pause-1")
        prio = s.flow.reprioritize("w", 3, request_id="prio-1")
        resumed = s.flow.resume("pool", "jobs", request_id="resume-1")
        head = s.store.head()
        assert s.flow.pause("pool", "jobs", reason="r", request_id="pause-1") == (
            rota.Receipt(**{**_fields(first), "repeated": True})
        )
        assert s.flow.reprioritize("w", 3, request_id="prio-1").position == prio.position
        assert s.flow.resume("pool", "jobs", request_id="resume-1").position == resumed.position
        assert s.store.head() == head  # the pool stays resumed: the repeat paused nothing
        assert s.flow.paused() == []
        recorded = {e.delivery_id for e in s.events() if e.delivery_id}
        assert {"request/pause-1", "request/prio-1", "request/resume-1"} <= recorded
        # The id of another request is refused, never answered with the first result.
        reused = lambda: s.flow.pause("key", "jobs", request_id="pause-1")  # noqa: E731
        assert code(reused) == "request_id_reused"
        assert code(lambda: s.flow.reprioritize("w", 4, request_id="prio-1")) == (
            "request_id_reused"
        )
        assert s.store.head() == head


def _fields(receipt: Any) -> dict[str, Any]:
    return {f: getattr(receipt, f) for f in receipt.__struct_fields__}


def test_the_async_scheduler_has_the_same_flow_control(clock: ManualClock) -> None:
    async def main() -> list[Any]:
        s = await rota.aio.open("memory://", clock=clock, owner="flow")
        try:
            await s.flow.pause("key", "tenant:acme", reason="r")
            shown = await s.flow.paused()
            await s.flow.resume("key", "tenant:acme")
            return [shown, await s.flow.paused()]
        finally:
            await s.close()

    shown, after = asyncio.run(main())
    assert [(v.target, v.name) for v in shown] == [("key", "tenant:acme")]
    assert after == []


def test_two_schedulers_on_one_store_see_one_pause(tmp_path: Any, clock: ManualClock) -> None:
    path = tmp_path / "shared.db"
    with (
        rota.open(path, clock=clock, owner="one") as one,
        rota.open(path, clock=clock, owner="two") as two,
    ):
        one.flow.pause("key", "tenant:acme", reason="from one")
        head = two.store.head()
        again = two.flow.pause("key", "tenant:acme", reason="from two")  # it reads the log
        assert again.repeated and two.store.head() == head
        assert [v.reason for v in two.flow.paused()] == ["from one"]
        two.flow.resume("key", "tenant:acme")
        assert one.flow.paused() == []
        assert code(lambda: one.flow.resume("key", "tenant:acme")) == "not_paused"


@pytest.mark.postgres
def test_hosts_racing_one_pause_on_postgresql_record_it_once() -> None:
    """Two hosts pause, then resume, the same key at once, round after round: the
    `flow/pauses` version fences the append, so each change is recorded once and the loser
    re-decides (a no-op pause; a `not_paused` resume)."""
    from postgres import schema_url, temporary_schema

    with temporary_schema() as schema:
        url = schema_url(schema)
        with rota.open(url, owner="one") as one, rota.open(url, owner="two") as two:
            for _ in range(5):
                for act in ("pause", "resume"):
                    gate = threading.Barrier(2)
                    codes: list[str] = []

                    def race(
                        s: rota.Scheduler, act: str = act, gate: Any = gate, codes: Any = codes
                    ) -> None:
                        gate.wait()
                        try:
                            if act == "pause":
                                s.flow.pause("key", "tenant:acme", by=s.queries.state.owner())
                            else:
                                s.flow.resume("key", "tenant:acme")
                        except RotaError as error:
                            codes.append(str(error.code))

                    threads = [threading.Thread(target=race, args=(s,)) for s in (one, two)]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join(30)
                    assert codes == ([] if act == "pause" else ["not_paused"])
            flow = [e.type for e in one.events() if e.stream == "flow/pauses"]
            assert flow == ["core.flow.paused", "core.flow.resumed"] * 5
            assert one.flow.paused() == [] and two.flow.paused() == []
