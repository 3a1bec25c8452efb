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

Exactly once: a save writes the changed rows, the position and the log hash in ONE
transaction, so the file always holds some consistent prefix of the log. A load refuses
(returns None, so the caller folds from position 0) a projection of another fold version
(bumping `version` rebuilds on open), one whose position is beyond the log head, or one
whose log hash differs from the log's at that position (another log, or a rewritten one).

Durability: the file is derived (everything in it is rebuilt from the log), so it runs in
WAL mode with `synchronous=NORMAL`. A power cut may lose the last saves but never tears one
(WAL commits are atomic): the file then holds an earlier consistent position and catch-up
replays the rest from the log. FULL would buy nothing but fsyncs.

One writer at a time is assumed per file (the scheduler that owns it). Another process
that wrote meanwhile (a `rota replay rebuild`) is detected by the generation counter: the
next save then writes the whole projection instead of its changed rows.

A PostgreSQL log keeps the same tables in its own schema (`projection_store_pg`): that
store inherits this class and overrides only the connection (`_read`, `_write`, `row`,
`rows`, `metas`), the SQL hooks (`_read_meta`, `_clear`, `_write_rows`, `_put_meta`,
`_delete_meta`) and `writer_lock`. Loading, refusals and generations are shared, so the
code here reaches the database only through those.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import apsw
import msgspec

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import (
    Clock,
    EventStore,
    LogHead,
    Persisted,
    ProjectionMeta,
    ProjectionStore,
    WriterLock,
)
from rota.application.timestamps import format_timestamp
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.projection_locks import FileWriterLock
from rota.infrastructure.projection_tables import (
    META_COLUMNS,
    ROW_TABLES,
    SCHEMA,
    default_path,
    hash_for,
    log_hash_at,
    next_meta,
    read_meta,
    row_table,
    write_rows,
)
from rota.infrastructure.stored_works import keep_quiet_works_on_disk, open_with_quiet_works
from rota.projections.history import HistoryProjection
from rota.projections.scheduler import ACTIVE_ROW, WORK_ROW, SchedulerProjection

log = logging.getLogger("rota.projections")
T = TypeVar("T")
PAUSE_GC_ROWS = 40_000
# The keys of Work rows, `work/...`: from "work/" up to (not including) "work0" ('0' follows '/').
WORK_RANGE = (WORK_ROW, WORK_ROW[:-1] + chr(ord("/") + 1))
_ids = msgspec.json.Decoder(list[str])
__all__ = ["SQLiteProjectionStore", "default_path", "log_hash_at"]


