"""The injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from freezegun import freeze_time

from rota.application.timestamps import format_timestamp, parse_timestamp
from rota.infrastructure.clock import ManualClock, SystemClock


def test_manual_clock_moves_only_when_told_and_can_step_back() -> None:
    start = datetime(2026, 5, 1, 12, tzinfo=UTC)
    clock = ManualClock(start)
    assert clock.now() == start
    assert clock.advance(90) == start + timedelta(seconds=90)
    clock.advance(-3600)
    assert clock.now() == start + timedelta(seconds=90 - 3600)
    clock.set(datetime(2027, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))))
    assert clock.now() == datetime(2027, 1, 1, tzinfo=UTC)


def test_manual_clock_steps_wall_time_alone_and_advances_both() -> None:
    start = datetime(2026, 5, 1, 12, tzinfo=UTC)
    clock = ManualClock(start)
    assert clock.monotonic() == 0.0
    clock.advance(30)  # time passes: both move
    assert clock.monotonic() == 30.0
    assert clock.step(-7200) == start + timedelta(seconds=30 - 7200)  # a jump: wall only
    assert clock.step(9000) == start + timedelta(seconds=30 + 1800)
    clock.set(start)
    assert clock.monotonic() == 30.0
    clock.advance(-10)  # a step back never moves monotonic time back
    assert clock.monotonic() == 30.0


def test_system_clock_monotonic_never_goes_back() -> None:
    clock = SystemClock()
    first = clock.monotonic()
    assert clock.monotonic() >= first


def test_manual_clock_refuses_naive_times() -> None:
    with pytest.raises(ValueError, match="aware"):
        ManualClock(datetime(2026, 1, 1))


@freeze_time("2026-11-29 10:00:00")
def test_system_clock_reads_utc_wall_time() -> None:
    assert SystemClock().now() == datetime(2026, 11, 29, 10, tzinfo=UTC)


def test_timestamps_round_trip_with_microseconds() -> None:
    when = datetime(2026, 2, 3, 4, 5, 6, 7, tzinfo=UTC)
    text = format_timestamp(when)
    assert text == "2026-02-03T04:05:06.000007Z"
    assert parse_timestamp(text) == when
    with pytest.raises(ValueError, match="no timezone"):
        parse_timestamp("2026-02-03T04:05:06")
