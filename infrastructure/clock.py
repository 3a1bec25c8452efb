"""The clocks: adapters of the `Clock` port (`rota.application.ports`).

Everything that needs the time takes a `Clock`; nothing calls `datetime.now()` on its own.
`SystemClock` reads wall time (UTC) and `time.monotonic()`; `ManualClock` is for tests and
replays: it moves only when told, including backwards (a clock step back is a case rota
must survive). `advance` moves wall and monotonic time together (time passing); `step`
moves wall time alone (a clock jump: NTP, a suspended VM).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta


class SystemClock:
    """Wall-clock time in UTC, and the system's monotonic clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told; thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime (use tzinfo=UTC)")
        self._now = start.astimezone(UTC)
        self._ticks = 0.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._ticks

    def advance(self, seconds: float = 0.0, **delta: float) -> datetime:
        """Let time pass: move wall time (back, with a negative amount, is a step back) and,
        by as much when it is forward, monotonic time; return the new wall time."""
        step = timedelta(seconds=seconds, **delta)
        with self._lock:
            self._now = self._now + step
            self._ticks += max(0.0, step.total_seconds())
            return self._now

    def step(self, seconds: float = 0.0, **delta: float) -> datetime:
        """Jump wall time only (forward or back), as NTP or a resumed VM does; monotonic
        time does not move. Returns the new wall time."""
        with self._lock:
            self._now = self._now + timedelta(seconds=seconds, **delta)
            return self._now

    def set(self, when: datetime) -> None:
        """Set wall time (a jump: monotonic time does not move)."""
        if when.tzinfo is None:
            raise ValueError("ManualClock.set needs an aware datetime")
        with self._lock:
            self._now = when.astimezone(UTC)
