"""A store with something on every page of the web view, and the API serving it on loopback.

`build(directory)` makes, on an injected clock: a completed Work whose launch phases took
time; a Work whose attempt lost its lease for 90 s and was recovered (adopted); a Work
relaunched after a claim that never called its executor; a failed Work; a shell command
that failed for good (its stderr tail); a Work
whose host died (its attempt lost); a Work held by a
budget and one held by a start gate; ready Work a pool limit holds back; a budget ledger
and an audit checkpoint; a paused schedule with skipped times, fired once by hand (its
Work), and an active one.
`serve(world)` starts the HTTP API (with the web view) over it on
127.0.0.1 with three tokens: read, operate, admin.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import rota
from rota.domain.policy import RetryPolicy
from rota.http.app import create_app
from rota.http.context import ApiContext
from rota.http.metrics import registry
from rota.http.server import HttpServer
from rota.http.tokens import TokenFile
from rota.infrastructure.clock import ManualClock

START = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)


@dataclass
class World:
    scheduler: rota.Scheduler
    clock: ManualClock
    tokens: TokenFile
    secrets: dict[str, str]  # token by scope: read, operate, admin
    directory: Path


class Blocking(rota.Executor):
    """Holds its slot until the test ends, so a pool shows in use and waiting Work."""

    pool = "jobs"

    def __init__(self) -> None:
        self.name = "report"
        self.release = threading.Event()

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        threading.Thread(
            target=lambda: (self.release.wait(60), done(rota.Result())), daemon=True
        ).start()


def _wait_for_result(s: rota.Scheduler) -> None:
    for _ in range(400):
        if not s.host.results.empty():
            return
        s.host.wake.wait(0.05)
        s.host.wake.clear()
    raise AssertionError("no result arrived")


SHELL_TIMEOUT = 50 * 365 * 24 * 3600.0
MIGRATE = (
    "echo 'applying 0041_orders_index'; echo 'applying 0042_orders_fk';"
    " echo 'psql: ERROR:  relation \"orders_archive\" does not exist' >&2;"
    " echo 'migration 0042_orders_fk failed; rolled back' >&2; exit 3"
)


def _deploy(ctx: rota.LaunchContext) -> None:
    raise rota.Fail("rollout_failed", "kubectl rollout status: deadline exceeded")


def _ingest(ctx: rota.LaunchContext) -> None:
    """The lost attempt's executor (one function: the same generation on both hosts)."""


