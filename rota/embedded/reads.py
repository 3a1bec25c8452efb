"""The read half of the embedded API: `Scheduler.work`, `works`, `iter_works`, `works_page`,
`executions`, `events`, `iter_events` and `capacity`, each one query of
`rota.application.queries` (which takes the service's lock and catches up itself).

`Scheduler` (`rota.scheduler`) is these reads and its commands; `scheduler.queries` is every
read model, the HTTP API's and the web view's too.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from rota.application.queries import Queries
from rota.application.queries.capacity import CapacityDict
from rota.application.queries.work_views import AttemptView, EventView, WorkSummary, WorkView


class SchedulerReads:
    """The read models of a `Scheduler` (see the module docstring)."""

    queries: Queries

    def work(self, work_id: str) -> WorkView | None:
        """The Work's view (state, attempts, segments, retry, ...), or None."""
        return self.queries.works.work(work_id)

    def works(self) -> list[WorkSummary]:
        """Every Work's summary, in id order (read a page at a time)."""
        return list(self.queries.works.iter_works())

    def iter_works(
        self, *, state: str | None = None, scope: str | None = None, binding: str | None = None
    ) -> Iterator[WorkSummary]:
        """The summaries of the Works matching the filters, in id order, read a page at a
        time (so a store-backed scheduler never holds every Work); see `works_page`."""
        return self.queries.works.iter_works(state=state, scope=scope, binding=binding)

    def works_page(
        self,
        *,
        state: str | None = None,
        scope: str | None = None,
        binding: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> tuple[list[WorkSummary], str | None]:
        """One page of Work summaries and the next page's cursor (None: the last page);
        see `rota.application.queries.works.WorkQueries.works_page`."""
        return self.queries.works.works_page(
            state=state, scope=scope, binding=binding, after=after, limit=limit
        )

    def executions(self, work_id: str) -> list[AttemptView]:
        """The Work's attempts, oldest first (empty for an unknown Work)."""
        return self.queries.works.executions(work_id)

    def events(self, after: int = 0, limit: int = 1000) -> list[EventView]:
        """Up to `limit` events of the log after position `after`."""
        return self.queries.works.events(after, limit)

    def iter_events(self, after: int = 0) -> Iterator[EventView]:
        """Every event of the log after position `after`, read in pages."""
        return self.queries.works.iter_events(after)

    def capacity(self) -> CapacityDict:
        """Each pool's limit, slots in use, the Work this scheduler's last start pass held
        back (`waiting`: none before its first pass) and the Work a dry run of admission
        now would hold back (`preview`), and why each waits (the JSON of `rota capacity
        --json`, typed; `queries.capacity.current()` is the same as a frozen view)."""
        shown: CapacityDict = msgspec.to_builtins(self.queries.capacity.current())
        return shown


__all__ = ["SchedulerReads"]
