"""The projection store: persisted projections beside the log, each with its tracking position.

One SQLite file (by default `<log file>.projections`, see `default_path`) with two tables:
- `projection_meta(name, version, position, log_hash, digest, rebuilt_at, saved_at,
  generation)`: per projection the fold version it was built by, the log position it has
  applied, the log's hash at that position, its digest when one was computed at that
  position, and a generation counter bumped by every write;
- `rows_<name>(key, value)` per projection (`rows_scheduler`, `rows_history`): its rows,
  msgspec JSON values keyed as the projection names them (`work/<id>`, `ledger/...`,
  `turns` ...). A table per projection (a plain rowid table, whose rows of a few KiB stay
  on their leaf pages) lets a load read its rows in one sequential scan.

What may load, and how a save writes exactly once, are the same for every backend
(`stored_projections`); this module is the file's connection and its SQL.

Durability: the file is derived (everything in it is rebuilt from the log), so it runs in
WAL mode with `synchronous=NORMAL`. A power cut may lose the last saves but never tears one
(WAL commits are atomic): the file then holds an earlier consistent position and catch-up
replays the rest from the log. FULL would buy nothing but fsyncs.

Pages: a new file is made with 8 KiB pages (`PAGE_SIZE`; a file keeps the size it was made
with, so an older file stays at 4 KiB and works as before). A save writes its rows, a few
hundred bytes to a few KiB each, into a table per projection: with pages twice the size, a
Work's first row (an insert) splits fewer pages and the WAL, and its checkpoint, carry
fewer frames for the same rows (measured, apsw: 2,000-5,000 rows a save, new rows 21-27%
less CPU, updates of rows scattered over a 100k-row table 11% more).

One writer at a time is assumed per file (the scheduler that owns it), which holds
`<file>.lock` (`writer_lock`).

A PostgreSQL log keeps the same tables in its own schema (`PostgresProjectionStore`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import apsw
import msgspec

from rota.application.errors import ProjectionStoreError
from rota.application.ports import (
    Clock,
    ProjectionMeta,
    WriterLock,
)
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.projection_locks import FileWriterLock
from rota.infrastructure.projection_tables import (
    META_COLUMNS,
    ROW_TABLES,
    SCHEMA,
    default_path,
    log_hash_at,
    read_meta,
    row_table,
)
from rota.infrastructure.sqlite.projection_swap import SwappedFile

log = logging.getLogger("rota.projections")
T = TypeVar("T")
PAGE_SIZE = 8192  # bytes a page, for a new file (see the module docstring)
__all__ = ["SQLiteProjectionStore", "default_path", "log_hash_at"]


class SQLiteProjectionStore(SwappedFile):
    """Persisted projections in one SQLite file; see the module docstring (a rebuild's
    swap, `replace` and `staging`, is `SwappedFile`'s)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout: float = 30.0,
    ) -> None:
        self.path = Path(path)
        self.clock: Clock = clock or SystemClock()
        self.last_refusal: str | None = None
        self._lock = threading.RLock()
        self._generations: dict[str, int] = {}
        self._attached: dict[int, str] = {}  # id of a projection being replaced -> its spill
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProjectionStoreError(
                f"cannot open the projection store at {self.path}: {exc.strerror}"
            ) from None
        try:
            self._conn = apsw.Connection(str(self.path))
            self._busy_ms = int(busy_timeout * 1000)
            self._conn.setbusytimeout(self._busy_ms)
            self._conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new file's; see PAGE_SIZE
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(SCHEMA)
            for table in ROW_TABLES.values():
                self._conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {table} "
                    "(key TEXT PRIMARY KEY, value BLOB NOT NULL)"
                )
        except apsw.Error as exc:
            raise ProjectionStoreError(
                f"cannot open the projection store at {self.path}: {exc}"
            ) from exc
        self._closed = False

    # -- transactions --------------------------------------------------------------------

    def _read(self, body: Callable[[apsw.Connection], T]) -> T:
        with self._lock:
            if not self._conn.getautocommit():
                # Inside this store's own write (a whole save reading the rows of the Works
                # it has not in memory): read in that transaction.
                return body(self._conn)
            try:
                self._conn.execute("BEGIN")
                try:
                    return body(self._conn)
                finally:
                    self._conn.execute("COMMIT")
            except apsw.Error as exc:
                raise ProjectionStoreError(
                    f"cannot read the projection store at {self.path}: {exc}"
                ) from exc

    def _write(self, body: Callable[[apsw.Connection], T]) -> T:
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except apsw.Error as exc:
                raise ProjectionStoreError(
                    f"cannot write the projection store at {self.path}: {exc}"
                ) from exc
            try:
                result = body(conn)
                conn.execute("COMMIT")
            except BaseException as exc:
                if not conn.getautocommit():
                    conn.execute("ROLLBACK")
                if isinstance(exc, apsw.Error):
                    raise ProjectionStoreError(
                        f"a write to the projection store at {self.path} failed: {exc}"
                    ) from exc
                raise
            return result

    # -- reading ---------------------------------------------------------------------------

    @property
    def where(self) -> str:
        """Where the projections are kept, for messages (a path, or a PostgreSQL schema)."""
        return str(self.path)

    def metas(self) -> dict[str, ProjectionMeta]:
        def body(conn: apsw.Connection) -> dict[str, ProjectionMeta]:
            found = conn.execute(f"SELECT {META_COLUMNS} FROM projection_meta ORDER BY name")
            return {row[0]: ProjectionMeta(*row) for row in found}

        return self._read(body)

    def row(self, name: str, key: str) -> bytes | None:
        """One stored row's value."""
        with self._lock:
            try:
                found = self._conn.execute(
                    f"SELECT value FROM {row_table(name)} WHERE key = ?", (key,)
                ).fetchone()
            except apsw.Error as exc:
                raise ProjectionStoreError(f"cannot read {self.path}: {exc}") from exc
        if found is None:
            return None
        value = found[0]
        return value.encode() if isinstance(value, str) else bytes(value)

    def rows(self, name: str) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
        """A projection's meta and every row, read in one snapshot (in no set order)."""

        def body(conn: apsw.Connection) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
            rows: list[tuple[str, bytes]] = conn.execute(
                f"SELECT key, value FROM {row_table(name)}"
            ).fetchall()  # type: ignore[assignment]
            return read_meta(conn, name), rows

        return self._read(body)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside the block see one snapshot (a read transaction, under the lock)."""
        with self._lock:
            if not self._conn.getautocommit():  # in this store's own transaction: read in it
                yield
                return
            try:
                self._conn.execute("BEGIN")
            except apsw.Error as exc:
                raise ProjectionStoreError(f"cannot read {self.path}: {exc}") from exc
            try:
                yield
            finally:
                with contextlib.suppress(apsw.Error):
                    self._conn.execute("COMMIT")  # it wrote nothing

    def sorted_rows(self, name: str) -> Iterator[tuple[str, bytes]]:
        """A projection's rows in key order, read as iterated (the primary key's order: no
        sort); values as the file holds them (a damaged file may hold NULL or a number)."""
        sql = f"SELECT key, value FROM {row_table(name)} ORDER BY key"
        with self.snapshot():
            try:
                yield from self._conn.execute(sql)
            except apsw.Error as exc:
                raise ProjectionStoreError(f"cannot read {self.path}: {exc}") from exc

    # Row reads by key, in byte order: the SQL hooks of the lazy open.

    def _rows_outside(self, conn: Any, name: str, low: str, high: str) -> list[tuple[str, bytes]]:
        """Rows whose key is below `low` or from `high` on."""
        sql = f"SELECT key, value FROM {row_table(name)} WHERE key < ? OR key >= ?"
        rows: list[tuple[str, bytes]] = conn.execute(sql, (low, high)).fetchall()
        return rows

    def _rows_between(
        self, conn: Any, name: str, low: str, high: str | None
    ) -> list[tuple[str, bytes]]:
        """Rows whose key is from `low` up to (not including) `high` (None: no bound)."""
        sql = f"SELECT key, value FROM {row_table(name)} WHERE key >= ?"
        args: tuple[str, ...] = (low,)
        if high is not None:
            sql, args = sql + " AND key < ?", (low, high)
        rows: list[tuple[str, bytes]] = conn.execute(sql, args).fetchall()
        return rows

    def _rows_in(self, conn: Any, name: str, keys: list[str]) -> list[tuple[str, bytes]]:
        """The rows of `keys` that exist."""
        table = row_table(name)
        sql = f"SELECT key, value FROM {table} WHERE key IN (SELECT value FROM json_each(?))"
        rows: list[tuple[str, bytes]] = conn.execute(
            sql, (msgspec.json.encode(keys).decode(),)
        ).fetchall()
        return rows

    def _rows_after(
        self, conn: Any, name: str, low: str, high: str, limit: int
    ) -> list[tuple[str, bytes]]:
        """The first `limit` rows whose key is after `low` and before `high`, in key order."""
        sql = (
            f"SELECT key, value FROM {row_table(name)} WHERE key > ? AND key < ? "
            "ORDER BY key LIMIT ?"
        )
        rows: list[tuple[str, bytes]] = conn.execute(sql, (low, high, limit)).fetchall()
        return rows

    # -- meta rows and writes: the SQL hooks of `StoredProjections` ------------------------

    def _read_meta(self, conn: Any, name: str) -> ProjectionMeta | None:
        return read_meta(conn, name)

    def _clear(self, conn: Any, name: str) -> None:
        conn.execute(f"DELETE FROM {row_table(name)}")

    def _put_meta(self, conn: Any, meta: ProjectionMeta) -> int:
        """Store a projection's meta row (`next_meta` made it); its generation."""
        conn.execute(
            f"INSERT OR REPLACE INTO projection_meta ({META_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            msgspec.structs.astuple(meta),
        )
        return meta.generation

    def _delete_meta(self, conn: Any, name: str) -> None:
        conn.execute("DELETE FROM projection_meta WHERE name = ?", (name,))

    def writer_lock(self) -> WriterLock:
        """The lock the one process keeping this store current holds: `<file>.lock`."""
        return FileWriterLock(f"{self.path}.lock")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(apsw.Error):
                self._conn.close()
