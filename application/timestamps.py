"""Timestamps as the log stores them: ISO-8601 UTC with microseconds and a `Z`.

The form itself is the log's contract (`rota.application.ports.timestamps`), re-exported
here; `recorded_times` parses a batch of records' times with a cache, and
`schedule_fold_time` the one time the schedules projection's fold reads (a quarantine's).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rota.application.ports.timestamps import format_timestamp, parse_timestamp
from rota.domain.events.schedule import ScheduleQuarantined

__all__ = ["format_timestamp", "parse_timestamp", "recorded_times", "schedule_fold_time"]


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


def schedule_fold_time(record: Any) -> datetime | None:
    """The recorded time the schedules projection needs of `record`: a quarantine's (its
    boundary is never before it: `quarantine_boundary`); None for every other event."""
    if isinstance(record.event, ScheduleQuarantined):
        return parse_timestamp(record.recorded_at)
    return None
