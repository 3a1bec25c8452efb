"""Timestamps as the log stores them: ISO-8601 UTC with microseconds and a `Z`."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any


def format_timestamp(when: datetime) -> str:
    """ISO-8601 UTC with microseconds and a `Z`: the log's `recorded_at` form."""
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_timestamp(text: str) -> datetime:
    """Inverse of `format_timestamp`; also accepts any ISO-8601 with an offset."""
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no timezone; rota stores UTC")
    return when.astimezone(UTC)


def recorded_times(records: Iterable[Any], cache: dict[str, datetime]) -> list[datetime]:
    """Each record's `recorded_at` parsed, in order. Events written together share their
    time, so parsed values are kept in `cache` (one per fold; emptied past 100,000)."""
    times = []
    for record in records:
        at = cache.get(record.recorded_at)
        if at is None:
            if len(cache) > 100_000:
                cache.clear()
            at = cache[record.recorded_at] = parse_timestamp(record.recorded_at)
        times.append(at)
    return times