class SQLiteProjectionStore(ProjectionStore):
    """Persisted projections in one SQLite file; see the module docstring."""

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
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProjectionStoreError(
                f"cannot open the projection store at {self.path}: {exc.strerror}"
            ) from None
        try:
            self._conn = apsw.Connection(str(self.path))
            self._conn.setbusytimeout(int(busy_timeout * 1000))
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

    def meta(self, name: str) -> ProjectionMeta | None:
        return self._read(lambda conn: self._read_meta(conn, name))

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

    def refusal(self, meta: ProjectionMeta | None, version: int, log: EventStore) -> str | None:
        """Why a stored projection cannot be used with this log and fold version, or None."""
        if meta is None:
            return "nothing stored yet"
        if meta.version != version:
            return f"stored by fold version {meta.version}, this rota's is {version}"
        head = log.head().position
        if meta.position > head:
            return (
                f"it is at position {meta.position} but the log ends at {head} "
                "(another log, or the log lost its tail)"
            )
        if log_hash_at(log, meta.position) != meta.log_hash:
            return (
                f"the log's hash at position {meta.position} is not the one it was built on "
                "(another log, or the log was rewritten)"
            )
        return None

    def load_scheduler(self, log: EventStore, *, lazy: bool = False) -> SchedulerProjection | None:
        """The stored scheduler projection, or None (see `last_refusal`) to fold from 0.

        `lazy` (for the one process that keeps this store, where `lazy_works`): load only
        the Works some index names and find the quiet ones on demand (`StoredWorks`), so
        opening costs the active Works, not every Work ever submitted.
        """
        if not (lazy and self.lazy_works):
            return self._load(SchedulerProjection, log, SchedulerProjection.from_rows)

        def build(position: int, rows: list[tuple[str, bytes]]) -> SchedulerProjection:
            return open_with_quiet_works(position, rows, log, self._stored_work_rows)

        return self._load(SchedulerProjection, log, build, read=self._active_rows)

    def keep_on_disk(self, scheduler: SchedulerProjection, log: EventStore) -> None:
        """After a save of `scheduler` to this store by its keeper: let it find its Works
        not in memory on demand, as a lazy open does (`keep_quiet_works_on_disk`)."""
        if self.lazy_works:
            keep_quiet_works_on_disk(scheduler, log, self._stored_work_rows)

    # Whether `load_scheduler(lazy=True)` leaves quiet Works on disk (a store whose rows can
    # be read by key range cheaply); a store without it loads every Work.
    lazy_works = True

    def _active_rows(self, name: str) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
        """The meta and every row but the quiet Works' (one snapshot); every row if the
        projection names no active Works (an older layout)."""

        def body(conn: Any) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
            rows = self._rows_outside(conn, name, *WORK_RANGE)
            active = next((value for key, value in rows if key == ACTIVE_ROW), None)
            if active is None:
                rows = self._rows_between(conn, name, "", None)
            else:
                keys = [WORK_ROW + work_id for work_id in _ids.decode(active)]
                rows += self._rows_in(conn, name, keys)
            return self._read_meta(conn, name), rows

        return self._read(body)

    def _stored_work_rows(self) -> tuple[list[tuple[str, bytes]], bool]:
        """Every stored Work row of the scheduler projection, and whether the store still
        holds what this process saved or loaded last (else another writer rewrote it)."""
        name = SchedulerProjection.name

        def body(conn: Any) -> tuple[list[tuple[str, bytes]], bool]:
            meta = self._read_meta(conn, name)
            ours = meta is not None and meta.generation == self._generations.get(name)
            return self._rows_between(conn, name, *WORK_RANGE), ours

        return self._read(body)

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

    def load_history(self, log: EventStore) -> HistoryProjection | None:
        """The whole stored history projection in memory, or None (see `last_refusal`)."""
        return self._load(HistoryProjection, log, HistoryProjection.from_rows)

    def _load(
        self,
        kind: Any,
        log: EventStore,
        build: Callable[[int, list[Any]], T],
        read: Callable[[str], tuple[ProjectionMeta | None, list[tuple[str, bytes]]]] | None = None,
    ) -> T | None:
        # Check the meta first, so a refused projection costs no row reads.
        meta: ProjectionMeta | None = self.meta(kind.name)
        rows: list[tuple[str, bytes]] = []
        reason = self.refusal(meta, kind.version, log)
        if reason is None:
            meta, rows = (read or self.rows)(kind.name)
            reason = self.refusal(meta, kind.version, log)  # a save may have come between
        if reason is None and meta is not None:
            # Decoding makes many tracked containers (tuples) and no cycle. For a large
            # projection the cyclic collector's full passes over the growing heap cost more
            # than one pass afterwards (measured: 100k Works 1.0 s paused, 1.2-1.7 s not);
            # for a small one pausing costs more (10k Works: 95 ms against 75 ms).
            collecting = gc.isenabled() and len(rows) > PAUSE_GC_ROWS
            if collecting:
                gc.disable()
            try:
                loaded = build(meta.position, rows)
            except (msgspec.DecodeError, msgspec.ValidationError, KeyError, ValueError) as exc:
                reason = f"a stored row cannot be decoded: {exc}"
            else:
                self._generations[kind.name] = meta.generation
                self.last_refusal = None
                return loaded
            finally:
                if collecting:
                    gc.enable()
        self.last_refusal = f"{kind.name} projection not loaded: {reason}"
        return None

    # -- writing ---------------------------------------------------------------------------

    def save(
        self,
        projections: Persisted | Sequence[Persisted],
        log: EventStore | LogHead,
        *,
        digest: bool = False,
    ) -> int:
        """Write the rows each projection changed since its last save, its position and the
        log hash there, all in one transaction; returns how many rows were written.

        A projection this store did not load or save last (another writer came between, or
        none was stored) is written whole. `digest=True` also records its digest.
        """
        todo = [projections] if not isinstance(projections, Sequence) else list(projections)
        hashes = {p.name: hash_for(log, p.position) for p in todo}
        digests = {p.name: p.digest() for p in todo} if digest else {}  # type: ignore[attr-defined]
        now = format_timestamp(self.clock.now())

        def body(conn: Any) -> tuple[int, dict[str, int]]:
            written, generations = 0, {}
            for projection in todo:
                meta = self._read_meta(conn, projection.name)
                whole = (
                    meta is None
                    or meta.generation != self._generations.get(projection.name)
                    or meta.version != projection.version
                )
                if whole and meta is not None and getattr(projection, "loader", None):
                    raise ProjectionStoreError(
                        f"the {projection.name} projection in {self.where} was rewritten by "
                        "another writer; reopen it",
                        code=PortCode.PROJECTION_MOVED,
                    )
                # The keys first: listing every Work may read the stored rows (`StoredWorks`),
                # which must happen before they are cleared and not while they are written.
                keys = list(projection.row_keys()) if whole else sorted(projection.dirty)
                if whole:
                    self._clear(conn, projection.name)
                written += self._write_rows(conn, projection, keys, cleared=whole)
                generations[projection.name] = self._put_meta(
                    conn,
                    next_meta(
                        projection,
                        hashes[projection.name],
                        digests.get(projection.name),
                        now,
                        meta,
                        rebuilt=False,
                    ),
                )
            return written, generations

        written, generations = self._write(body)
        self._saved(todo, generations)
        return written

    def replace(self, projections: Sequence[Persisted], log: EventStore | LogHead) -> None:
        """Swap in projections built afresh (a rebuild): every old row out, every new row in,
        the meta updated, in ONE transaction; a failure leaves the old projection intact."""
        hashes = {p.name: hash_for(log, p.position) for p in projections}
        digests = {p.name: p.digest() for p in projections}  # type: ignore[attr-defined]
        now = format_timestamp(self.clock.now())

        def body(conn: Any) -> dict[str, int]:
            generations = {}
            for projection in projections:
                meta = self._read_meta(conn, projection.name)
                self._clear(conn, projection.name)
                self._write_rows(conn, projection, projection.row_keys(), cleared=True)
                generations[projection.name] = self._put_meta(
                    conn,
                    next_meta(
                        projection,
                        hashes[projection.name],
                        digests[projection.name],
                        now,
                        meta,
                        rebuilt=True,
                    ),
                )
            return generations

        self._saved(projections, self._write(body))

    def drop(self, name: str) -> None:
        """Forget a projection (rows and meta) in one transaction."""

        def body(conn: Any) -> None:
            self._clear(conn, name)
            self._delete_meta(conn, name)

        self._write(body)
        self._generations.pop(name, None)

    # -- the SQL of one backend (overridden by `PostgresProjectionStore`) -------------------

    def _read_meta(self, conn: Any, name: str) -> ProjectionMeta | None:
        return read_meta(conn, name)

    def _clear(self, conn: Any, name: str) -> None:
        conn.execute(f"DELETE FROM {row_table(name)}")

    def _write_rows(
        self, conn: Any, projection: Persisted, keys: Iterable[str], *, cleared: bool
    ) -> int:
        """Write `keys`' rows; `cleared`: the table was emptied in this transaction."""
        return write_rows(conn, projection, keys)

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

    def _saved(self, projections: Iterable[Persisted], generations: dict[str, int]) -> None:
        for projection in projections:
            projection.dirty.clear()
            self._generations[projection.name] = generations[projection.name]

    def attach(self, meta: ProjectionMeta) -> None:
        """Continue the stored projection `meta` describes as this writer's own: the next
        save writes only changed rows (a store-backed projection opened from its meta)."""
        self._generations[meta.name] = meta.generation

    def history_loader(self) -> Callable[[str], bytes | None]:
        """A loader reading history rows on demand (for a store-backed `HistoryProjection`)."""
        return partial(self.row, HistoryProjection.name)

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
