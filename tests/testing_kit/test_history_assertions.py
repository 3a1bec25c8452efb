"""rota.testing's history readers and assertions: what they read back from the log, and
failure messages that name what differed, in the test's zone and in UTC."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import rota
from rota.testing import TestScheduler, history, open_test
from rota.testing.assertions import show

START = datetime(2026, 3, 28, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture
def rt() -> Iterator[TestScheduler]:
    with open_test(start=START, zone="Europe/Berlin") as opened:
        opened.register("job", lambda ctx: None)
        opened.schedule("nightly", binding="job", cron="30 2 * * *", timezone="Europe/Berlin")
        opened.advance(timedelta(days=2))
        yield opened


def test_show_gives_the_zones_wall_clock_and_utc() -> None:
    at = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert show(at) == "2026-03-29T01:00:00Z"
    assert show(at, BERLIN) == "2026-03-29 03:00:00 CEST (01:00:00Z)"
    assert show(at + timedelta(microseconds=5)) == "2026-03-29T01:00:00.000005Z"


def test_assert_fired_passes_on_the_exact_times_in_any_zone(rt: TestScheduler) -> None:
    rt.assert_fired(
        "nightly",
        at=[datetime(2026, 3, 28, 2, 30, tzinfo=BERLIN), datetime(2026, 3, 29, 1, tzinfo=UTC)],
    )


def test_assert_fired_names_the_missing_and_the_unexpected_times(rt: TestScheduler) -> None:
    naive_guess = [datetime(2026, 3, d, 2, 30, tzinfo=BERLIN) for d in (28, 29)]
    with pytest.raises(AssertionError) as failed:
        rt.assert_fired("nightly", at=naive_guess)
    message = str(failed.value)
    assert message.startswith("schedule 'nightly' did not fire at the expected nominal times:")
    assert "expected, not there (1):\n    2026-03-29 03:30:00 CEST (01:30:00Z)" in message
    assert "there, not expected (1):\n    2026-03-29 03:00:00 CEST (01:00:00Z)" in message
    assert "all of them (2):" in message


def test_assert_fired_says_when_only_the_order_or_count_differs(rt: TestScheduler) -> None:
    fired = rt.fired_at("nightly")
    with pytest.raises(AssertionError, match="the same times, in another order or count"):
        rt.assert_fired("nightly", at=[*fired, fired[0]])


def test_a_long_list_of_times_is_cut_with_a_count() -> None:
    with open_test(start=START) as rt:
        rt.register("job", lambda ctx: None)
        rt.schedule("minutely", binding="job", every="1m")
        rt.advance(timedelta(hours=1))
        with pytest.raises(AssertionError, match=r"\.\.\. and 20 more"):
            rt.assert_fired("minutely", at=[])


def test_assert_skipped_checks_the_times_and_then_the_reason(rt: TestScheduler) -> None:
    rt.schedules.pause("nightly")
    rt.advance(timedelta(days=1))
    paused_night = datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    rt.assert_skipped("nightly", at=[paused_night], reason="paused")
    assert rt.skipped("nightly") == [history.Skip(nominal=paused_night, reason="paused")]
    with pytest.raises(AssertionError, match=r"for another reason than 'overlap':\n.*: paused"):
        rt.assert_skipped("nightly", at=[paused_night], reason="overlap")
    with pytest.raises(AssertionError, match="did not skip the expected nominal times"):
        rt.assert_skipped("nightly", at=[])


def test_fires_give_each_nominal_time_its_work_and_outcome(rt: TestScheduler) -> None:
    [first, second] = rt.fires("nightly")
    assert first.nominal == datetime(2026, 3, 28, 1, 30, tzinfo=UTC)
    assert (first.work, first.outcome, first.manual) == ("schedule.nightly@job", "completed", False)
    assert second.nominal == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert rt.fire("nightly", at=second.nominal) == second
    with pytest.raises(AssertionError, match=r"did not fire for 2026-03-29 03:30:00 CEST"):
        rt.fire("nightly", at=datetime(2026, 3, 29, 1, 30, tzinfo=UTC))


def test_a_manual_fire_is_a_fire_but_not_a_nominal_time(rt: TestScheduler) -> None:
    rt.schedules.trigger_now("nightly", key="deploy-42")
    rt.run_until_idle()
    assert [f.manual for f in rt.fires("nightly")] == [False, False, True]
    assert len(rt.fired_at("nightly")) == 2


def test_assert_retried_shows_the_timers_and_the_attempts() -> None:
    with open_test(start=START, zone="Europe/Berlin") as rt:
        rt.register("flaky", _fail_once, retry=rota.RetryPolicy(delays=(120,)))
        rt.submit("w", binding="flaky")
        rt.advance(timedelta(minutes=5))
        rt.assert_retried("w", after=[timedelta(minutes=2)])
        with pytest.raises(AssertionError) as failed:
            rt.assert_retried("w", after=[timedelta(minutes=5)])
    message = str(failed.value)
    assert message.splitlines() == [
        "Work 'w' was retried after ['0:02:00'], expected ['0:05:00']",
        "  retry timers:",
        "    after #1: failed 2026-03-28 01:00:00 CET (00:00:00Z), due 2026-03-28 01:02:00 CET "
        "(00:02:00Z) (delay 0:02:00), started 2026-03-28 01:02:00 CET (00:02:00Z)",
        "  attempts:",
        "    #1: failed (flaky), started 2026-03-28 01:00:00 CET (00:00:00Z)",
        "    #2: completed, started 2026-03-28 01:02:00 CET (00:02:00Z)",
    ]


def _fail_once(ctx: rota.LaunchContext) -> str:
    if ctx.attempt == 1:
        raise rota.Fail("flaky", "once")
    return "ok"


def test_assert_retried_refuses_what_is_not_a_timedelta(rt: TestScheduler) -> None:
    with pytest.raises(TypeError, match=r"after\[0\] must be a timedelta"):
        rt.assert_retried("schedule.nightly@job", after=[120])  # type: ignore[list-item]


def test_assert_held_by_budget_says_there_was_no_hold(rt: TestScheduler) -> None:
    with pytest.raises(AssertionError) as failed:
        rt.assert_held_by_budget("schedule.nightly@job", budget="usd")
    assert str(failed.value).splitlines()[:3] == [
        "Work 'schedule.nightly@job' was not held by a budget (budget 'usd')",
        "  budget holds: none",
        "  attempts:",
    ]


def test_held_by_budget_reads_the_hold_and_its_release() -> None:
    config = {"budgets": [{"unit": "attempts", "max": 1, "per": "scope", "period": "week"}]}
    with open_test(config, start=START) as rt:
        rt.register("job", lambda ctx: None)
        rt.submit("a", binding="job")
        rt.submit("b", binding="job")
        rt.advance(timedelta(minutes=1))
        [hold] = rt.held_by_budget("b")
        assert (hold.at, hold.budget, hold.ledger, hold.window) == (
            START,
            "attempts-scope-week",
            "scope:root",
            "2026-W13",
        )
        assert hold.released_at is None
        assert rt.held_by_budget("a") == []
        rt.advance(timedelta(hours=1))
        rt.release("b")
        rt.run_until_idle()
        [hold] = rt.held_by_budget("b")
        assert hold.released_at == START + timedelta(minutes=61)
        rt.assert_held_by_budget("b", released=True)
        with pytest.raises(
            AssertionError, match=r"(?s)window '2026-W14'.*; released 2026-03-28T01:01"
        ):
            rt.assert_held_by_budget("b", window="2026-W14")
