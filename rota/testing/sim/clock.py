"""The simulated clock: one wall clock every simulated host reads, and true time.

The world keeps true time `t` (seconds since the run began); nothing inside a run reads
the machine's clock. Every host of a run shares one wall clock, as the processes of one
machine (SQLite) or the sessions of one database (PostgreSQL) do: a clock step (NTP, a
resumed VM) moves `now()` by `offset` and never moves `monotonic()`, which is true time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# A Saturday evening before a DST night in Europe (2026-03-29 01:00 UTC): schedules
# in Europe/Berlin and America/New_York meet their spring-forward nights early in a run.
DEFAULT_START = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)


class SimClock:
    """Wall time `start + t + offset` and monotonic time `t` (the `Clock` port)."""

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        if start.tzinfo is None:
            raise ValueError("SimClock needs an aware start (tzinfo=UTC)")
        self.start = start.astimezone(UTC)
        self.t = 0.0
        self.offset = 0.0

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t + self.offset)

    def monotonic(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        """Let true time pass (never backwards)."""
        self.t = max(self.t, t)

    def step(self, seconds: float) -> None:
        """Step wall time only, forward or back, as NTP or a resumed VM does."""
        self.offset += seconds

    @property
    def wall(self) -> datetime:
        return self.now()
