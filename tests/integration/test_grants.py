"""Binding grants (seed 001): a Work opts into named grants at submit; each attempt pins its
binding with their config applied and names the grants it took, so recovery, relaunch and
resume launch with them; a grant's environment reaches the launch and never the log; an
undefined grant is refused at submit with a code."""

from __future__ import annotations

import asyncio
import io
import logging
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
import rota.aio
from integration.cli_process import refused
from integration.cli_process import rota as run_rota
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.config import Config, ConfigError
from rota.replay.export import export

SECRET = "grantcanary-5d1e0b7a93"  # a grant environment's value: never written
T0 = datetime(2026, 12, 7, 9, tzinfo=UTC)
GRANTS = [
    {
        "name": "s3-write",
        "config": {"bucket": "reports", "mode": "write"},
        "environment": {"AWS_SECRET_ACCESS_KEY": SECRET},
    },
    {"name": "audit", "config": {"mode": "append"}},
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def seen() -> list[dict[str, Any]]:
    return []


def recorder(seen: list[dict[str, Any]], result: Any = "ok") -> Any:
    def job(ctx: rota.LaunchContext) -> Any:
        seen.append(
            {"epoch": ctx.epoch, "config": dict(ctx.config), "env": dict(ctx.env),
             "grants": ctx.grants, "resume": ctx.resume}
        )  # fmt: skip
        return result() if callable(result) else result

    return job


@pytest.fixture
def scheduler(
    memory_url: str, clock: ManualClock, seen: list[dict[str, Any]]
) -> Iterator[rota.Scheduler]:
    config = {"grants": GRANTS}
    with rota.open(memory_url, clock=clock, config=config, owner="host-a") as s:
        s.register("job", recorder(seen), inline=True, config={"bucket": "public", "n": 1})
        yield s


def log_bytes(scheduler: rota.Scheduler) -> bytes:
    out = io.BytesIO()
    export(scheduler.store, out)
    return out.getvalue()


# -- submit ------------------------------------------------------------------------------


def test_an_attempt_pins_the_grants_config_in_order_and_launches_with_their_environment(
    scheduler: rota.Scheduler, seen: list[dict[str, Any]]
) -> None:
    scheduler.submit("w", binding="job", grants=["s3-write", "audit"])
    scheduler.submit("plain", binding="job")
    scheduler.run_until_idle(timeout=30)
    by_grants = {tuple(s["grants"]): s for s in seen}
    granted = by_grants[("s3-write", "audit")]
    # The binding's config, then s3-write's over it, then audit's over that.
    assert granted["config"] == {"bucket": "reports", "n": 1, "mode": "append"}
    assert granted["env"]["AWS_SECRET_ACCESS_KEY"] == SECRET
    plain = by_grants[()]
    assert plain["config"] == {"bucket": "public", "n": 1}
    assert "AWS_SECRET_ACCESS_KEY" not in plain["env"]

    view = scheduler.work("w")
    assert view is not None and view.state == "completed"
    assert view.grants == ("s3-write", "audit")
    assert view.attempts[0].grants == ("s3-write", "audit")
    claimed = [e for e in scheduler.events() if e.type == "core.execution.claimed"]
    by_work = {e.data["work_id"]: e.data for e in claimed}
    assert by_work["w"]["grants"] == ["s3-write", "audit"]
    assert by_work["w"]["pinned"]["binding"]["config"]["bucket"] == "reports"
    assert by_work["w"]["pinned"]["binding"]["secrets_digest"].startswith("scrypt1:")
    assert by_work["plain"]["grants"] == []
    submitted = [e.data for e in scheduler.events() if e.type == "core.work.submitted"]
    assert {e["work_id"]: e["grants"] for e in submitted} == {
        "w": ["s3-write", "audit"],
        "plain": [],
    }
    # The grant's value reached the job and nothing rota wrote.
    assert SECRET.encode() not in log_bytes(scheduler)


def test_an_undefined_grant_is_refused_at_submit_with_a_code(scheduler: rota.Scheduler) -> None:
    head = scheduler.store.head()
    with pytest.raises(rota.RotaError) as refused:
        scheduler.submit("w", binding="job", grants=["s3-write", "s3-admin"])
    assert refused.value.code == "unknown_grant"
    assert "'s3-admin'" in refused.value.message and "audit" in refused.value.message
    assert scheduler.store.head() == head  # nothing written
    assert scheduler.work("w") is None


@pytest.mark.parametrize(
    "grants", [["bad name"], ["a", "a"], "s3-write", ["x\n"], [f"g{i}" for i in range(17)]]
)
def test_a_malformed_grant_list_is_invalid_grant(scheduler: rota.Scheduler, grants: Any) -> None:
    with pytest.raises(rota.InvalidCommand) as refused:
        scheduler.submit("w", binding="job", grants=grants)
    assert refused.value.code == "invalid_grant"


def test_grants_are_part_of_the_definition(scheduler: rota.Scheduler) -> None:
    scheduler.submit("w", binding="job", kind="standing", grants=["audit"])
    scheduler.submit("w", binding="job", kind="standing", grants=["audit"])  # no-op
    with pytest.raises(rota.Refusal) as refused:
        scheduler.submit("w", binding="job", kind="standing", grants=["s3-write"])
    assert refused.value.code == "work_conflict"
    assert "grants ['audit']" in refused.value.message


# -- recovery, relaunch and resume keep what the attempt took -------------------------------


def test_a_relaunch_after_a_crash_keeps_the_pinned_grants_under_a_changed_config(
    memory_url: str,
    clock: ManualClock,
    seen: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="rota.scheduler")
    with rota.open(memory_url, clock=clock, config={"grants": GRANTS}, owner="host-a") as a:
        a.register("job", recorder(seen), inline=True, config={"bucket": "public"})
        a.submit("w", binding="job", grants=["s3-write"])
        a.service.lifecycle.start_pass()  # claimed; the host "crashed" before invoking
        a.host.held.clear()
    assert seen == []
    # The next process defines the grant otherwise: the attempt keeps what it pinned.
    changed = [{"name": "s3-write", "config": {"bucket": "elsewhere"},
                "environment": {"AWS_SECRET_ACCESS_KEY": SECRET + "-rotated"}}]  # fmt: skip
    with rota.open(memory_url, clock=clock, config={"grants": changed}, owner="host-b") as b:
        b.register("job", recorder(seen), inline=True, config={"bucket": "public"})
        clock.advance(61)
        report = b.tick()
        assert report.relaunched == 1
        b.tick()
        view = b.work("w")
        assert view is not None and view.state == "completed"
        assert [s.kind for s in view.attempts[0].segments] == ["start", "relaunched"]
        assert view.attempts[0].grants == ("s3-write",)
        log = log_bytes(b)
    (launch,) = seen
    assert launch["epoch"] == 2 and launch["grants"] == ("s3-write",)
    assert launch["config"] == {"bucket": "reports", "mode": "write"}  # as pinned
    # Variables are resolved at each launch (as a binding's are): the current value.
    assert launch["env"]["AWS_SECRET_ACCESS_KEY"] == SECRET + "-rotated"
    changed_lines = [r.getMessage() for r in caplog.records if "environment changed" in r.message]
    assert changed_lines == [
        "binding job: its environment changed since attempt w/1 was pinned; launching with "
        "the current values"
    ]  # logged by name: no value
    assert SECRET.encode() not in log


def test_an_adopted_attempt_keeps_its_grants(scheduler: rota.Scheduler, clock: ManualClock) -> None:
    release, seen_grants = threading.Event(), []

    def slow(ctx: rota.LaunchContext) -> str:
        seen_grants.append((ctx.epoch, ctx.grants, ctx.config.get("bucket")))
        assert release.wait(30)
        return "finished"

    scheduler.register("slow", slow)
    scheduler.submit("w", binding="slow", grants=["s3-write"])
    scheduler.tick()
    clock.advance(61)  # no renewal: the lease lapses while the call runs
    report = scheduler.tick()
    assert report.recovered == 1
    release.set()
    scheduler.run_until_idle(timeout=30)
    view = scheduler.work("w")
    assert view is not None and view.state == "completed"
    attempt = view.attempts[0]
    assert attempt.epoch == 2 and attempt.grants == ("s3-write",)
    assert seen_grants == [(1, ("s3-write",), "reports")]
    recovered = [e.data for e in scheduler.events() if e.type == "core.execution.recovered"]
    assert recovered, "the attempt was recovered at a higher epoch"


def test_a_resumed_attempt_keeps_its_grants_after_the_grant_is_redefined(
    scheduler: rota.Scheduler, clock: ManualClock, seen: list[dict[str, Any]]
) -> None:
    answers = iter([rota.Result(outcome="waiting"), "done"])
    scheduler.register("agent", recorder(seen, lambda: next(answers)), inline=True)
    scheduler.submit("a", binding="agent", kind="standing", input="first", grants=["s3-write"])
    scheduler.run_until_idle(timeout=30)
    parked = scheduler.work("a")
    assert parked is not None and parked.state == "waiting"
    scheduler.grant("s3-write", config={"bucket": "redefined"}, environment={"K": "v"})
    scheduler.accept("a", "wake")
    scheduler.run_until_idle(timeout=30)
    view = scheduler.work("a")
    assert view is not None and view.attempts[0].outcome == "completed"
    assert len(view.attempts) == 1 and view.attempts[0].grants == ("s3-write",)
    first, resumed = seen
    assert resumed["resume"] and resumed["epoch"] == 2 and resumed["grants"] == ("s3-write",)
    assert resumed["config"] == first["config"] == {"bucket": "reports", "mode": "write"}
    assert resumed["env"]["K"] == "v"  # the grant's current variables
    # A new attempt (a new input after completion) pins the grant as it is now.
    scheduler.accept("a", "again")
    scheduler.run_until_idle(timeout=30)
    assert seen[-1]["config"] == {"bucket": "redefined"} and seen[-1]["epoch"] == 1


def test_a_new_attempt_whose_grant_was_removed_waits_unknown_grant(
    memory_url: str, clock: ManualClock, seen: list[dict[str, Any]]
) -> None:
    with rota.open(memory_url, clock=clock, config={"grants": GRANTS}) as a:
        a.register("job", recorder(seen), inline=True)
        a.submit("w", binding="job", grants=["audit"])
    with rota.open(memory_url, clock=clock) as b:  # no grants configured any more
        b.register("job", recorder(seen), inline=True)
        b.tick()
        view = b.work("w")
        assert view is not None and view.state == "ready"
        assert view.waiting is not None and view.waiting.code == "unknown_grant"
    assert seen == []


# -- the config file ---------------------------------------------------------------------


def test_the_config_file_defines_grants_and_refuses_bad_ones(tmp_path: Path) -> None:
    config = Config.parse({"grants": GRANTS})
    grant, environment = config.grants["s3-write"]
    assert grant.config == {"bucket": "reports", "mode": "write"}
    assert environment == {"AWS_SECRET_ACCESS_KEY": SECRET}
    bad: list[tuple[dict[str, Any], str]] = [
        ({"grants": [{"name": "a"}, {"name": "a"}]}, "grants[1].name: duplicate grant name"),
        ({"grants": [{"name": "bad name"}]}, "grants[0].name"),
        ({"grants": [{"name": "a", "config": {"environment": {"X": "y"}}}]}, "environment"),
        ({"grants": [{"name": "a", "environment": {"X": 3}}]}, "grants[0].environment"),
        ({"grants": [{"name": "a", "environment": {"X=": SECRET}}]}, "grants.a.environment"),
        ({"grants": [{"name": "a", "secret": "x"}]}, "grants[0].secret"),
    ]
    for data, where in bad:
        with pytest.raises(ConfigError) as refused:
            Config.parse(data)
        assert refused.value.code == "invalid_config"
        assert where in refused.value.message, refused.value.message
        assert SECRET not in refused.value.message


def test_the_cli_submits_with_grants_and_no_command_shows_the_grants_value(
    tmp_path: Path,
) -> None:
    (tmp_path / "rota.toml").write_text(
        '[store]\nurl = "rota.db"\n\n[[bindings]]\nname = "b"\nexecutor = "shell"\n'
        f'command = ["sh", "-c", "test ${{#T}} = {len(SECRET)}"]\n\n'
        f'[[grants]]\nname = "g"\nenvironment = {{ T = "{SECRET}" }}\n'
    )
    outputs: list[bytes] = []

    def run(*args: str) -> str:
        done = run_rota(tmp_path, *args)
        outputs.extend([done.stdout, done.stderr])
        assert done.returncode == 0, done.stderr
        return done.stdout.decode()

    run("submit", "w", "--binding", "b", "--grant", "g")
    run("submit", "plain", "--binding", "b")
    run("run", "--until-idle", "--timeout", "60")
    shown = run("work", "show", "w")
    assert "w: completed" in shown and "grants: g" in shown  # the job saw the grant's value
    plain = run("work", "show", "plain")  # without the grant the job's test failed
    assert "plain: retry_wait" in plain and "exit_1" in plain
    run("work", "show", "w", "--json")
    redacted = re.compile(r'grants\[0\]\.environment +\= \{"T":"<redacted>"\}')
    assert redacted.search(run("config", "show"))
    run("config", "show", "--json")
    run("events", "--json")
    line = refused(
        run_rota(tmp_path, "submit", "x", "--binding", "b", "--grant", "nope"), "unknown_grant", 1
    )
    assert "'nope'" in line
    assert all(SECRET.encode() not in out for out in outputs)
    written = b"".join(p.read_bytes() for p in tmp_path.glob("rota.db*") if p.is_file())
    assert written and SECRET.encode() not in written


def test_the_asyncio_facade_defines_grants_and_submits_with_them() -> None:
    async def job(ctx: rota.LaunchContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"bucket": ctx.config.get("bucket"), "grants": list(ctx.grants)}

    async def main() -> Any:
        async with await rota.aio.open("memory://") as scheduler:
            scheduler.register("job", job)
            scheduler.grant("s3-write", config={"bucket": "reports"})
            scheduler.start()
            handle = await scheduler.submit("w", binding="job", grants=["s3-write"])
            with pytest.raises(rota.RotaError) as refused:
                await scheduler.submit("x", binding="job", grants=["nope"])
            assert refused.value.code == "unknown_grant"
            return await handle.result(timeout=30)

    assert asyncio.run(main()) == {"bucket": "reports", "grants": ["s3-write"]}


def test_a_relaunch_after_the_grant_was_removed_keeps_its_config_without_its_variables(
    memory_url: str,
    clock: ManualClock,
    seen: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="rota.scheduler")
    with rota.open(memory_url, clock=clock, config={"grants": GRANTS}, owner="host-a") as a:
        a.register("job", recorder(seen), inline=True)
        a.submit("w", binding="job", grants=["s3-write"])
        a.service.lifecycle.start_pass()  # claimed; the host "crashed" before invoking
        a.host.held.clear()
    with rota.open(memory_url, clock=clock, owner="host-b") as b:  # no grants any more
        b.register("job", recorder(seen), inline=True)
        clock.advance(61)
        assert b.tick().relaunched == 1
        b.tick()
        view = b.work("w")
        assert view is not None and view.state == "completed"
    (launch,) = seen
    assert launch["grants"] == ("s3-write",)
    assert launch["config"] == {"bucket": "reports", "mode": "write"}  # as pinned
    assert "AWS_SECRET_ACCESS_KEY" not in launch["env"]
    assert any("no longer configured" in r.getMessage() for r in caplog.records)
    assert all(SECRET not in r.getMessage() for r in caplog.records)
