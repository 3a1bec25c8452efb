"""Optimisation: a scheduler opened from its stored projection holds its active Works, not
every Work ever submitted (bench memory).

The Works of a scheduler projection kept in a projection store: the active ones in
memory, the quiet ones read when first used.

A Work is *quiet* when no index of the scheduler projection names it: not startable, no
timer due, no attempt that is live or holds a slot (a completed or failed Work, a standing
Work waiting for input). The cadence reads only the indices, so a scheduler opened from a
stored projection needs only its active Works in memory; the rest are found on demand:
- one Work (`works[id]`, `works.get(id)`, `id in works`): folded from its own stream in
  the log up to the projection's position (`fold_work`). The log is the authority, so
  this is exact whatever happened to the projection store meanwhile (a `rota replay
  rebuild` by another process included);
- a page of Works in id order (`page`, what a listing reads): the store's Work rows read
  in key order a chunk at a time and merged with the Works held here (which win: they
  are current), so a listing holds one chunk, never every Work. A stored row is used as
  it is when the store's position is not beyond the projection's (a Work not held here
  had no event since this process last loaded or saved, so the row is its state); else
  (another writer saved ahead of this process) the Work is folded from the log. A
  listing filtered by a state no quiet Work can be in (`HELD_STATES`: ready, running,
  retry_wait) reads the held Works alone, whatever the number of stored ones;
- every Work (iteration, `len`, `values()`, what a digest needs): the quiet
  ones decoded from the store's rows in one read, when the store still holds what this
  process saved there last; otherwise (another writer rewrote it) each missing Work is
  folded from the log as above.

After a save the projection forgets its quiet Works again (`forget`), so memory holds the
active Works and those touched since the last save, not every Work ever submitted.

A dict subclass, so the fold's hot path (`works.get` of an active Work) stays a dict
lookup; every read of a missing key goes through `_fetch`.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from rota.application.ports import EventStore, RecordedEvent
from rota.domain.evolve import evolve
from rota.domain.state import WorkState
from rota.projections.held_works import HELD_STATES
from rota.projections.scheduler import WORK_ROW, OnDemandWorks, SchedulerProjection
from rota.projections.work_pages import EVERY, WorkFilter, page_in_memory, page_of
from rota.projections.work_rows import WorkCodec, row_keys

if TYPE_CHECKING:
    # The view types dict's own keys(), values() and items() return (typeshed declares them
    # here), so the overrides below keep dict's signatures.
    from _collections_abc import dict_items, dict_keys, dict_values

FoldWork = Callable[[str], WorkState | None]
FoldWorks = Callable[[Sequence[str]], dict[str, WorkState]]  # the ones that exist
# Every stored Work row, and whether the store still holds what this process saved last.
StoredRows = Callable[[], tuple[Iterable[tuple[str, bytes]], bool]]
# The stored position (None: nothing stored) and up to `count` Work rows after a Work id,
# in key order (`ProjectionStore.work_rows`).
PageRows = Callable[[str, int], tuple[int | None, list[tuple[str, bytes]]]]
CHUNK = 500  # stored Work rows read at a time by a listing


class StoredWorks(OnDemandWorks):
    """Works in memory plus the quiet ones on demand; see the module docstring."""

    def __init__(
        self,
        loaded: Iterable[WorkState],
        fold_work: FoldWork,
        stored_rows: StoredRows,
        page_rows: PageRows | None = None,
        position: Callable[[], int] = lambda: 0,
        decode: Callable[[bytes], WorkState] | None = None,
        fold_works: FoldWorks | None = None,
    ) -> None:
        super().__init__((work.work_id, work) for work in loaded)
        self._fold_work = fold_work
        self._stored_rows = stored_rows
        self._page_rows = page_rows
        self._position = position
        self._decode = WorkCodec().decode if decode is None else decode
        self._fold_works = fold_works
        # Works the log had no event of when last asked (`prefetch`), until a `forget`.
        self._absent: set[str] = set()
        self.complete = False
        self.fetched = 0  # Works found on demand (for tests and diagnostics)

    # -- one Work ---------------------------------------------------------------------

    def _fetch(self, work_id: str) -> WorkState | None:
        if self.complete or work_id in self._absent:
            return None
        work = self._fold_work(work_id)
        if work is not None:
            dict.__setitem__(self, work_id, work)
            self.fetched += 1
        return work

    def prefetch(self, work_ids: Iterable[str]) -> None:
        """Fold those of `work_ids` not held from the log in one read (`fold_works`) and
        hold them; remember the ones the log has no event of, so their lookups read
        nothing. That memory lasts until the next `forget`: a Work first recorded later
        is held from its first event on (the fold adds it) until a save lets it go."""
        if self.complete or self._fold_works is None:
            return
        missing = [w for w in work_ids if not dict.__contains__(self, w) and w not in self._absent]
        if not missing:
            return
        found = self._fold_works(missing)
        for work_id in missing:
            work = found.get(work_id)
            if work is None:
                self._absent.add(work_id)
            else:
                dict.__setitem__(self, work_id, work)
                self.fetched += 1

    # -- a page of Works ----------------------------------------------------------------

    def page(self, after: str, limit: int, where: WorkFilter) -> tuple[list[WorkState], str | None]:
        """A page of Works in id order after `after`, the stored ones merged with those
        held here (see the module docstring); nothing found is kept in memory."""
        if self.complete or self._page_rows is None or where.state in HELD_STATES:
            return page_in_memory(dict(dict.items(self)), after, limit, where)
        return page_of((w for w in self._in_order(after, where) if where.matches(w)), limit)

    def _in_order(self, after: str, where: WorkFilter = EVERY) -> Iterator[WorkState]:
        """Every Work after `after` in id order, read from the store a chunk at a time; a
        stored row `where` rules out by its scope, binding and terminal is not decoded."""
        assert self._page_rows is not None
        held = sorted(work_id for work_id in dict.keys(self) if work_id > after)
        sift = not where.everything
        next_held, cursor = 0, after
        while True:
            position, rows = self._page_rows(cursor, CHUNK)
            usable = position is not None and position <= self._position()
            for key, value in rows:
                work_id = key[len(WORK_ROW) :]
                while next_held < len(held) and held[next_held] < work_id:
                    yield dict.__getitem__(self, held[next_held])
                    next_held += 1
                work = dict.get(self, work_id)
                if work is not None:
                    next_held += 1  # held (and current): it wins over the stored row
                elif usable:
                    if sift and where.rules_out(row_keys(value)):
                        continue
                    work = self._stored(work_id, value)
                else:
                    work = self._fold_work(work_id)
                if work is not None:
                    yield work
            if len(rows) < CHUNK:
                break
            cursor = rows[-1][0][len(WORK_ROW) :]
        for work_id in held[next_held:]:
            yield dict.__getitem__(self, work_id)

    def _stored(self, work_id: str, value: bytes) -> WorkState | None:
        """A stored row decoded, or the Work folded from the log if the row names a binding
        this projection has not seen (another writer stored it)."""
        try:
            return self._decode(value)
        except KeyError:
            return self._fold_work(work_id)

    # -- every Work -------------------------------------------------------------------

    def load_all(self) -> None:
        """Bring every Work into memory (see the module docstring)."""
        if self.complete:
            return
        rows, ours = self._stored_rows()
        for key, value in rows:
            work_id = key[len("work/") :]
            if dict.__contains__(self, work_id):
                continue
            # Rows another writer stored may be ahead of this projection: fold those.
            work = self._stored(work_id, value) if ours else self._fold_work(work_id)
            if work is not None:
                dict.__setitem__(self, work_id, work)
        self.complete = True

    def __iter__(self) -> Iterator[str]:
        self.load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load_all()
        return dict.__len__(self)

    def keys(self) -> dict_keys[str, WorkState]:
        self.load_all()
        return dict.keys(self)

    def values(self) -> dict_values[str, WorkState]:
        self.load_all()
        return dict.values(self)

    def items(self) -> dict_items[str, WorkState]:
        self.load_all()
        return dict.items(self)

    def forget(self, keep: Container[str]) -> int:
        self._absent.clear()
        gone = super().forget(keep)
        if gone:
            self.complete = False
        return gone


def open_with_quiet_works(
    position: int,
    rows: Iterable[tuple[str, bytes]],
    log: EventStore,
    stored_rows: StoredRows,
    page_rows: PageRows | None = None,
) -> SchedulerProjection:
    """A projection at `position` from the rows of its active Works and every other row
    (no quiet Work's row): quiet Works are found on demand (`StoredWorks`), each folded
    from its stream in `log`, or all at once from `stored_rows()`."""
    projection = SchedulerProjection.from_rows(position, rows)
    keep_quiet_works_on_disk(projection, log, stored_rows, page_rows)
    return projection


def keep_quiet_works_on_disk(
    projection: SchedulerProjection,
    log: EventStore,
    stored_rows: StoredRows,
    page_rows: PageRows | None = None,
) -> None:
    """From now on, find the projection's Works not in memory on demand: for a projection
    every Work of which is stored (opened lazily, or just saved whole)."""
    if not isinstance(projection.works, StoredWorks):
        loaded = list(projection.works.values())
        projection.works = StoredWorks(
            loaded,
            _fold_from_log(projection, log),
            stored_rows,
            page_rows,
            lambda: projection.position,
            projection.codec.decode,
            _fold_many_from_log(projection, log),
        )


def _fold_stream(events: Iterable[RecordedEvent], upto: int) -> WorkState | None:
    """A Work folded from its stream's events, up to log position `upto`."""
    work: WorkState | None = None
    for r in events:
        if r.position > upto:
            break
        work = evolve(work, r.event, r.position, r.recorded_time)
    return work


def _fold_from_log(projection: SchedulerProjection, log: EventStore) -> FoldWork:
    def fold_work(work_id: str) -> WorkState | None:
        return _fold_stream(log.read_stream(WORK_ROW + work_id), projection.position)

    return fold_work


def _fold_many_from_log(projection: SchedulerProjection, log: EventStore) -> FoldWorks:
    def fold_works(work_ids: Sequence[str]) -> dict[str, WorkState]:
        position = projection.position
        streams = log.read_streams([WORK_ROW + work_id for work_id in work_ids])
        folded = {stream: _fold_stream(events, position) for stream, events in streams.items()}
        return {s[len(WORK_ROW) :]: work for s, work in folded.items() if work is not None}

    return fold_works


__all__ = ["StoredWorks", "keep_quiet_works_on_disk", "open_with_quiet_works"]
