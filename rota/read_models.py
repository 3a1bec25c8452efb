"""The read models an embedded scheduler returns: a Work's view, the Works, their attempts
and the log's events (`Scheduler.work`, `works`, `executions`, `events`, `iter_events`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rota.application.host import Host
from rota.application.ports import EventStore
from rota.application.service import SchedulerService
from rota.application.views import attempt_view, event_json, work_summary, work_view
from rota.domain.admission import Waiting
from rota.domain.errors import NotEligible
from rota.domain.state import WorkState


class ReadModels:
    """Views of a service's projection (caught up to the log head first) and of its log."""

    def __init__(self, service: SchedulerService, host: Host, store: EventStore) -> None:
        self.service, self.host, self.store = service, host, store

    def work(self, work_id: str) -> dict[str, Any] | None:
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

    def works(self) -> list[dict[str, Any]]:
        with self.service.lock:
            self.service.catch_up()
            return [
                work_summary(w, self._waiting(w))
                for w in sorted(self.service.projection.works.values(), key=lambda w: w.work_id)
            ]

    def works_page(
        self,
        *,
        state: str | None = None,
        scope: str | None = None,
        binding: str | None = None,
        after: str | None = None,
        limit: int = 17,
    ) -> list[dict[str, Any]]:
        """At most `limit` Work summaries by id, after the id `after`, filtered by state,
        scope (that scope and the scopes under it) and binding."""
        with self.service.lock:
            self.service.catch_up()
            chosen = sorted(
                (
                    w
                    for w in self.service.projection.works.values()
                    if (state is None or w.state == state)
                    and (binding is None or w.binding == binding)
                    and (scope is None or w.scope == scope or w.scope.startswith(scope + "/"))
                    and (after is None or w.work_id > after)
                ),
                key=lambda w: w.work_id,
            )[:limit]
            return [work_summary(w, self._waiting(w)) for w in chosen]

    def executions(self, work_id: str) -> list[dict[str, Any]]:
        with self.service.lock:
            self.service.catch_up()
            work = self.service.projection.works.get(work_id)
            return [] if work is None else [attempt_view(a) for a in work.attempts]

    def events(self, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        return [event_json(r) for r in self.store.read(after, limit)]

    def iter_events(self, after: int = 0) -> Iterator[dict[str, Any]]:
        position = after
        while batch := self.store.read(position, 5000):
            for recorded in batch:
                yield event_json(recorded)
            position = batch[-1].position
