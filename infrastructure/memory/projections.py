"""The in-memory projection store: `StoredProjections` over dictionaries, under one lock.

`MemoryTables` holds what the SQLite file holds (a meta row and a table of rows per
projection); every handle on one `memory://name` store shares it. A write runs under the
tables' lock and keeps an undo journal, so a write that fails (an error in the middle of a
save or a swap) leaves the tables as they were: one transaction, as on disk. A read runs
under the same lock, so it sees one snapshot. The writer lock is the tables' own: one
holder at a time, until it releases it or its handle closes (as a process dies).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from rota.application.ports import Clock, Persisted, ProjectionMeta, WriterLock
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.projection_tables import ROW_TABLES, RowsToWrite, row_table
from rota.infrastructure.stored_projections import StoredProjections

T = TypeVar("T")
_GONE = object()


class MemoryTables:
    """The projections of one in-memory store: meta rows and rows by projection name."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.metas: dict[str, ProjectionMeta] = {}
        self.rows: dict[str, dict[str, bytes]] = {}
        self.writer: object | None = None  # the handle holding the writer lock
        self.created = False  # a store was opened here to be written (not only probed)


class _Transaction:
    """The tables as a write changes them, with the undo journal that rolls it back."""

    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables
        self.undo: list[Callable[[], None]] = []

    def table(self, name: str) -> dict[str, bytes]:
        row_table(name)  # only the projections rota stores (`no stored projection is named`)
        return self.tables.rows.setdefault(name, {})

    def put(self, name: str, key: str, value: bytes) -> None:
        table = self.table(name)
        old = table.get(key, _GONE)
        table[key] = bytes(value)
        self.undo.append(lambda: _restore(table, key, old))

    def delete(self, name: str, key: str) -> None:
        table = self.table(name)
        old = table.pop(key, _GONE)
        self.undo.append(lambda: _restore(table, key, old))

    def clear(self, name: str) -> None:
        table = self.table(name)
        old = dict(table)
        table.clear()
        self.undo.append(lambda: _refill(table, old))

    def put_meta(self, meta: ProjectionMeta | None, name: str) -> None:
        metas = self.tables.metas
        old = metas.get(name, _GONE)
        if meta is None:
            metas.pop(name, None)
        else:
            metas[name] = meta
        self.undo.append(lambda: _restore(metas, name, old))

    def rollback(self) -> None:
        for step in reversed(self.undo):
            step()
        self.undo.clear()


def _refill(table: dict[str, bytes], old: dict[str, bytes]) -> None:
    table.clear()
    table.update(old)


def _restore(table: dict[str, Any], key: str, old: object) -> None:
    if old is _GONE:
        table.pop(key, None)
    else:
        table[key] = old


class MemoryWriterLock:
    """The tables' writer lock: one handle at a time (`WriterLock`)."""

    def __init__(self, tables: MemoryTables, holder: object) -> None:
        self.tables, self.holder = tables, holder

    def acquire(self) -> bool:
        with self.tables.lock:
            if self.tables.writer not in (None, self.holder):
                return False
            self.tables.writer = self.holder
            return True

    def release(self) -> None:
        with self.tables.lock:
            if self.tables.writer is self.holder:
                self.tables.writer = None


class MemoryProjectionStore(StoredProjections):
    """One handle on a `MemoryTables`; see the module docstring."""

    def __init__(self, tables: MemoryTables, where: str, *, clock: Clock | None = None) -> None:
        self.tables = tables
        self._where = where
        self.clock: Clock = clock or SystemClock()
        self.last_refusal: str | None = None
        self._generations: dict[str, int] = {}
        self._closed = False
        self._locks: list[MemoryWriterLock] = []  # released when this handle closes

    @property
    def where(self) -> str:
        return self._where

    def _read(self, body: Callable[[Any], T]) -> T:
        with self.tables.lock:
            return body(_Transaction(self.tables))

    def _write(self, body: Callable[[Any], T]) -> T:
        with self.tables.lock:
            transaction = _Transaction(self.tables)
            try:
                return body(transaction)
            except BaseException:
                transaction.rollback()
                raise

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        with self.tables.lock:
            yield

    def metas(self) -> dict[str, ProjectionMeta]:
        with self.tables.lock:
            return dict(sorted(self.tables.metas.items()))

    def row(self, name: str, key: str) -> bytes | None:
        row_table(name)
        with self.tables.lock:
            return self.tables.rows.get(name, {}).get(key)

    def rows(self, name: str) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
        row_table(name)
        with self.tables.lock:
            return self.tables.metas.get(name), list(self.tables.rows.get(name, {}).items())

    def _read_meta(self, conn: Any, name: str) -> ProjectionMeta | None:
        return self.tables.metas.get(name)

    def _clear(self, conn: Any, name: str) -> None:
        conn.clear(name)

    def _write_rows(
        self, conn: Any, projection: Persisted, keys: Iterable[str], *, cleared: bool
    ) -> int:
        rows = RowsToWrite(projection, keys)
        for key, value in rows:
            conn.put(projection.name, key, value)
        for (key,) in rows.deletes:
            conn.delete(projection.name, key)
        return rows.count

    def _put_meta(self, conn: Any, meta: ProjectionMeta) -> int:
        conn.put_meta(meta, meta.name)
        return meta.generation

    def _delete_meta(self, conn: Any, name: str) -> None:
        conn.put_meta(None, name)

    def _sorted(self, name: str) -> list[tuple[str, bytes]]:
        return sorted(self.tables.rows.get(name, {}).items())

    def _rows_outside(self, conn: Any, name: str, low: str, high: str) -> list[tuple[str, bytes]]:
        return [(k, v) for k, v in self._sorted(name) if k < low or k >= high]

    def _rows_between(
        self, conn: Any, name: str, low: str, high: str | None
    ) -> list[tuple[str, bytes]]:
        return [(k, v) for k, v in self._sorted(name) if k >= low and (high is None or k < high)]

    def _rows_in(self, conn: Any, name: str, keys: list[str]) -> list[tuple[str, bytes]]:
        table = self.tables.rows.get(name, {})
        return [(key, table[key]) for key in dict.fromkeys(keys) if key in table]

    def _rows_after(
        self, conn: Any, name: str, low: str, high: str, limit: int
    ) -> list[tuple[str, bytes]]:
        return [(k, v) for k, v in self._sorted(name) if low < k < high][:limit]

    def exists(self) -> bool:
        """Whether a projection store was made here (doctor: nothing is created to find out)."""
        return self.tables.created

    def table_counts(self) -> dict[str, int]:
        """Rows per projection table, every row read (doctor's scan of the tables)."""
        with self.tables.lock:
            counts = {"projection_meta": len(self.tables.metas)}
            for name, table in ROW_TABLES.items():
                counts[table] = len(self.tables.rows.get(name, {}))
            return counts

    def writer_lock(self) -> WriterLock:
        """A lock of its own each call (as an `flock` on its own open file): only one of
        them, of any handle on these tables, is held at a time."""
        lock = MemoryWriterLock(self.tables, object())
        self._locks.append(lock)
        return lock

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for lock in self._locks:
                lock.release()


__all__ = ["MemoryProjectionStore", "MemoryTables", "MemoryWriterLock"]
