"""What happened lately: the log newest first a page at a time (the web view's event
browser), the Works by their last activity, a Work's own stream (its timeline) and the
schedule fires that fed it, and the Works that failed for good (the needs-you list).

The log is read backwards in windows from a position cursor, so a page of the newest
events costs a window, whatever the log's length; a filter scans at most `SCAN` events a
page and hands back where it stopped, so a rare stream or type never reads the whole log
in one request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgspec

from rota.application.host import Host
from rota.application.ports import RecordedEvent
from rota.application.queries.work_views import EventView, event_view
from rota.application.queries.works import waiting_reason
from rota.application.service import SchedulerService
from rota.application.timestamps import format_timestamp
from rota.domain.emit import work_stream
from rota.domain.events import accepted_input
from rota.domain.state import WorkState
from rota.projections.scheduler import OnDemandWorks
from rota.projections.work_pages import MAX_LIMIT, WorkFilter, page_in_memory

WINDOW = 500  # events read backwards at a time
SCAN = 20_000  # events a filtered page reads at most before it hands back its cursor
WORK = "work/"


class EventPage(msgspec.Struct, frozen=True, kw_only=True):
    """Events newest first, and the cursor of the next (older) page: read `before` it
    (None: nothing older). `scanned_to` is the lowest position this page read."""

    events: tuple[EventView, ...]
    before: int | None
    head: int


class WorkRow(msgspec.Struct, frozen=True, kw_only=True):
    """A Works-list row: the summary, when it was submitted and its last event."""

    id: str
    state: str
    scope: str
    binding: str
    kind: str
    attempts: int
    last_outcome: str | None
    waiting: str | None  # why a ready Work does not start (the code)
    submitted_at: str
    last_activity: str | None  # the time of the Work's newest event
    last_event: str | None  # its type
    position: int | None  # its log position


class WorkRowPage(msgspec.Struct, frozen=True, kw_only=True):
    works: tuple[WorkRow, ...]
    before: int | None  # newest first: the next page reads before this position


class ScheduleFire(msgspec.Struct, frozen=True, kw_only=True):
    """A schedule's fire that fed a Work: the schedule, its nominal time, the input it
    queued, and the attempt that took it (None: still pending or never taken)."""

    schedule: str
    nominal: str
    key: str
    manual: bool  # `trigger now` (`schedule/<name>/manual/<key>`), not a nominal time's fire
    position: int
    attempt: int | None


class FailedWork(msgspec.Struct, frozen=True, kw_only=True):
    """A Work that failed for good (permanently, or with its retries exhausted)."""

    work: str
    binding: str
    scope: str
    failures: int
    budget: int | None
    permanent: bool
    blocked: str | None  # why no retry follows: `exhausted`, `lost` ...
    code: str | None
    message: str | None
    ended_at: str | None


def _matches(recorded: RecordedEvent, stream: str | None, type_: str | None) -> bool:
    """`stream`: that stream, or every stream under it when it ends with `/`; `type_`: that
    type, or every type it begins (`core.schedule.`)."""
    if stream and not (
        recorded.stream == stream or (stream.endswith("/") and recorded.stream.startswith(stream))
    ):
        return False
    return (
        not type_
        or recorded.type == type_
        or (type_.endswith(".") and recorded.type.startswith(type_))
    )


class ActivityQueries:
    """Reads of the log newest first, and the Works by their last activity."""

    def __init__(self, service: SchedulerService, host: Host) -> None:
        self.service, self.host = service, host

    def _row(self, work: WorkState, newest: RecordedEvent | None) -> WorkRow:
        waiting = waiting_reason(self.service, self.host, work)
        return _row(work, newest, None if waiting is None else waiting.code)

    def _backwards(self, before: int | None) -> Iterator[RecordedEvent]:
        """The log's events from position `before` (exclusive; None: the head) down."""
        store = self.service.store
        top = store.head().position + 1 if before is None else before
        while top > 1:
            low = max(0, top - 1 - WINDOW)
            batch = store.read(low, top - 1 - low)
            yield from reversed(batch)
            top = low + 1

    def _page(
        self, before: int | None, limit: int, keep: Callable[[RecordedEvent], bool]
    ) -> tuple[list[RecordedEvent], int | None]:
        found: list[RecordedEvent] = []
        last: int | None = None
        for scanned, recorded in enumerate(self._backwards(before), 1):
            last = recorded.position
            if keep(recorded):
                if len(found) == limit:
                    return found, found[-1].position
                found.append(recorded)
            if scanned >= SCAN and len(found) < limit:
                return found, last  # read on from here on the next page
        return found, None

    def events_page(
        self,
        *,
        before: int | None = None,
        limit: int = 50,
        stream: str | None = None,
        type: str | None = None,
    ) -> EventPage:
        """Up to `limit` events before position `before` (None: from the head), newest
        first, of `stream` (a stream, or a prefix ending with `/`: `work/`, `schedule/`) and
        `type` (a type, or a prefix ending with `.`); `before` of the next page."""
        head = self.service.store.head().position
        found, cursor = self._page(
            before, max(1, min(limit, MAX_LIMIT)), lambda r: _matches(r, stream, type)
        )
        return EventPage(events=tuple(event_view(r) for r in found), before=cursor, head=head)

    def recent_works(
        self,
        *,
        before: int | None = None,
        limit: int = 16,
        state: str | None = None,
        scope: str | None = None,
        binding: str | None = None,
        search: str | None = None,
    ) -> WorkRowPage:
        """The Works by their newest event, the latest first: the log read backwards, each
        Work taken at its newest event (the one whose stream version is the Work's), so a
        Work is on one page only; filtered as `works_page` and by `search` (in the id)."""
        where = WorkFilter(state, scope, binding)
        service = self.service
        seen: set[str] = set()

        def keep(recorded: RecordedEvent) -> bool:
            # Each Work is looked up once, at the first of its events the scan meets: its
            # newest (shown here), or an older one (its newest is above `before`: shown on
            # an earlier page, so none of its events is shown here).
            if not recorded.stream.startswith(WORK) or recorded.stream in seen:
                return False
            seen.add(recorded.stream)
            work_id = recorded.stream[len(WORK) :]
            if search and search not in work_id:
                return False
            with service.lock:
                work = service.projection.works.get(work_id)
            return work is not None and work.version == recorded.version and where.matches(work)

        with service.lock:
            service.catch_up()
        found, cursor = self._page(before, max(1, min(limit, MAX_LIMIT)), keep)
        rows = []
        for recorded in found:
            with service.lock:
                work = service.projection.works.get(recorded.stream[len(WORK) :])
                if work is not None:
                    rows.append(self._row(work, recorded))
        return WorkRowPage(works=tuple(rows), before=cursor)

    def rows(self, work_ids: list[str]) -> list[WorkRow]:
        """The rows of these Works (in this order), their last activity read from their
        streams: a page of the id-ordered list."""
        service = self.service
        found = []
        for work_id in work_ids:
            with service.lock:
                service.catch_up()
                work = service.projection.works.get(work_id)
                if work is None:
                    continue
                newest = service.store.read_stream(work_stream(work_id), after=work.version - 1)
                found.append(self._row(work, newest[-1] if newest else None))
        return found

    def search_ids(
        self, search: str, *, after: str = "", limit: int = 16, where: WorkFilter | None = None
    ) -> tuple[list[str], str | None]:
        """The ids containing `search`, in id order after `after`, at most `limit`, and the
        cursor of the next page (None: the last). It reads the Works a page at a time."""
        service, where = self.service, where or WorkFilter()
        found: list[str] = []
        cursor = after
        while True:
            with service.lock:
                service.catch_up()
                works = service.projection.works
                if isinstance(works, OnDemandWorks):
                    page, more = works.page(cursor, MAX_LIMIT, where)
                else:
                    page, more = page_in_memory(works, cursor, MAX_LIMIT, where)
            for work in page:
                if search in work.work_id:
                    if len(found) == limit:
                        return found, found[-1]
                    found.append(work.work_id)
            if more is None:
                return found, None
            cursor = more

    def stream(self, work_id: str) -> list[RecordedEvent]:
        """The Work's own stream, oldest first (the timeline reads its leases)."""
        return self.service.store.read_stream(work_stream(work_id))

    def fires(self, work_id: str) -> list[ScheduleFire]:
        """The schedule fires that queued input for the Work, oldest first, with the attempt
        that consumed each (a schedule's Work links to its schedule and nominal times)."""
        found = []
        with self.service.lock:
            self.service.catch_up()
            work = self.service.projection.works.get(work_id)
        taken = (
            {}
            if work is None
            else {p.position: a.number for a in work.attempts for p in a.consumed}
        )
        for recorded in self.stream(work_id):
            accepted = accepted_input(recorded.event)  # (its own, or its definition's)
            if accepted is None:
                continue
            payload, key = accepted.payload, accepted.key
            if not isinstance(payload, dict) or not isinstance(payload.get("schedule"), str):
                continue
            name = payload["schedule"]
            if not key.startswith(f"schedule/{name}/"):
                continue  # a caller's own input that happens to name a schedule
            found.append(
                ScheduleFire(
                    schedule=name,
                    nominal=str(payload.get("nominal", "")),
                    key=key,
                    manual=key.startswith(f"schedule/{name}/manual/"),
                    position=recorded.position,
                    attempt=taken.get(recorded.position),
                )
            )
        return found

    def failed(self, limit: int = 64) -> tuple[list[FailedWork], int]:
        """The Works failed for good, newest failure first (at most `limit`), and how many
        there are: each needs a person (retry it, or leave it)."""
        service = self.service
        rows: list[FailedWork] = []
        cursor: str | None = ""
        where = WorkFilter("failed")
        while cursor is not None:
            with service.lock:
                service.catch_up()
                works = service.projection.works
                if isinstance(works, OnDemandWorks):
                    page, cursor = works.page(cursor, MAX_LIMIT, where)
                else:
                    page, cursor = page_in_memory(works, cursor, MAX_LIMIT, where)
            rows.extend(_failed(w) for w in page)
        rows.sort(key=lambda r: (r.ended_at or "", r.work), reverse=True)
        return rows[:limit], len(rows)


