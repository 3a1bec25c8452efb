"""The clock: the one source of the current time.

A `Clock` returns an aware UTC datetime (`now`) and a monotonic reading (`monotonic`).
Nothing in rota calls `datetime.now()` on its own; a fold reads time only from events. On
PostgreSQL the database's clock is the store's (`EventStore.now`). Elapsed time in the
host (renewal intervals, the run time of its own attempts) is monotonic.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    """A source of the current time: wall time (aware UTC) and a monotonic reading.

    Wall time can step (an NTP correction, a suspended VM resumed); leases, deadlines and
    recorded times are wall time, judged by the store's clock. `monotonic()` never steps:
    the host measures elapsed time with it (when a renewal is due, how long the attempts
    this process runs have run), so a wall-clock step neither stops renewals nor times
    work out early (docs/operator.md, "Clock jumps").
    """

    def now(self) -> datetime:
        """Return the current time, timezone-aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes back, unaffected by wall steps."""
        ...
