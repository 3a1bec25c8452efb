"""The Work read models: a Work's view, the Works a page at a time, their attempts, the
log's events, the holds (the needs-you list) and the counts over every Work.

Each query takes the service's lock itself and catches the projection up to the log head
first; the views are the typed ones of `rota.application.queries.work_views`, the one
builder of each (the CLI's `--json` is `msgspec.json.encode(view)`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import msgspec

from rota.application.host import Host
from rota.application.queries.flow import held_with_flow
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
from rota.domain.emit import work_stream
from rota.domain.errors import NotEligible
from rota.domain.events.admission import GateRefused, WorkCancelled
from rota.domain.events.work import WorkForgotten, forgotten_identity
from rota.domain.state import WorkState, WorkStateName
from rota.projections.scheduler import OnDemandWorks
from rota.projections.work_pages import MAX_LIMIT, WorkFilter, bounded, page_in_memory
from rota.projections.work_tally import WorkTally


class HeldWork(msgspec.Struct, frozen=True, kw_only=True):
    """One hold on a Work (`GET /v1/holds`, the web view's needs-you list)."""

    work: str
    kind: str
    reason: str
    holder: str | None
    position: int


class Cancellation(msgspec.Struct, frozen=True, kw_only=True):
    """Who cancelled a Work, when and why: an operator's `core.work.cancelled` (`by`) or a
    start gate's refusal (`core.gate.refused`: `by` is `gate <registration>`)."""

    by: str
    at: str
    reason: str


class Forgetting(msgspec.Struct, frozen=True, kw_only=True):
    """Who had a Work's personal data forgotten, when, why (`core.work.forgotten`)."""

    by: str
    at: str
    reason: str
    position: int


class WorkCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Counts over every Work at the log head (the overview, `/metrics`)."""

    works: int
    states: dict[tuple[str, str], int]  # (state, scope) -> Works
    holds: dict[str, int]  # hold kind -> holds
    attempts: dict[tuple[str, str | None], int]  # (binding, outcome) -> attempts
    recoveries: dict[str, int]  # recovered / relaunched -> segments


class WorkQueries:
    """Views of a service's projection (caught up to the log head first) and of its log."""

    def __init__(self, service: SchedulerService, host: Host) -> None:
        self.service, self.host = service, host

    def work(self, work_id: str) -> WorkView | None:
        """The Work's view (state, attempts, segments, retry), or None."""
        with self.service.lock:
            self.service.catch_up()
            work = self.service.projection.works.get(work_id)
            if work is None:
                return None
            return work_view(work, self._waiting(work))

    def _waiting(self, work: WorkState) -> Waiting | None:
        return waiting_reason(self.service, self.host, work)

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
        """The Work's attempts, oldest first (empty for an unknown Work)."""
        with self.service.lock:
            self.service.catch_up()
            work = self.service.projection.works.get(work_id)
            return [] if work is None else [attempt_view(a) for a in work.attempts]

    def cancellation(self, work_id: str) -> Cancellation | None:
        """The Work's last cancellation, read from its stream (the views keep its state, not
        its reason); None if nothing cancelled it."""
        for recorded in reversed(self.service.store.read_stream(work_stream(work_id))):
            event = recorded.event
            if isinstance(event, WorkCancelled):
                by = event.by
            elif isinstance(event, GateRefused):
                by = f"gate {event.registration}"
            else:
                continue
            return Cancellation(by=by, at=recorded.recorded_at, reason=event.reason)
        return None

    def forgetting(self, work_id: str) -> Forgetting | None:
        """The record that the Work's personal data was forgotten; None if it was not."""
        recorded = self.service.store.find_delivery(forgotten_identity(work_id))
        if recorded is None or not isinstance(event := recorded.event, WorkForgotten):
            return None
        at, position = recorded.recorded_at, recorded.position
        return Forgetting(by=event.by, at=at, reason=event.reason, position=position)

    def events(self, after: int = 0, limit: int = 1000) -> list[EventView]:
        """Up to `limit` events of the log after position `after`."""
        return [event_view(r) for r in self.service.store.read(after, limit)]

    def iter_events(self, after: int = 0) -> Iterator[EventView]:
        """Every event of the log after position `after`, read in pages."""
        position = after
        while batch := self.service.store.read(position, 5000):
            for recorded in batch:
                yield event_view(recorded)
            position = batch[-1].position

    def holds(self) -> list[HeldWork]:
        """Every hold on a Work, oldest first (by position, then Work id)."""
        service = self.service
        found: list[HeldWork] = []
        tally = service.tallies.ready()  # which Works hold, without reading every Work
        with service.lock:
            service.catch_up()
            works = service.projection.works
            for work_id in sorted(tally.held):
                work = works.get(work_id)
                if work is None:
                    continue
                found.extend(
                    HeldWork(
                        work=work.work_id,
                        kind=hold.kind,
                        reason=hold.reason,
                        holder=hold.holder,
                        position=hold.position,
                    )
                    for hold in work.holds
                )
        return sorted(found, key=lambda h: (h.position, h.work))

    def counts(self) -> WorkCounts:
        """The counts over every Work, at the log head."""
        service = self.service
        tally = service.tallies.ready()  # counts over every Work, not every Work in memory
        with service.lock:
            service.catch_up()
            return counted(tally)


def waiting_reason(service: SchedulerService, host: Host, work: WorkState) -> Waiting | None:
    """Why a ready Work is not starting: the last pass's reason (or, for a Work the pass
    never reached, its flow head's: `held_with_flow`), or a missing binding (read under the
    service's lock)."""
    found = next((w for w in host.last_waiting if w.work_id == work.work_id), None)
    if found is not None or work.state != "ready":
        return found
    found = held_with_flow(service.projection, work, host.last_waiting)
    if found is not None:
        return found
    try:
        service.pinned_for(work.binding, work.grants)
    except NotEligible as refusal:
        return Waiting(work.work_id, refusal.code, refusal.message)
    return None


def counted(tally: WorkTally) -> WorkCounts:
    """The tally's counts, copied (read them under the service's lock)."""
    return WorkCounts(
        works=tally.works,
        states=dict(tally.states),
        holds=dict(tally.holds),
        attempts=dict(tally.attempts),
        recoveries=dict(tally.recoveries),
    )


__all__ = ["HeldWork", "WorkCounts", "WorkQueries", "counted", "waiting_reason"]