def build(directory: Path) -> World:
    clock = ManualClock(START)
    checkpoints = directory / "checkpoints"
    config: dict[str, Any] = {
        "settings": {"job_concurrency": 1},
        "budgets": [
            {"id": "nightly", "unit": "attempts", "max": 3, "per": "scope", "scope": "root/etl"},
            {"id": "daily", "unit": "attempts", "max": 40, "per": "all", "period": "day"},
        ],
        "audit": {"checkpoint_dir": str(checkpoints)},
        # Flow control: each tenant runs at most 2 at once and starts at most 6 an hour.
        "keys": [{"key": "tenant:*", "concurrency": 2}],
        "rates": [{"key": "tenant:*", "rate": "6/hour", "burst": 5}],
    }
    s = rota.open(directory / "web.db", clock=clock, config=config, owner="web-demo")

    def phased(ctx: rota.LaunchContext) -> str:
        for name, seconds in (("toolbelt", 4), ("secrets", 2), ("environment", 3)):
            with ctx.phase(name):
                clock.advance(seconds)
        with ctx.phase("executor"):
            clock.advance(21)
        return "ok"

    s.register("build", phased, inline=True)
    s.register(
        "deploy",
        _deploy,
        inline=True,
        retry=RetryPolicy(max_attempts=2, delays=(60.0,)),
    )
    s.register("noop", lambda ctx: "ok", inline=True)

    # Schedules: one paused (its nominal times are skipped, reason "paused", as the clock
    # moves on below), one active whose next fire is tomorrow night.
    s.schedule("hourly-sync", binding="noop", every="5m", scope="root/etl")
    s.schedules.pause("hourly-sync", actor="ops-alice", reason="the vendor's API is down")
    s.schedule("nightly-etl", binding="noop", cron="0 2 * * *", timezone="Europe/Berlin")

    # A completed Work whose launch phases are visible.
    s.submit("build-1842", binding="build", scope="root/ci")
    s.run_until_idle(timeout=10)
    clock.advance(30)

    # A recovered attempt: the lease (60 s) lapses while the call runs; 90 s without one.
    release = threading.Event()

    def slow(ctx: rota.LaunchContext) -> str:
        release.wait(30)
        return "finished"

    s.register("sync", slow)
    s.submit("sync-orders", binding="sync", scope="root/etl")
    s.tick()
    clock.advance(150)
    s.tick()  # recovery adopts it under epoch 2
    clock.advance(40)
    release.set()
    _wait_for_result(s)
    s.tick()

    # A relaunch: claimed, then the host "crashed" before calling the executor.
    s.submit("index-rebuild", binding="noop", scope="root/etl")
    s.service.lifecycle.start_pass()
    clock.advance(75)
    s.tick()
    s.tick()

    # A failed Work (three attempts, no retry left).
    s.submit("deploy-web", binding="deploy", scope="root/ops")
    for _ in range(2):
        s.run_until_idle(timeout=10)
        clock.advance(61)
        s.tick()
    s.run_until_idle(timeout=10)

    # A shell command that failed for good: its stderr tail is on its page.
    s.bind(
        "migrate",
        executor="shell",
        config={"command": ["sh", "-c", MIGRATE]},
        retry=RetryPolicy(max_attempts=1),
        # The shell executor times a run by the wall clock, and the demo's clock is behind
        # it: a deadline far ahead of both, so the run always ends by its exit.
        timeout_seconds=SHELL_TIMEOUT,
    )
    s.submit("migrate-db", binding="migrate", scope="root/ops")
    for _ in range(400):
        s.run_until_idle(timeout=10)
        view = s.work("migrate-db")
        if view is not None and view.state == "failed":
            break
        s.host.wake.wait(0.05)
        s.host.wake.clear()

    # A lost attempt: its host died holding it; recovery finds it not running, no result.
    dead_owner = f"{socket.gethostname()}:999999999:gone"
    with rota.open(directory / "web.db", clock=clock, config=config, owner=dead_owner) as dead:
        dead.register("ingest", _ingest)
        dead.submit("ingest-feed", binding="ingest", scope="root/data")
        claimed = dead.service.lifecycle.start_pass().claimed[0]
        dead.service.lifecycle.invoke(claimed.attempt.execution_id, 1)
        dead.host.held.clear()  # it dies holding nothing it could release
    s.register("ingest", _ingest)
    s.register_historical(claimed.attempt.pinned.generation, "ingest", _ingest)
    clock.advance(100)
    s.tick()
    for _ in range(400):
        view = s.work("ingest-feed")
        if view is not None and view.state == "failed":
            break
        s.host.wake.wait(0.05)
        s.host.wake.clear()

    # The budget of root/etl is spent by then (3 attempts); the next one is held.
    s.submit("etl-night", binding="noop", scope="root/etl")
    s.submit("etl-extra", binding="noop", scope="root/etl")
    s.run_until_idle(timeout=10)

    # A start gate holds a production release until someone admits it.
    s.register_gate(
        "change-approval",
        lambda work, binding, first: (
            "production changes need a second pair of eyes" if work.scope == "root/prod" else None
        ),
    )
    s.submit("release-2.4", binding="noop", scope="root/prod")
    s.run_until_idle(timeout=10)

    # One report holds the only job slot; two more wait for it.
    blocking = Blocking()
    s.register("report", executor=blocking)
    for name, priority in (("report-daily", 2), ("report-weekly", 0), ("report-monthly", 0)):
        s.submit(name, binding="report", scope="root/bi", keys=["tenant:bi"], priority=priority)
        clock.advance(5)
    s.tick()
    clock.advance(10)
    s.checkpoint()
    clock.advance(300)
    # An operator fires the paused schedule by hand: its Work links back to it.
    s.schedules.trigger_now("hourly-sync", key="catch-up", actor="ops-alice")
    tokens = TokenFile(directory / "tokens.json")
    secrets = {
        "read": tokens.add("viewer", frozenset({"read"})),
        "operate": tokens.add("ops-alice", frozenset({"operate"})),
        "admin": tokens.add("root-bob", frozenset({"admin"})),
    }
    world = World(s, clock, tokens, secrets, directory)
    world.blocking = blocking  # type: ignore[attr-defined]
    return world


def serve(world: World, *, read_only: bool = False) -> HttpServer:
    """The API and the web view over `world`, on a free loopback port."""
    scheduler = world.scheduler
    settings = scheduler.config.http.model_copy(update={"listen": "127.0.0.1:0"})
    context = ApiContext(
        scheduler=scheduler,
        tokens=world.tokens,
        settings=settings,
        metrics=registry(
            scheduler, budget=settings.metrics_series_budget, scope_depth=settings.scope_depth
        ),
        read_only=read_only,
    )
    return HttpServer(create_app(context), "127.0.0.1", 0).start()


def close(world: World) -> None:
    world.blocking.release.set()  # type: ignore[attr-defined]
    world.scheduler.close()
