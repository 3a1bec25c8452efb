"""Keeping the stored projections current while a scheduler runs.

The scheduler service owns the in-memory `SchedulerProjection` and applies every event to
it. `LiveProjections` adds what a projection store needs around that:
- `open()`: the stored scheduler projection when it is usable (else a fresh one, which the
  service folds from position 0), and the history projection brought to the same position
  (its own catch-up reads the log in pages and commits per page);
- `apply(...)` per event: the history projection, store-backed (it reads the rows an event
  touches on demand and forgets them after each save, so it never holds every Work's
  history in memory);
- `applied(scheduler, n)` after each batch: saves both every `save_every` events, in one
  transaction at the same position; `save()` on demand and `close()` at shutdown;
- every scheduler opens the scheduler projection with its quiet Works left on disk (found
  on demand, see `rota.infrastructure.stored_works`); the keeper forgets them again after
  each save, another scheduler every `save_every` events (keeping those changed since it
  opened, which the store lacks), so memory and start-up follow the active Works, not
  every Work ever submitted (a projection folded from position 0 holds every Work until
  the keeper's first save).
The projection store is derived data: a failure to save is logged and retried at the next
save, never raised into the scheduler (the log alone is the authority).

One process keeps a projection store current: `open()` takes the store's writer lock
(`store.writer_lock()`: an flock on `<file>.lock` beside an SQLite projection file, a
PostgreSQL advisory lock for projections in the log's schema). Another scheduler on the
same log (racing schedulers) still starts from the stored projection but keeps it in
memory only, so two writers never thrash the store.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TypeVar

from rota.application.errors import PortCode, StoreError
from rota.application.ports import EventStore, Persisted, ProjectionStore, WriterLock
from rota.application.timestamps import recorded_times
from rota.domain.events import Event
from rota.projections.history import HistoryProjection
from rota.projections.scheduler import SchedulerProjection

log = logging.getLogger("rota.projections")
SAVE_EVERY = 5000
PAGE = 10_000
P = TypeVar("P")


def stored_scheduler(
    store: ProjectionStore, log_store: EventStore, *, lazy: bool = False
) -> SchedulerProjection | None:
    """`store.load_scheduler(...)` as the scheduler projection it is (the port types it by
    what the store needs of it, `Persisted`); None: fold from 0 (see `last_refusal`)."""
    return _loaded(SchedulerProjection, store.load_scheduler(log_store, lazy=lazy))


def _loaded(kind: type[P], loaded: Persisted | None) -> P | None:
    if loaded is None or isinstance(loaded, kind):
        return loaded
    raise TypeError(f"a projection store loaded a {type(loaded).__name__}, not a {kind.__name__}")


class LiveProjections:
    """The stored projections a running scheduler keeps current; see the module docstring."""

    def __init__(
        self,
        store: ProjectionStore,
        log_store: EventStore,
        *,
        save_every: int = SAVE_EVERY,
        history: bool = True,
    ) -> None:
        self.store = store
        self.log = log_store
        self.save_every = save_every
        self.keep_history = history
        self.history: HistoryProjection | None = None
        self.unsaved = 0
        self.failed: str | None = None
        self.writer = False
        self._writer_lock: WriterLock | None = None

    def _lock(self) -> bool:
        """Take the store's writer lock (False: another process keeps it current)."""
        lock = self.store.writer_lock()
        try:
            taken = lock.acquire()
        except (StoreError, OSError) as exc:  # the store cannot lock: do not write to it
            log.warning("cannot take the writer lock of %s: %s", self.store.where, exc)
            return False
        if taken:
            self._writer_lock = lock
        return taken

    def open(self) -> SchedulerProjection:
        """The scheduler projection to start from (stored, else empty), history alongside."""
        self.writer = self._lock()
        if not self.writer:
            log.info("%s is kept by another process: not saving to it", self.store.where)
        try:
            # Every scheduler reads quiet Works on demand, the keeper and any other alike:
            # one not held is folded from the log, or read from a stored row no newer than
            # the projection (`rota.infrastructure.stored_works`).
            scheduler = stored_scheduler(self.store, self.log, lazy=True)
        except StoreError as exc:
            scheduler, self.store.last_refusal = None, f"scheduler projection not loaded: {exc}"
        if scheduler is None:
            log.info("%s; folding the log from position 0", self.store.last_refusal)
            scheduler = SchedulerProjection()
        if self.keep_history and self.writer:
            self.history = self._open_history(scheduler.position)
        return scheduler

    def _open_history(self, position: int) -> HistoryProjection | None:
        """A store-backed history at exactly `position` (caught up page by page)."""
        try:
            meta = self.store.meta(HistoryProjection.name)
            reason = self.store.refusal(meta, HistoryProjection.version, self.log)
            history = HistoryProjection(loader=self.store.history_loader())
            if reason is None and meta is not None:
                # Usable as stored, even ahead of the scheduler: `apply` skips what it has.
                history.position = meta.position
                self.store.attach(meta)
            elif meta is not None:
                self.store.drop(HistoryProjection.name)
            while history.position < position:
                batch = self.log.read(history.position, min(PAGE, position - history.position))
                if not batch:
                    break
                for r, at in zip(batch, recorded_times(batch, {}), strict=True):
                    history.apply(r.position, r.stream, r.version, at, r.event)
                self.store.save(history, self.log)
                history.evict()
            return history
        except StoreError as exc:
            log.warning("history projection not kept: %s", exc)
            return None

    def apply(self, position: int, stream: str, version: int, at: datetime, event: Event) -> None:
        if self.history is not None:
            self.history.apply(position, stream, version, at, event)

    def applied(self, scheduler: SchedulerProjection, count: int) -> None:
        """Count applied events; save when `save_every` have accumulated."""
        self.unsaved += count
        if self.unsaved < self.save_every:
            return
        if self.writer:
            self.save(scheduler)
        else:
            # Not the keeper: nothing is saved, but the quiet Works read on demand since are
            # forgotten again (those changed since the open stay: the store lacks them).
            self.unsaved = 0
            scheduler.forget_quiet()

    def save(self, scheduler: SchedulerProjection) -> bool:
        """Save the scheduler (and history) projections now; False if not saved."""
        if not self.writer:
            return False
        history = self.history
        together = [scheduler] if history is None else [scheduler, history]
        try:
            self.store.save(together, self.log)  # type: ignore[arg-type]
        except StoreError as exc:
            if exc.code == PortCode.PROJECTION_MOVED and history is not None:
                # Another writer rebuilt the history: start again from what it stored.
                self.history = self._open_history(scheduler.position)
                return self.save(scheduler)
            if str(exc) != self.failed:
                log.warning("projections not saved (the log is unaffected): %s", exc)
            self.failed = str(exc)
            return False
        self.failed = None
        self.unsaved = 0
        active = scheduler.active_works()
        if history is not None:
            # The active Works' rows stay: the cadence is about to read them again.
            history.evict(keep=active)
        # Saved: every Work is in the store now, so a quiet one is found again on demand
        # (a projection folded from position 0 holds plain Works until its first save).
        self.store.keep_on_disk(scheduler, self.log)
        scheduler.forget_quiet(active)
        return True

    def close(self, scheduler: SchedulerProjection) -> None:
        """Save a last time and close the projection store."""
        try:
            if self.unsaved or scheduler.dirty:
                self.save(scheduler)
        finally:
            self.store.close()
            if self._writer_lock is not None:
                self._writer_lock.release()  # (a database lock went with the store's session)
                self._writer_lock = None
