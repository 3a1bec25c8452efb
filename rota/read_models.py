"""The read models an embedded scheduler returns: a Work's view, the Works, their attempts
and the log's events (`Scheduler.work`, `works`, `executions`, `events`, `iter_events`),
as the typed views of `rota.application.queries.work_views`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

from rota.application.host import Host
from rota.application.ports import EventStore
from rota.application.queries.work_views import (
    AttemptView,
    EventView,
    WorkSummary,
    WorkView,
    attempt_view,
    event_view,
    work_summary,
    work_view,
)
from rota.application.service import SchedulerService
from rota.domain.admission import Waiting
from rota.domain.errors import NotEligible
from rota.domain.state import WorkState, WorkStateName
from rota.projections.scheduler import OnDemandWorks
from rota.projections.work_pages import MAX_LIMIT, WorkFilter, bounded, page_in_memory


class ReadModels:
    """Views of a service's projection (caught up to the log head first) and of its log."""

    def __init__(self, service: SchedulerService, host: Host, store: EventStore) -> None:
        self.service, self.host, self.store = service, host, store

    def work(self, work_id: str) -> WorkView | None:
        """The Work's JSON view (state, attempts, segments, retry), or None."""
        with self.service.lock:
            self.service.catch_up()
            work = self.service.projection.works.get(work_id)
            if work is None:
                return None
            return work_view(work, self._waiting(work))

    def _waiting(self, work: WorkState) -> Waiting | None:
        """Why a ready Work is not starting: the last pass's reason, or a missing binding."""
        found = next((w for w in self.host.last_waiting if w.work_id == work.work_id), None)
        if found is not None or work.state != "ready":
            return found
        try:
            self.service.pinned_for(work.binding)
        except NotEligible as refusal:
            return Waiting(work.work_id, refusal.code, refusal.message)
        return None

    def works(self) -> list[WorkSummary]:
        """Every Work's summary in id order, read a page at a time (`iter_works`)."""
        return list(self.iter_works())

    def iter_works(
        self, *, state: str | None = None, scope: str | None = None, binding: str | None = None
    ) -> Iterator[WorkSummary]:
        """The summaries of the Works matching the filters (see `works_page`), in id order,
        read a page at a time: a store-backed projection never holds every Work."""
        after: str | None = ""
        while after is not None:
            page, after = self.works_page(
                state=state, scope=scope, binding=binding, after=after, limit=MAX_LIMIT
            )
            yield from page

    def works_page(
        self,
        *,
        state: str | None = None,
        scope: str | None = None,
        binding: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> tuple[list[WorkSummary], str | None]:
        """One page of Work summaries in id order after the cursor `after` (a Work id; None
        or "": from the first), at most `limit` (default 16, at most 1000), filtered by state
        name, scope (that scope and those under it) and binding name; and the cursor of the
        next page (None: this is the last). See `rota.projections.work_pages`."""
        if state is not None and state not in get_args(WorkStateName):
            raise ValueError(f"no Work state {state!r}")
        where, count = WorkFilter(state, scope, binding), bounded(limit)
        with self.service.lock:
            self.service.catch_up()
            works = self.service.projection.works
            if isinstance(works, OnDemandWorks):
                found, cursor = works.page(after or "", count, where)
            else:
                found, cursor = page_in_memory(works, after or "", count, where)
            return [work_summary(w, self._waiting(w)) for w in found], cursor

    def executions(self, work_id: str) -> list[AttemptView]:
        with self.service.lock:
            self.service.catch_up()
            work = self.service.projection.works.get(work_id)
            return [] if work is None else [attempt_view(a) for a in work.attempts]

    def events(self, after: int = 0, limit: int = 1000) -> list[EventView]:
        return [event_view(r) for r in self.store.read(after, limit)]

    def iter_events(self, after: int = 0) -> Iterator[EventView]:
        position = after
        while batch := self.store.read(position, 5000):
            for recorded in batch:
                yield event_view(recorded)
            position = batch[-1].position
