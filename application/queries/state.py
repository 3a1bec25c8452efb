"""The scheduler's state as its readers see it: how far the projection has applied the
log, the budgets and their ledgers, what `/metrics` reads at a scrape, and a consistent
look at the projection at the log head for the checks that read it (doctor's fast checks,
`/readyz`, the web view's audit page).

Each query takes the service's lock itself; none writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

import msgspec

from rota.application.host import Host
from rota.application.queries.capacity import CapacityView, capacity_view
from rota.application.queries.works import WorkCounts, counted
from rota.application.service import SchedulerService
from rota.domain.events.admission import Budget
from rota.projections.scheduler import SchedulerProjection

T = TypeVar("T")


@dataclass(frozen=True)
class AtHead(Generic[T]):
    """What a read at the log head found: the head's position (read after catching up),
    the position the projection applied, the store's time and the reader's value."""

    head: int
    applied: int
    now: datetime
    value: T


class Ledgers(msgspec.Struct, frozen=True, kw_only=True):
    """The budgets in force and every ledger window they charged: (budget, ledger, window)
    -> used."""

    budgets: tuple[Budget, ...]
    charged: dict[tuple[str, str, str], float]


class MetricsRead(msgspec.Struct, frozen=True, kw_only=True):
    """What one `/metrics` scrape reads of the scheduler, in one look under the lock."""

    applied: int
    now: datetime
    counts: WorkCounts
    timers: dict[str, datetime]
    bindings: frozenset[str]
    capacity: CapacityView
    append_seconds: float
    appends: int


class StateQueries:
    """The scheduler projection's position, budgets and scrape reads (see the module)."""

    def __init__(self, service: SchedulerService, host: Host) -> None:
        self.service = service
        self.host = host

    def now(self) -> datetime:
        """The store's time (the database's on PostgreSQL)."""
        return self.service.now()

    def owner(self) -> str:
        """The lease owner this scheduler claims as (`host:pid:suffix` by default)."""
        return self.service.configuration.owner

    def leases_held(self) -> list[str]:
        """The executions whose leases this host holds now, in id order."""
        return sorted(self.host.held)

    def applied(self) -> int:
        """The log position the scheduler projection has applied (no catching up)."""
        with self.service.lock:
            return self.service.projection.position

    def digest(self) -> tuple[int, str]:
        """The position the projection applied (no catching up) and its canonical digest
        (equal states, equal digests): what the simulator compares with a fold of the log."""
        with self.service.lock:
            projection = self.service.projection
            projection.settle()
            return projection.position, projection.digest()

    def at_head(self, read: Callable[[SchedulerProjection, datetime], T]) -> AtHead[T]:
        """Catch up to the log head, then `read(projection, now)` under the lock. `read`
        must not keep the projection: it changes once the lock is released."""
        service = self.service
        with service.lock:
            service.catch_up()
            projection, now = service.projection, service.now()
            head = service.store.head().position
            return AtHead(head, projection.position, now, read(projection, now))

    def ledgers(self) -> Ledgers:
        """The budgets in force and their ledgers, at the log head."""
        with self.service.lock:
            self.service.catch_up()
            projection = self.service.projection
            return Ledgers(budgets=tuple(projection.budgets), charged=dict(projection.ledgers))

    def metrics(self) -> MetricsRead:
        """Everything a scrape reads of the scheduler, at the log head."""
        service = self.service
        tally = service.tallies.ready()  # counts over every Work, not every Work in memory
        with service.lock:
            service.catch_up()
            projection, tx = service.projection, service.transactions
            now = service.now()
            return MetricsRead(
                applied=projection.position,
                now=now,
                counts=counted(tally),
                timers=dict(projection.timers),
                bindings=frozenset(service.bindings),
                capacity=capacity_view(
                    projection, service.configuration, now, self.host.last_waiting
                ),
                append_seconds=tx.append_seconds,
                appends=tx.appends,
            )


__all__ = ["AtHead", "Ledgers", "MetricsRead", "StateQueries"]
