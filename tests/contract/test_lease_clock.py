"""Store contract: lease_renew_survives_clock_step_back, on every store.

A renewal sets the expiry to now plus the lease unless the stored expiry is later (the
store's clock stepped back): it never shortens a lease. The scheduler judges time by the
store's clock, so every store is held to it with its own clock stepped back: SQLite's
injected clock, and on PostgreSQL the database's clock itself (`postgres.DatabaseClock`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

import rota
from rota.application.ports import EventStore
from rota.domain.events import LeaseRenewed

from .conftest import CLOCK_START, StoreClock

LEASE = timedelta(seconds=60)


def test_lease_renew_survives_clock_step_back(
    store_clock: tuple[Callable[[], EventStore], StoreClock],
) -> None:
    open_store, clock = store_clock
    with rota.Scheduler(open_store(), owner="host-a") as scheduler:
        scheduler.register("job", lambda ctx: None)
        scheduler.submit("w", binding="job")
        (claimed,) = scheduler.service.lifecycle.start_pass().claimed
        assert claimed.attempt.lease_expires_at == CLOCK_START + LEASE
        lifecycle = scheduler.service.lifecycle

        clock.set(CLOCK_START + timedelta(seconds=30))
        first = lifecycle.renew("w/1", 1)
        assert first == CLOCK_START + timedelta(seconds=30) + LEASE

        expiries: list[datetime] = []
        for step_back in (timedelta(hours=2), timedelta(seconds=1), timedelta(hours=48)):
            clock.set(CLOCK_START + timedelta(seconds=30) - step_back)
            assert scheduler.store.now() == clock.now()  # the store's clock did step back
            expiries.append(lifecycle.renew("w/1", 1))
        assert expiries == [first] * 3  # kept, never shortened to now + lease

        # Once the clock runs on past the kept expiry's start, renewals extend it again.
        clock.set(first - timedelta(seconds=10))
        later = lifecycle.renew("w/1", 1)
        assert later == first + LEASE - timedelta(seconds=10)
        # ... and the lease still ends exactly where it says.
        clock.set(later)
        with pytest.raises(rota.LeaseLost):
            lifecycle.renew("w/1", 1)

    renewals = [
        r.event.lease_expires_at
        for r in open_store().read(0, 1000)
        if isinstance(r.event, LeaseRenewed)
    ]
    assert renewals == [first, first, first, first, later]  # what the log recorded
