"""The invariants after every event of logs two real hosts write under random operations:
submits, passes of either host, clock advances and steps both ways, results that come
late (after their lease lapsed) or never, recoveries that attach, lose, relaunch or find
nothing, cancels, retries, releases, interrupts, confirmed stops, schedules paused and
resumed. Seeded; a failure prints its seed and step.

The hanging executor always persists its recovery metadata before returning from its
launch, and each attempt's result is reported once: the other way round reaches the bug
pinned in test_invariants_live.py (two results of one attempt in one batch).
"""

from __future__ import annotations

import contextlib
import logging
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.memory.backend import forget
from rota.testing.sim.invariants import Checker, Violation, store_records

SEEDS = range(16)
STEPS = 300
CONFIG: dict[str, Any] = {
    "settings": {"concurrency": 3, "job_concurrency": 2, "lease_seconds": 60},
    "scopes": [{"path": "root/team", "limits": {"concurrency": 2}}],
    "budgets": [
        {"id": "turns", "unit": "turns", "max": 4, "per": "work"},
        {"id": "usd", "unit": "usd", "max": 5, "per": "scope"},
    ],
}


class Hanging(rota.Executor):
    """Launches persist metadata and hang until the test reports their result; recovery
    answers at random."""

    capabilities = frozenset({"recover", "stop", "interrupt"})

    def __init__(self, rng: random.Random, pending: dict[tuple[str, int], Any]) -> None:
        self.name = "hang"
        self.rng = rng
        self.pending = pending

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        ctx.persist_recovery({"pid": 1})
        self.pending[(ctx.execution_id, ctx.epoch)] = done

    def recover(self, ctx: rota.LaunchContext, metadata: Any, done: Any) -> Any:
        answer = self.rng.choice(["attached", "attached", "lost", "not_started", "unknown"])
        if answer == "attached":
            self.pending[(ctx.execution_id, ctx.epoch)] = done
        return answer

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> Any:
        return "stopped" if self.rng.random() < 0.8 else "unknown"

    def interrupt(self, execution_id: str, epoch: int) -> bool:
        return True


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def hosts(rng: random.Random, clock: ManualClock, url: str, pending: dict[Any, Any]) -> list[Any]:
    opened = []
    for name in ("a", "b"):
        host = rota.open(url, clock=clock, config=CONFIG, owner=f"host-{name}")
        host.register("hang", executor=Hanging(rng, pending))

        def quick(ctx: rota.LaunchContext) -> Any:
            draw = rng.random()
            if draw < 0.3:
                raise rota.Fail("boom", "a failure")
            return rota.Result(usage={"usd": 1.0}) if draw < 0.5 else "ok"

        host.register("quick", quick, inline=True)
        host.register("job", lambda ctx: "ok", inline=True)
        opened.append(host)
    opened[0].schedule("tick", binding="job", every="1m", jitter=20)
    opened[0].schedule("cron", binding="quick", cron="*/2 * * * *", catchup="all")
    opened[1].schedule("slow", binding="job", every="7m", catchup="none")
    return opened


def step(rng: random.Random, clock: ManualClock, host: Any, works: list[str], pending: Any) -> None:
    """One random operation (a refusal is an answer, not a failure)."""
    op = rng.random()
    if op < 0.15:
        works.append(f"w{len(works)}")
        host.submit(
            works[-1],
            binding=rng.choice(["hang", "quick", "quick", "job"]),
            scope=rng.choice(["root", "root/team", "root/team/x"]),
            safety=rng.choice(["undeclared", "idempotent"]),
        )
    elif op < 0.45:
        host.tick()
    elif op < 0.60:
        clock.advance(rng.choice([1, 5, 20, 40, 70, 200, 700]))
    elif op < 0.65:
        clock.step(rng.choice([-3600, -120, -30, 30, 120, 3600]))
    elif op < 0.78 and pending:
        done = pending.pop(rng.choice(sorted(pending)))
        outcome = rng.choice(["completed", "completed", "failed", "held"])
        if outcome == "held":
            done(rota.Result(outcome="failed", error_code="x", holds_resources=True))
        else:
            failed = outcome == "failed"
            done(rota.Result(outcome=outcome, error_code="x" if failed else None))
    elif op < 0.92 and works:
        work = rng.choice(works)
        action = rng.choice([host.cancel, host.retry, host.release, host.interrupt])
        action(work)
    elif op < 0.94:
        pause = rng.choice([host.schedules.pause, host.schedules.resume])
        pause(rng.choice(["tick", "cron", "slow"]))
    elif works:
        view = host.work(rng.choice(works))
        if view is not None and view.attempts:
            host.confirm_stopped(view.attempts[-1].execution, view.attempts[-1].epoch)


def trial(seed: int, settings: rota.Settings | None = None) -> tuple[list[Violation], int]:
    """Run seed `seed`; the violations (checked under `settings`, else the hosts')."""
    rng = random.Random(seed)
    clock = ManualClock(datetime(2026, 3, 1, 9, tzinfo=UTC))
    name = f"fuzz-{uuid.uuid4().hex}"
    pending: dict[tuple[str, int], Any] = {}
    opened = hosts(rng, clock, f"memory://{name}", pending)
    checker = Checker(settings or opened[0].settings)
    works: list[str] = []
    seen, found = 0, []
    try:
        for number in range(STEPS):
            with contextlib.suppress(rota.RotaError, rota.StoreError):
                step(rng, clock, rng.choice(opened), works, pending)
            for event, row in store_records(opened[0].store, after=seen):
                seen = event.position
                for violation in checker.observe(event, row):
                    found.append(Violation(violation.invariant, f"step {number}: {violation}", ()))
            if found:
                return found, checker.checked
        for _ in range(3):  # quiescent: every host runs its passes at the final time
            for host in opened:
                host.tick()
        found.extend(checker.observe_all(store_records(opened[0].store, after=seen)))
        found.extend(checker.at_rest(clock.now()))
        return found, checker.checked
    finally:
        for host in opened:
            close(host)
        forget(name)


def close(host: rota.Scheduler) -> None:
    """Close a host. `TaskThreads.shutdown` can join a task thread that `submit` added but
    has not started yet (a task submitting another while the host closes): a race in the
    launcher's shutdown, outside what this test checks, that only fails the close."""
    try:
        host.close()
    except RuntimeError as exc:
        if "cannot join thread before it is started" not in str(exc):
            raise


@pytest.mark.parametrize("seed", SEEDS)
def test_two_hosts_under_random_operations_violate_no_invariant(seed: int) -> None:
    found, checked = trial(seed)
    assert found == [], f"seed {seed}: " + "; ".join(str(v) for v in found)
    assert checked > STEPS / 2


def test_the_same_trials_overrun_a_tighter_limit() -> None:
    # Negative control: the checker is live on these logs; under one agent slot (the hosts
    # ran three) some seed's log overruns it, and only capacity is reported.
    tighter = rota.Settings(concurrency=1, job_concurrency=2, scope_limits={"root/team": 2})
    found = [v for seed in SEEDS for v in trial(seed, tighter)[0]]
    assert found and {v.invariant for v in found} == {"capacity_respected"}
