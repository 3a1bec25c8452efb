"""rota.testing's virtual time: advance stops at every due moment, in order, and runs what is
due there; retries start at their delays; DST nights fire as docs/schedules.md says; a
budget hold stays until released; bad input and endless schedules are clear errors."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import rota
from rota.testing import TestScheduler, TimeSkipError, open_test

START = datetime(2026, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def rt() -> Iterator[TestScheduler]:
    with open_test(start=START) as opened:
        yield opened


def recorder(rt: TestScheduler, seen: list[datetime]) -> Any:
    """A callable that notes the virtual time it runs at."""

    def job(ctx: rota.LaunchContext) -> dict[str, str]:
        seen.append(rt.now)
        return {"ran": rt.now.isoformat()}

    return job


def test_advance_stops_at_every_fire_in_order_and_runs_it_at_its_nominal_time(
    rt: TestScheduler,
) -> None:
    seen: list[datetime] = []
    rt.register("job", recorder(rt, seen))
    rt.schedule("hourly", binding="job", every="1h")
    rt.schedule("half-past", binding="job", every="1h", offset="30m")

    stops = rt.advance(timedelta(hours=3))

    expected = [START + HOUR * n / 2 for n in range(1, 7)]  # 00:30, 01:00, ... 03:00
    assert stops == expected
    assert seen == expected
    assert rt.fired_at("hourly") == [START + HOUR * n for n in (1, 2, 3)]
    assert rt.fired_at("half-past") == [START + HOUR * n + HOUR / 2 for n in (0, 1, 2)]
    assert rt.skipped("hourly") == []
    assert rt.now == START + 3 * HOUR


def test_a_plain_clock_jump_coalesces_what_advance_fires_one_by_one() -> None:
    """Negative control: the same hours skipped at once (what the kit must not do) make
    catch-up fire the newest due time only: 01:00 is past the 1 h catch-up window, 02:00
    is coalesced into 03:00."""
    with open_test(start=START) as jumped:
        jumped.register("job", lambda ctx: None)
        jumped.schedule("hourly", binding="job", every="1h")
        jumped.run_until_idle()
        jumped.clock.advance(hours=3)
        jumped.run_until_idle()
        assert jumped.fired_at("hourly") == [START + 3 * HOUR]
        assert [(s.nominal, s.reason) for s in jumped.skipped("hourly")] == [
            (START + HOUR, "outside_catchup_window"),
            (START + 2 * HOUR, "coalesced"),
        ]


def test_advance_to_an_instant_and_back_to_back_calls_fire_each_time_once(
    rt: TestScheduler,
) -> None:
    rt.register("job", lambda ctx: None)
    rt.schedule("hourly", binding="job", every="1h")
    assert rt.advance_to(START + 90 * timedelta(minutes=1)) == [START + HOUR]
    assert rt.advance(timedelta(0)) == []
    assert rt.advance(HOUR) == [START + 2 * HOUR]
    assert rt.fired_at("hourly") == [START + HOUR, START + 2 * HOUR]
    assert rt.now == START + 150 * timedelta(minutes=1)


def test_a_failed_run_is_retried_after_each_delay_of_its_policy(rt: TestScheduler) -> None:
    seen: list[datetime] = []

    def flaky(ctx: rota.LaunchContext) -> str:
        seen.append(rt.now)
        if ctx.attempt < 3:
            raise rota.Fail("upstream_down", "try later")
        return "done"

    rt.register("flaky", flaky, retry=rota.RetryPolicy(max_attempts=3, delays=(90, 600)))
    handle = rt.submit("w", binding="flaky")

    stops = rt.advance(timedelta(hours=1))

    assert stops == [START + timedelta(seconds=90), START + timedelta(seconds=690)]
    assert seen == [START, *stops]
    assert rt.retried_after("w") == [timedelta(seconds=90), timedelta(seconds=600)]
    assert [r.delay for r in rt.retries("w")] == [timedelta(seconds=90), timedelta(seconds=600)]
    assert [(a.outcome, a.error_code) for a in rt.attempts("w")] == [
        ("failed", "upstream_down"),
        ("failed", "upstream_down"),
        ("completed", None),
    ]
    assert handle.result() == "done"


def test_a_retry_hint_is_a_due_moment_advance_stops_at(rt: TestScheduler) -> None:
    """A schedule's Work is standing: a failure with a retry hint arms a timer at the hint
    plus two minutes (seed 001) that holds the Work back until it fires; advance stops there."""

    def hinted(ctx: rota.LaunchContext) -> str:
        raise rota.Fail("busy", "later", retry_at=rt.now + timedelta(minutes=7))

    rt.register("hinted", hinted)
    rt.schedule("daily", binding="hinted", cron="0 6 * * *")
    stops = rt.advance(timedelta(hours=7))
    assert stops == [START + 6 * HOUR, START + 6 * HOUR + timedelta(minutes=9)]
    work = rt.fire("daily", at=START + 6 * HOUR).work
    assert work is not None
    [retry] = rt.retries(work)
    assert (retry.after_attempt, retry.failed_at) == (1, START + 6 * HOUR)
    assert retry.delay == timedelta(minutes=9)
    assert retry.started_at is None  # a standing Work's hint delays its next input only
    assert rt.work(work).retry.next_due is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("zone", "cron", "start", "expected_utc"),
    [
        # Spring forward: 02:30 does not exist on 2026-03-29 in Berlin; it fires at 03:00
        # CEST, right after the jump (cronsim's Debian cron rule, docs/schedules.md "DST").
        (
            "Europe/Berlin",
            "30 2 * * *",
            datetime(2026, 3, 28, tzinfo=UTC),
            ["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"],
        ),
        # Fall back: 01:30 happens twice on 2026-11-01 in New York; it fires once, at
        # 01:30 EDT.
        (
            "America/New_York",
            "30 1 * * *",
            datetime(2026, 10, 31, tzinfo=UTC),
            ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"],
        ),
        # A wildcard hour fires in every real hour, each instant once: the repeated hour
        # twice (01:00 and 01:30 EDT, then EST).
        (
            "America/New_York",
            "*/30 * * * *",
            datetime(2026, 11, 1, 4, 45, tzinfo=UTC),
            ["2026-11-01T05:00", "2026-11-01T05:30", "2026-11-01T06:00", "2026-11-01T06:30"],
        ),
    ],
)
def test_a_dst_night_fires_as_the_schedules_doc_says(
    zone: str, cron: str, start: datetime, expected_utc: list[str]
) -> None:
    expected = [datetime.fromisoformat(at).replace(tzinfo=UTC) for at in expected_utc]
    with open_test(start=start, zone=zone) as rt:
        rt.register("job", lambda ctx: None)
        rt.schedule("s", binding="job", cron=cron, timezone=zone)
        rt.advance_to(expected[-1])
        rt.assert_fired("s", at=expected)
        assert rt.fired_at("s") == expected


def test_a_spring_forward_fire_reads_as_local_wall_time() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    with open_test(start=datetime(2026, 3, 29, tzinfo=UTC)) as rt:
        rt.register("job", lambda ctx: None)
        rt.schedule("s", binding="job", cron="30 2 * * *", timezone="Europe/Berlin")
        rt.advance(timedelta(days=1))
        rt.assert_fired("s", at=[datetime(2026, 3, 29, 3, 0, tzinfo=berlin)])


def test_a_budget_holds_a_start_until_released_even_in_a_new_window() -> None:
    config = {"budgets": [{"id": "daily", "unit": "attempts", "max": 1, "period": "day"}]}
    with open_test(config, start=START) as rt:
        rt.register("job", lambda ctx: "ok")
        rt.submit("w", binding="job", kind="standing", input={"n": 1})
        rt.advance(HOUR)
        rt.submit("w", binding="job", kind="standing", input={"n": 2})
        rt.advance(HOUR)
        hold = rt.assert_held_by_budget("w", budget="daily", window="2026-03-01", released=False)
        assert hold.at == START + HOUR
        assert hold.ledger == "work:w"

        rt.advance(timedelta(days=1))  # a new window begins: the hold stays
        assert len(rt.attempts("w")) == 1
        assert rt.work("w").state == "held"  # type: ignore[union-attr]

        rt.release("w")
        rt.run_until_idle()
        assert [a.started_at for a in rt.attempts("w")] == [START, START + 26 * HOUR]
        released = rt.assert_held_by_budget("w", released=True)
        assert released.released_at == START + 26 * HOUR


def test_a_paused_schedule_records_each_due_time_paused_at_that_time(
    rt: TestScheduler,
) -> None:
    rt.register("job", lambda ctx: None)
    rt.schedule("hourly", binding="job", every="1h")
    rt.schedules.pause("hourly", reason="maintenance")
    assert rt.advance(timedelta(hours=2)) == [START + HOUR, START + 2 * HOUR]
    rt.assert_skipped("hourly", at=[START + HOUR, START + 2 * HOUR], reason="paused")
    assert rt.fired_at("hourly") == []


def test_run_until_quiet_runs_every_retry_then_stops(rt: TestScheduler) -> None:
    rt.register("boom", _raise_fail, retry=rota.RetryPolicy(max_attempts=3))
    rt.submit("w", binding="boom")
    stops = rt.run_until_quiet(within=timedelta(days=1))
    assert stops == [START + timedelta(minutes=5), START + timedelta(minutes=15)]
    assert rt.work("w").state == "failed"  # type: ignore[union-attr]
    assert rt.next_due() is None
    assert rt.run_until_quiet(within=HOUR) == []


def _raise_fail(ctx: rota.LaunchContext) -> None:
    raise rota.Fail("always", "fails")


def test_run_until_quiet_refuses_a_schedule_that_fires_forever(rt: TestScheduler) -> None:
    rt.register("job", lambda ctx: None)
    rt.schedule("hourly", binding="job", every="1h")
    with pytest.raises(TimeSkipError, match=r"not quiet within 1 day.*schedule 'hourly'"):
        rt.run_until_quiet(within=timedelta(days=1))
    assert len(rt.fired_at("hourly")) == 24  # it went as far as the horizon
    rt.schedules.pause("hourly")
    assert rt.run_until_quiet(within=HOUR) == []  # paused: nothing more will fire


def test_too_many_due_moments_is_refused_with_the_next_one_named() -> None:
    with open_test(start=START, max_stops=5) as rt:
        rt.register("job", lambda ctx: None)
        rt.schedule("minutely", binding="job", every="1m")
        with pytest.raises(TimeSkipError, match=r"stopped at 5 due moments.*'minutely'"):
            rt.advance(HOUR)
        assert len(rt.fired_at("minutely")) == 5


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda rt: rt.advance(-HOUR), ValueError, "forward"),
        (lambda rt: rt.advance(3600), TypeError, "timedelta"),
        (lambda rt: rt.advance_to(datetime(2026, 3, 2)), ValueError, "naive"),
        (lambda rt: rt.advance_to(START - HOUR), ValueError, "before now"),
        (lambda rt: rt.run_until_quiet(within=timedelta(0)), ValueError, "positive"),
        (lambda rt: rt.assert_fired("s", at=[datetime(2026, 3, 2)]), ValueError, "naive"),
        (lambda rt: rt.fire("s", at=datetime(2026, 3, 2)), ValueError, "naive"),
    ],
)
def test_bad_input_is_refused_with_what_to_do(
    rt: TestScheduler, call: Any, error: type[Exception], message: str
) -> None:
    rt.register("job", lambda ctx: None)
    rt.schedule("s", binding="job", every="1h")
    with pytest.raises(error, match=message):
        call(rt)
    assert rt.now == START  # nothing moved


def test_open_test_refuses_a_naive_start_and_an_unknown_zone() -> None:
    with pytest.raises(ValueError, match="naive"):
        open_test(start=datetime(2026, 1, 1))
    with pytest.raises(Exception, match="Mars"):
        open_test(zone="Mars/Olympus")


def test_a_callable_still_running_after_idle_timeout_is_a_clear_error() -> None:
    release = threading.Event()
    with open_test(start=START, idle_timeout=0.2) as rt:
        rt.register("stuck", lambda ctx: release.wait(30), inline=False)
        rt.submit("w", binding="stuck")
        try:
            with pytest.raises(TimeSkipError, match=r"still running after 0.2 s"):
                rt.advance(HOUR)
            assert rt.now == START  # time did not move under a running attempt
        finally:
            release.set()
        rt.run_until_idle()
        assert rt.work("w").state == "completed"  # type: ignore[union-attr]


def test_a_due_moment_no_pass_acts_on_is_reported_stuck() -> None:
    """Another scheduler on the same store leads the schedules: this one's passes cannot
    fire the due time, and advance says so instead of spinning."""
    clock = rota.ManualClock(START)
    url = "memory://kit-stuck"
    other = rota.open(url, clock=clock, config={}, owner="other")
    rt = TestScheduler(rota.open(url, clock=clock, config={}, owner="kit"), clock)
    try:
        rt.register("job", lambda ctx: None)
        other.register("job", lambda ctx: None)
        rt.schedule("often", binding="job", every="30s")
        other.tick()  # takes the leader lease for 60 s
        with pytest.raises(TimeSkipError, match=r"stuck at .*schedule 'often'.*lead"):
            rt.advance(timedelta(seconds=40))
    finally:
        rt.close()
        other.close()
        from rota.infrastructure.memory.backend import forget

        forget("kit-stuck")


def test_the_same_test_writes_the_same_log() -> None:
    def run() -> list[tuple[str, str, str, Any]]:
        with open_test(start=START) as rt:
            for n in range(3):
                rt.register(f"job{n}", lambda ctx: {"at": ctx.trigger["nominal"]})
                rt.schedule(f"s{n}", binding=f"job{n}", every="1h")
            rt.advance(timedelta(hours=4))
            return [(e.type, e.stream, e.recorded_at, e.data) for e in rt.events(0, 10_000)]

    first = run()
    assert len(first) > 50
    assert all(run() == first for _ in range(5))


def test_long_jumps_hand_the_leader_lease_back_instead_of_losing_it(rt: TestScheduler) -> None:
    rt.register("job", lambda ctx: None)
    rt.schedule("daily", binding="job", cron="0 12 * * *")
    rt.advance(timedelta(days=3))
    types = [e.type for e in rt.events(0, 10_000)]
    assert "core.schedule.leader_lost" not in types
    assert types.count("core.schedule.leader_released") == 4  # a jump to each noon, then to 00:00
    assert len(rt.fired_at("daily")) == 3


def test_closed_means_closed(rt: TestScheduler) -> None:
    rt.close()
    rt.close()  # twice is fine
    assert rt.closed
    with pytest.raises(RuntimeError, match="closed"):
        rt.advance(HOUR)


def test_the_configs_schedules_are_applied_as_rota_run_applies_them() -> None:
    config = {
        "schedules": [{"name": "nightly", "binding": "report", "cron": "0 3 * * *"}],
        "bindings": [{"name": "report", "executor": "report"}],
    }
    with open_test(config, start=START) as rt:
        assert rt.schedules.show("nightly").source == "config"
        rt.register("report", lambda ctx: "ok", binding=False)  # the config's binding
        rt.advance(timedelta(days=2))
        assert rt.fired_at("nightly") == [START + 3 * HOUR, START + 27 * HOUR]
        assert rt.fire("nightly", at=START + 3 * HOUR).outcome == "completed"


def test_an_inline_callable_that_never_returns_is_a_clear_error_not_a_hang() -> None:
    release = threading.Event()
    rt = open_test(start=START, idle_timeout=0.2)
    try:
        rt.register("stuck", lambda ctx: release.wait(30))  # inline, the kit's default
        rt.submit("w", binding="stuck")
        with pytest.raises(TimeSkipError, match=r"still running after 0.2 s"):
            rt.advance(HOUR)
        with pytest.raises(TimeSkipError, match="an earlier pass is still running"):
            rt.run_until_idle()
        assert rt.now == START
    finally:
        release.set()
        rt.close()


def test_async_callables_and_context_variables_reach_the_passes(rt: TestScheduler) -> None:
    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant")
    tenant.set("acme")

    async def job(ctx: rota.LaunchContext) -> str:
        if ctx.attempt == 1:
            raise rota.Fail("later", "once")
        return "done"

    rt.register("async-job", job, retry=rota.RetryPolicy(delays=(60,)))
    rt.register("sync-job", lambda ctx: tenant.get())
    rt.submit("a", binding="async-job")
    rt.submit("s", binding="sync-job")
    rt.advance(timedelta(minutes=5))
    assert rt.retried_after("a") == [timedelta(minutes=1)]
    assert rt.handle("a").result() == "done"
    assert rt.handle("s").result() == "acme"
