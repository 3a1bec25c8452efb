"""The one injected clock.

Everything that needs the time takes a `Clock`; nothing calls `datetime.now()` on its own.
`SystemClock` reads wall time (UTC); `ManualClock` is for tests and replays: it moves only
when told, including backwards (a clock step back is a case rota must survive).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol


class Clock(Protocol):
    """A source of the current time as an aware UTC datetime."""

    def now(self) -> datetime:
        """Return the current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told; thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime (use tzinfo=UTC)")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0.0, **delta: float) -> datetime:
        """Move forward (or back, with a negative amount) and return the new time."""
        with self._lock:
            self._now = self._now + timedelta(seconds=seconds, **delta)
            return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError("ManualClock.set needs an aware datetime")
        with self._lock:
            self._now = when.astimezone(UTC)


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