def _failed(work: WorkState) -> FailedWork:
    current = work.current
    budget = current.pinned.binding.retry.max_attempts if current else None
    ended = None
    if current is not None and current.segments and current.segments[-1].ended_at is not None:
        ended = format_timestamp(current.segments[-1].ended_at)
    return FailedWork(
        work=work.work_id,
        binding=work.binding,
        scope=work.scope,
        failures=work.retry.failures,
        budget=budget,
        permanent=bool(current and current.permanent),
        blocked=work.retry.blocked_reason,
        code=current.error_code if current else None,
        message=current.error_message if current else None,
        ended_at=ended,
    )


def _row(work: WorkState, newest: RecordedEvent | None, waiting: str | None) -> WorkRow:
    current = work.current
    return WorkRow(
        id=work.work_id,
        state=work.state,
        scope=work.scope,
        binding=work.binding,
        kind=work.kind,
        attempts=len(work.attempts),
        last_outcome=current.outcome if current else None,
        waiting=waiting,
        submitted_at=format_timestamp(work.submitted_at),
        last_activity=newest.recorded_at if newest else None,
        last_event=newest.type if newest else None,
        position=newest.position if newest else None,
    )


__all__ = [
    "ActivityQueries",
    "EventPage",
    "FailedWork",
    "ScheduleFire",
    "WorkRow",
    "WorkRowPage",
]
