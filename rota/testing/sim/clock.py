"""The simulated clock: one wall clock every simulated host reads, and true time.

The world keeps true time `t` (seconds since the run began); nothing inside a run reads
the machine's clock. Every host of a run shares one wall clock, as the processes of one
machine (SQLite) or the sessions of one database (PostgreSQL) do: a clock step (NTP, a
resumed VM) moves `now()` by `offset` and never moves `monotonic()`, which is true time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from random import Random

# Moments a DST night turns (UTC): Europe/Berlin springs forward and falls back, so
# does America/New_York, Australia/Sydney falls back. A run starts up to an hour before
# one of them (`dst_start`), so its schedules in those zones meet a skipped or a
# repeated local hour within the first hours simulated.
DST_NIGHTS = (
    datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
    datetime(2026, 10, 25, 1, 0, tzinfo=UTC),
    datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
    datetime(2026, 11, 1, 6, 0, tzinfo=UTC),
    datetime(2026, 4, 4, 16, 0, tzinfo=UTC),
)
DEFAULT_START = datetime(2026, 3, 29, 0, 15, tzinfo=UTC)


def dst_start(random: Random) -> datetime:
    """A start up to an hour before one of the `DST_NIGHTS`, whole seconds."""
    night = DST_NIGHTS[random.randrange(len(DST_NIGHTS))]
    return night - timedelta(seconds=random.randrange(3600))


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
