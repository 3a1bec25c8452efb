"""The in-memory backend: `memory://name` and `memory://`, for tests and simulations.

`memory://name` names a store kept in this process for as long as it runs: every
`open_log` (and `rota.open`) of that URL is another handle on the same log, its projections
and its daemon lock, as another connection to a database would be. `memory://` alone is a
fresh private store each time it is opened. `forget(name)` drops a named store (a test
that wants a clean one under the same name). Nothing is shared with another process: a
child that opens `memory://name` gets a new, empty store (`processes_share` is False).

It is public, for users' own tests: `rota.open("memory://")` is a scheduler with the whole
store contract (the same suite as SQLite and PostgreSQL) and no file.
"""

from __future__ import annotations

import threading
from typing import Any

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import Clock, EventStore
from rota.infrastructure.backend import Backend, StoreLock
from rota.infrastructure.memory.log import MemoryLog, MemoryStore
from rota.infrastructure.memory.projections import MemoryProjectionStore
from rota.infrastructure.store_url import store_not_found

SCHEME = "memory://"


class MemoryDaemonLock:
    """A daemon lock kept in memory: shared holders together, or one exclusive one."""

    def __init__(self, place: MemoryLog, where: str, *, exclusive: bool) -> None:
        self.place, self.where, self.exclusive = place, where, exclusive
        self._held = False

    def acquire(self) -> bool:
        with self.place.guard:
            if self._held:
                return True
            if self.place.exclusive or (self.exclusive and self.place.shared):
                return False
            if self.exclusive:
                self.place.exclusive = True
            else:
                self.place.shared += 1
            self._held = True
            return True

    def release(self) -> None:
        with self.place.guard:
            if not self._held:
                return
            if self.exclusive:
                self.place.exclusive = False
            else:
                self.place.shared -= 1
            self._held = False

    def held_by_another(self) -> bool:
        with self.place.guard:
            others = self.place.shared - (1 if self._held and not self.exclusive else 0)
            return others > 0 or (self.place.exclusive and not (self._held and self.exclusive))


_PLACES: dict[str, MemoryLog] = {}
_PLACES_LOCK = threading.Lock()


def forget(name: str) -> None:
    """Drop the store `memory://name` (handles still open keep what they had)."""
    with _PLACES_LOCK:
        _PLACES.pop(name, None)


class MemoryBackend(Backend):
    """`memory://name` (shared in this process) or `memory://` (private); see the module
    docstring. `check_integrity` is not applicable and `isolate_projections` refused
    (`not_sqlite`: the projections die with the process): the base class's answers."""

    processes_share = False

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = url[len(SCHEME) :]

    def _place(self, create: bool) -> MemoryLog | None:
        if not self.name:
            return MemoryLog("") if create else None
        with _PLACES_LOCK:
            place = _PLACES.get(self.name)
            if place is None and create:
                place = _PLACES[self.name] = MemoryLog(self.name)
            return place

    def open_log(
        self, *, clock: Clock | None = None, create: bool = True, **settings: Any
    ) -> EventStore:
        place = self._place(create)
        if place is None:
            raise store_not_found(self.url)
        return MemoryStore(place, self.url, clock=clock)

    def open_projections(
        self, *, must_exist: bool = False, read_only: bool = False, clock: Clock | None = None
    ) -> MemoryProjectionStore:
        place = self._place(not must_exist)
        return _projections(place, self.url, must_exist, clock)

    def projections_beside(
        self,
        log: EventStore,
        *,
        must_exist: bool = False,
        read_only: bool = False,
        clock: Clock | None = None,
    ) -> MemoryProjectionStore | None:
        place = log.log if isinstance(log, MemoryStore) else self._place(not must_exist)
        return _projections(place, self.url, must_exist, clock)

    def daemon_lock(self, *, exclusive: bool = False) -> StoreLock | None:
        place = self._place(True)
        assert place is not None
        return MemoryDaemonLock(place, f"{self.url} (daemon lock)", exclusive=exclusive)


def _projections(
    place: MemoryLog | None, url: str, must_exist: bool, clock: Clock | None
) -> MemoryProjectionStore:
    where = f"{url} (projections)"
    if place is None or (must_exist and not place.tables.created):
        raise ProjectionStoreError(
            f"no projection store in {where} ('rota replay rebuild' creates one)",
            code=PortCode.NO_PROJECTION_STORE,
        )
    place.tables.created = True
    return MemoryProjectionStore(place.tables, where, clock=clock)


__all__ = ["SCHEME", "MemoryBackend", "MemoryDaemonLock", "forget"]
