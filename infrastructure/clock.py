"""The clocks: adapters of the `Clock` port (`rota.application.ports`).

Everything that needs the time takes a `Clock`; nothing calls `datetime.now()` on its own.
`SystemClock` reads wall time (UTC); `ManualClock` is for tests and replays: it moves only
when told, including backwards (a clock step back is a case rota must survive).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


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
