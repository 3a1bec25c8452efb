"""Optimisation: the HTTP overview, `/v1/holds` and `/metrics` count every Work without
reading every Work into memory (bench http_counts).

The service's `WorkTally` (`rota.projections.work_tally`): counts over every Work for the
HTTP overview, `/v1/holds` and `/metrics`, without holding every Work in memory.

`Tallies.ready()` attaches a tally to the scheduler projection on its first call and counts
the Works a page at a time (`OnDemandWorks.page`: the stored Works read in id order, the
held ones merged in), taking the transaction loop's lock for one page at a time so the loop
goes on meanwhile; the projection's `watch` keeps it current from then on. A projection
held whole in memory is counted in one go. Callers read the counts under the loop's lock
after a `catch_up`. A projection replaced since (a reload) gets a fresh tally.
"""

from __future__ import annotations

import threading

from rota.application.transactions import Transactions
from rota.projections.held_works import OnDemandWorks
from rota.projections.work_pages import EVERY
from rota.projections.work_tally import WorkTally

PAGE = 500  # Works counted under the lock at a time


class Tallies:
    """One loop's tally of its Works; see the module docstring."""

    def __init__(self, tx: Transactions) -> None:
        self._tx = tx
        self._tally: WorkTally | None = None
        self._counting = threading.Lock()  # one first count at a time: others wait for it

    def ready(self) -> WorkTally:
        """The tally, every Work counted. Call it without holding the loop's lock (the first
        count takes it a page at a time); read the tally under it."""
        with self._counting:
            while True:
                tally = self._current()
                if tally.complete:
                    return tally
                self._count_a_page(tally)

    def _current(self) -> WorkTally:
        with self._tx.lock:
            projection, tally = self._tx.projection, self._tally
            if tally is None or projection.watch != tally.changed:
                tally = self._tally = WorkTally()
                projection.watch = tally.changed
            return tally

    def _count_a_page(self, tally: WorkTally) -> None:
        with self._tx.lock:
            projection = self._tx.projection
            if projection.watch != tally.changed:
                return  # replaced meanwhile: `_current` starts again
            works = projection.works
            if not isinstance(works, OnDemandWorks):
                tally.count(works.values())  # every Work is in memory: one go
                tally.counted_upto = None
                return
            after = tally.counted_upto or ""
            page, more = works.page(after, PAGE, EVERY)
            tally.count(page)
            tally.counted_upto = None if more is None else page[-1].work_id


__all__ = ["PAGE", "Tallies"]
