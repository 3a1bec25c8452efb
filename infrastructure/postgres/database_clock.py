"""The PostgreSQL store's clock: the DATABASE's time, sampled and advanced locally.

`now()` and `recorded_at` are the database's clock (`clock_timestamp()`, read after the
head lock is taken, so times follow positions). Lease expiry and due timers, which the
scheduler judges by `store.now()`, are judged by one clock for every host, so hosts with
skewed clocks agree. `now()` does not ask the server every time (a scheduler pass asks for
the time once per attempt it launches): it samples the server's clock at most
`clock_refresh` seconds (default 0.5) apart, and on every locked write (`observe`), and
advances the last sample by the local boot-time clock (`CLOCK_BOOTTIME`: never stepped,
counts suspended time); the host's wall clock is never read. Dated at its receipt, a sample
lags the server by at most the reply's trip, so `now()` never runs ahead of the database
(beyond the two clocks' rate difference over `clock_refresh`, microseconds).
`clock_refresh=0` asks every time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


def _ticks() -> float:
    """Seconds on a clock that never steps and (on Linux) counts suspended time too."""
    return time.clock_gettime(_TICKS)


_TICKS = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


class DatabaseClock:
    """The database's time through `ask` (one query), sampled; see the module docstring."""

    def __init__(self, ask: Callable[[], datetime], refresh: float) -> None:
        self._ask = ask
        self.refresh = refresh
        self._sample: tuple[float, datetime] | None = None  # (_ticks() at receipt, time)

    def now(self) -> datetime:
        """The database's clock: sampled at most `refresh` seconds ago (every locked write
        samples it too), advanced since by this machine's boot-time clock."""
        sample = self._sample
        ticks = _ticks()
        if sample is None or ticks - sample[0] >= self.refresh:
            return self.observe(self._ask())
        return sample[1] + timedelta(seconds=ticks - sample[0])

    def observe(self, when: datetime) -> datetime:
        """Take a database time just received as the clock's new sample."""
        when = when.astimezone(UTC)
        # Dated at receipt, the estimate lags the server by at most the reply's trip.
        self._sample = (_ticks(), when)
        return when
