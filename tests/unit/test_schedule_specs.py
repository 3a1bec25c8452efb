"""Schedule specs: what is accepted and refused at definition, `every` arithmetic, jitter,
and the DST golden tables (America/New_York, Europe/Berlin: each nominal time once)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rota.domain.errors import DomainCode
from rota.domain.schedule_specs import (
    EPOCH,
    SpecError,
    count_between,
    define,
    dst_flag,
    fire_identity,
    jitter,
    parse_duration,
    parse_stored,
    rfc3339,
    times_between,
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def day(cron: str, tz: str, start: datetime, hours: int = 24) -> list[tuple[str, str]]:
    spec = define(cron=cron, timezone=tz)
    found = times_between(spec, EPOCH, start, start + timedelta(hours=hours))
    return [(rfc3339(t), t.astimezone(spec.zone).strftime("%H:%M%z")) for t in found]


@pytest.mark.parametrize(
    ("text", "seconds"), [("1s", 1), ("90s", 90), ("15m", 900), ("1h30m", 5400), ("2d", 172800)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"every": "0s"}, DomainCode.INVALID_SCHEDULE),
        ({"every": "soon"}, DomainCode.INVALID_SCHEDULE),
        ({"every": "1m", "offset": "1m"}, DomainCode.INVALID_SCHEDULE),
        ({"cron": "* * *"}, DomainCode.INVALID_SCHEDULE),
        ({"cron": "61 * * * *"}, DomainCode.INVALID_SCHEDULE),
        ({"cron": "0 0 ? * *"}, DomainCode.INVALID_SCHEDULE),
        ({"cron": "0 0 15W * *"}, DomainCode.INVALID_SCHEDULE),
        ({"cron": "@reboot"}, DomainCode.INVALID_SCHEDULE),
        ({"cron": "@sometimes"}, DomainCode.INVALID_SCHEDULE),
        ({"cron": "0 0 31 2 *"}, DomainCode.INVALID_SCHEDULE),
        ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, DomainCode.UNKNOWN_TIMEZONE),
        ({"cron": "0 3 * * *", "timezone": "../etc/passwd"}, DomainCode.UNKNOWN_TIMEZONE),
        ({}, DomainCode.INVALID_SCHEDULE),
        ({"every": "1m", "cron": "* * * * *"}, DomainCode.INVALID_SCHEDULE),
    ],
)
def test_unsupported_specs_are_refused_at_definition(kwargs: dict[str, str], code: str) -> None:
    with pytest.raises(SpecError) as refused:
        define(**kwargs)
    assert refused.value.code == code


def test_aliases_last_day_and_nth_weekday() -> None:
    start = utc(2026, 1, 1)
    hourly = define(cron="@hourly")
    assert times_between(hourly, EPOCH, start, utc(2026, 1, 1, 3)) == [
        utc(2026, 1, 1, 1),
        utc(2026, 1, 1, 2),
        utc(2026, 1, 1, 3),
    ]
    last = define(cron="0 9 L * *")
    assert times_between(last, EPOCH, start, utc(2026, 3, 31, 23))[:3] == [
        utc(2026, 1, 31, 9),
        utc(2026, 2, 28, 9),
        utc(2026, 3, 31, 9),
    ]
    second_monday = define(cron="0 9 * * MON#2")
    assert times_between(second_monday, EPOCH, start, utc(2026, 2, 28)) == [
        utc(2026, 1, 12, 9),
        utc(2026, 2, 9, 9),
    ]
    six = define(cron="*/20 0 0 * * *")  # seconds first
    assert times_between(six, EPOCH, start, utc(2026, 1, 1, 0, 0, 59)) == [
        utc(2026, 1, 1, 0, 0, 20),
        utc(2026, 1, 1, 0, 0, 40),
    ]


def test_every_counts_whole_periods_from_the_anchor_with_an_offset() -> None:
    spec = define(every="15m", offset="5m")
    assert spec.text == "every 15m+5m"
    assert parse_stored(spec.text, "UTC") == spec
    got = times_between(spec, EPOCH, utc(2026, 5, 1, 9, 7), utc(2026, 5, 1, 10))
    assert got == [utc(2026, 5, 1, 9, 20), utc(2026, 5, 1, 9, 35), utc(2026, 5, 1, 9, 50)]
    anchored = times_between(
        define(every="1h"), utc(2026, 5, 1, 0, 10), utc(2026, 5, 1, 9), utc(2026, 5, 1, 11)
    )
    assert anchored == [utc(2026, 5, 1, 9, 10), utc(2026, 5, 1, 10, 10)]
    assert count_between(spec, EPOCH, utc(2026, 5, 1, 9, 20), utc(2026, 5, 1, 9, 50)) == 3
    one = define(every="1s")
    assert len(times_between(one, EPOCH, utc(2026, 1, 1), utc(2026, 1, 1, 0, 1))) == 60


def test_jitter_is_a_deterministic_hash_of_name_and_nominal_time() -> None:
    at = utc(2026, 5, 1, 9)
    assert jitter("a", at, 30) == jitter("a", at, 30)
    spread = {jitter("a", at + timedelta(minutes=m), 30) for m in range(50)}
    assert len(spread) > 5 and all(timedelta(0) <= j <= timedelta(seconds=30) for j in spread)
    assert jitter("a", at, 0) == timedelta(0)
    assert fire_identity("nightly", at) == "schedule/nightly/2026-05-01T09:00:00Z"


# -- DST golden tables: each nominal time exactly once ---------------------------------------


def test_new_york_spring_forward() -> None:
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT. A fixed 02:30 fires right after the jump.
    assert day("30 2 * * *", "America/New_York", utc(2026, 3, 8, 0)) == [
        ("2026-03-08T07:00:00Z", "03:00-0400")
    ]
    assert day("30 2 * * *", "America/New_York", utc(2026, 3, 9, 0)) == [
        ("2026-03-09T06:30:00Z", "02:30-0400")
    ]
    hourly = day("0 * * * *", "America/New_York", utc(2026, 3, 8, 5), hours=4)
    assert hourly == [
        ("2026-03-08T06:00:00Z", "01:00-0500"),
        ("2026-03-08T07:00:00Z", "03:00-0400"),
        ("2026-03-08T08:00:00Z", "04:00-0400"),
        ("2026-03-08T09:00:00Z", "05:00-0400"),
    ]


def test_new_york_fall_back() -> None:
    # 2026-11-01: 02:00 EDT falls back to 01:00 EST. A fixed 01:30 fires once.
    assert day("30 1 * * *", "America/New_York", utc(2026, 11, 1, 0)) == [
        ("2026-11-01T05:30:00Z", "01:30-0400")
    ]
    half = day("*/30 * * * *", "America/New_York", utc(2026, 11, 1, 4, 15), hours=3)
    assert half == [
        ("2026-11-01T04:30:00Z", "00:30-0400"),
        ("2026-11-01T05:00:00Z", "01:00-0400"),
        ("2026-11-01T05:30:00Z", "01:30-0400"),
        ("2026-11-01T06:00:00Z", "01:00-0500"),
        ("2026-11-01T06:30:00Z", "01:30-0500"),
        ("2026-11-01T07:00:00Z", "02:00-0500"),
    ]
    assert len({t for t, _ in half}) == len(half)


def test_berlin_spring_forward() -> None:
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST.
    assert day("30 2 * * *", "Europe/Berlin", utc(2026, 3, 29, 0)) == [
        ("2026-03-29T01:00:00Z", "03:00+0200")
    ]
    assert day("15 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12)) == [
        ("2026-03-29T01:00:00Z", "03:00+0200")
    ]


def test_berlin_fall_back() -> None:
    # 2026-10-25: 03:00 CEST falls back to 02:00 CET. A fixed 02:30 fires once.
    assert day("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12)) == [
        ("2026-10-25T00:30:00Z", "02:30+0200")
    ]
    hourly = day("0 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 30), hours=3)
    assert hourly == [
        ("2026-10-25T00:00:00Z", "02:00+0200"),
        ("2026-10-25T01:00:00Z", "02:00+0100"),
        ("2026-10-25T02:00:00Z", "03:00+0100"),
    ]
    spec = define(cron="0 * * * *", timezone="Europe/Berlin")
    assert dst_flag(spec, utc(2026, 10, 25, 0)) == "fold"
    assert dst_flag(spec, utc(2026, 10, 25, 2)) is None


def test_starting_inside_the_repeated_hour_never_fires_its_time_again() -> None:
    # The runner may plan from a boundary inside the repeated hour (after 01:30 EDT fired).
    spec = define(cron="30 1 * * *", timezone="America/New_York")
    after = utc(2026, 11, 1, 6, 10)  # 01:10 EST, after 01:30 EDT (05:30Z) fired
    assert times_between(spec, EPOCH, after, utc(2026, 11, 2, 12)) == [utc(2026, 11, 2, 6, 30)]
