"""Two and three schedule runners racing on one store (threads and processes, SQLite and
PostgreSQL), one of them paused past its leader lease: zero duplicate fire identities, and
every nominal time accounted for (fired, or recorded skipped), checked on the log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from postgres import DatabaseClock, schema_url, temporary_schema

import rota
from rota.application.ports import EventStore
from rota.domain.events import accepted_input
from rota.infrastructure.clock import ManualClock
from rota.replay.schedule_checks import account

LEASE = 10  # seconds: the leader lease's TTL (settings.lease_seconds)
CONFIG = {"settings": {"lease_seconds": LEASE}}


def check_log(store: EventStore) -> list[str]:
    """The invariants; returns the owners that held the leader lease."""
    recorded = store.read(0, 1_000_000)
    fired = [r.delivery_id for r in recorded if r.type == "core.schedule.fired"]
    assert fired, "nothing fired"
    assert len(fired) == len(set(fired)), "a nominal time fired twice"
    # (a Work's first fire is carried by its definition: read as the input it is)
    inputs = [i.key for r in recorded if (i := accepted_input(r.event)) is not None]
    assert sorted(inputs) == sorted(fired)  # every fire has its input, once
    found = account(store)
    assert found.problems == [], found.problems
    return [r.event.owner for r in recorded if r.type == "core.schedule.leader_acquired"]


@contextmanager
def backend(kind: str, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """A store URL and a clock the test moves (the database's own on PostgreSQL)."""
    start = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'race.db'}", ManualClock(start)
        return
    with temporary_schema() as schema:
        clock = DatabaseClock(schema, start)
        yield clock.url, clock


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("runners", [2, 3])
def test_racing_threads_with_one_paused_past_its_lease(
    kind: str, runners: int, tmp_path: Path
) -> None:
    with backend(kind, tmp_path) as (url, clock), ExitStack() as stack:
        manual = clock if isinstance(clock, ManualClock) else None
        opened = [
            stack.enter_context(
                rota.open(url, config=CONFIG, owner=f"r{i}", clock=manual)  # type: ignore[arg-type]
            )
            for i in range(runners)
        ]
        for s in opened:
            s.register("job", lambda ctx: None)
            database_clock = getattr(s.service.store, "_clock", None)
            if database_clock is not None:
                database_clock.refresh = 0  # read the test's database clock every time
        first = opened[0].service.schedules
        first.define("minutely", binding="job", every="1m", overlap="allow_all")
        first.define("sevens", binding="job", every="7s", catchup="all", overlap="buffer_all")
        first.define("cron", binding="job", cron="*/2 * * * *", jitter=30)
        paused = opened[0]
        assert paused.host.schedule_runner.run().leader  # r0 leads, then is paused
        for step in range(60):
            clock.advance(3)
            active = [s for s in opened if s is not paused or not 10 <= step < 20]
            errors: list[BaseException] = []
            barrier = threading.Barrier(len(active))

            def tick(
                s: rota.Scheduler,
                b: threading.Barrier = barrier,
                errors: list[BaseException] = errors,
            ) -> None:
                try:
                    b.wait(timeout=10)
                    s.host.schedule_runner.run()
                except BaseException as exc:  # surfaced below
                    errors.append(exc)

            threads = [threading.Thread(target=tick, args=(s,)) for s in active]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert not errors, errors
        owners = check_log(opened[0].store)
        assert len(set(owners)) >= 2  # the lease moved while r0 was paused
        lost = [
            r.event.owner
            for r in opened[0].store.read(0, 1_000_000)
            if r.type == "core.schedule.leader_lost"
        ]
        assert "r0" in lost  # and r0 recorded that it lost it


CHILD = textwrap.dedent(
    """
    import signal, sys, threading
    import rota
    url, name = sys.argv[1], sys.argv[2]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with rota.open(url, config={"settings": {"lease_seconds": 2}}, owner=name) as scheduler:
        scheduler.register("job", lambda ctx: None)
        print("ready", flush=True)
        scheduler.run(stop)
    """
)


def wait_for(
    store: EventStore, done: Callable[[list[Any]], bool], timeout: float = 120
) -> list[Any]:
    """Wait on commits (never a bare sleep) until `done(log)` holds."""
    deadline = time.monotonic() + timeout
    while True:
        recorded = store.read(0, 1_000_000)
        if done(recorded):
            return recorded
        assert time.monotonic() < deadline, "timed out waiting for the runners"
        store.wait_for_commit(recorded[-1].position if recorded else 0, 0.5)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_racing_processes_with_one_stopped_past_its_lease(kind: str, tmp_path: Path) -> None:
    with ExitStack() as stack:
        if kind == "sqlite":
            url = f"sqlite:///{tmp_path / 'race.db'}"
        else:
            url = schema_url(stack.enter_context(temporary_schema()))
        s = stack.enter_context(
            rota.open(url, config={"settings": {"lease_seconds": 2}}, owner="definer")
        )
        s.register("job", lambda ctx: None)
        s.service.schedules.define(
            "fast", binding="job", every="1s", catchup="all", overlap="allow_all"
        )
        s.service.schedules.define("slow", binding="job", every="3s")
        env = {**os.environ, "PYTHONSAFEPATH": "1"}
        children = [
            subprocess.Popen(
                [sys.executable, "-P", "-c", CHILD, url, f"p{i}"],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for i in range(3)
        ]
        try:
            for child in children:
                assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            store = s.store

            def leaders(log: list[Any]) -> list[str]:
                return [r.event.owner for r in log if r.type == "core.schedule.leader_acquired"]

            log = wait_for(
                store,
                lambda log: (
                    len(leaders(log)) >= 1
                    and sum(r.type == "core.schedule.fired" for r in log) >= 3
                ),
            )
            leader = leaders(log)[-1]
            stopped = children[int(leader[1:])]

            def taken_over(log: list[Any], after: int) -> bool:
                return any(
                    r.type == "core.schedule.leader_acquired"
                    and r.position > after
                    and r.event.owner != leader
                    for r in log
                )

            for _ in range(5):
                stopped.send_signal(signal.SIGSTOP)  # paused past its 2 s lease
                stopped_at = store.head().position
                try:
                    wait_for(store, lambda log, at=stopped_at: taken_over(log, at), timeout=15)
                    break
                except AssertionError:
                    # Stopped inside a write transaction, it holds the store's write lock
                    # and nobody can take over: let it finish that write and stop it again.
                    stopped.send_signal(signal.SIGCONT)
                    seen = store.head().position
                    wait_for(store, lambda log, seen=seen: log[-1].position > seen)
            else:
                pytest.fail("no other runner took the lease over")
            stopped.send_signal(signal.SIGCONT)
            wait_for(
                store,
                lambda log: any(
                    r.type == "core.schedule.leader_lost"
                    and r.event.owner == leader
                    and r.position > stopped_at
                    for r in log
                ),
            )
            count = sum(r.type == "core.schedule.fired" for r in store.read(0, 1_000_000))
            wait_for(
                store, lambda log: sum(r.type == "core.schedule.fired" for r in log) >= count + 3
            )
        finally:
            for child in children:
                child.send_signal(signal.SIGCONT)
                child.terminate()
            for child in children:
                child.wait(timeout=30)
        s.service.catch_up()
        owners = check_log(s.store)
        assert len(set(owners)) >= 2
