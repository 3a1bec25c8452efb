"""Persisted projections in the log's own PostgreSQL schema (see `projection_store`).

The same store as the SQLite projection file, with the same interface and guarantees (the
loading and saving rules of `StoredProjections`; this module supplies the connection and
the SQL), in tables beside the log's `events` and `head` (`postgres.projection_tables`).

Exactly once: a save writes the changed rows, the position and the log hash in ONE
transaction, so the tables always hold some consistent prefix of the log. Positions are
gapless and commit in order (see `postgres.transactions`), so "the prefix up to N, whose hash is
H" names one state. That, not the append's transaction, is what keeps them consistent: the
projections are a fold the scheduler computes in memory after its appends, kept by one
host while every host appends; saving inside each append would hold the log's one write
lock for every projection write of every host. A crash loses at most the saves after the
last commit, and catch-up replays them from the log.

Writers: every write transaction first takes a transaction advisory lock of the schema's
projections (as `BEGIN IMMEDIATE` does for the file), so writes are serialized and each
reads the generation it bumps after every earlier commit. The one process that keeps the
store current holds a session advisory lock (`writer_lock()`, `AdvisoryWriterLock`), taken
with `pg_try_advisory_lock` on the store's own connection: it dies with that session, so a
crashed writer never leaves it behind. Reads run in a `REPEATABLE READ READ ONLY`
transaction (one snapshot for a meta and its rows) and never block the writer.

Durability: the tables are derived, so the session runs with `synchronous_commit=off` (the
file's `synchronous=NORMAL`): a server crash may lose the last saves, never tear one.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import Clock, Persisted, ProjectionMeta
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.config import EntryCode
from rota.infrastructure.postgres.names import identifier, split_schema
from rota.infrastructure.postgres.node_health import classify, session_check
from rota.infrastructure.postgres.projection_tables import (
    META_TABLE,
    PG_ROW_TABLES,
    count_rows,
    ddl,
    fetch_rows,
    put_meta,
    write_rows,
)
from rota.infrastructure.projection_tables import META_COLUMNS
from rota.infrastructure.stored_projections import StoredProjections

T = TypeVar("T")
_cursors = itertools.count(1)  # names of server-side cursors (`sorted_rows`)
# Advisory lock keys: (class, schema). The two-key form never meets the log's one-key locks.
WRITER_KEY = "rota.projections.writer"
WRITE_KEY = "rota.projections.write"


class AdvisoryWriterLock:
    """The writer lock of a `PostgresProjectionStore`: a session advisory lock on its
    connection (`pg_try_advisory_lock`), released by `release()` or when the session ends."""

    def __init__(self, store: PostgresProjectionStore) -> None:
        self.store = store

    def acquire(self) -> bool:
        return self.store._take_writer_lock()

    def release(self) -> None:
        self.store._release_writer_lock()


class PostgresProjectionStore(StoredProjections):
    """Persisted projections in one PostgreSQL schema; see the module docstring.

    `url` is the log's (`postgresql://...?schema=NAME`, as `PostgresStore.url` gives it).
    `create=False` creates nothing (`exists()` says whether the tables are there);
    `read_only=True` opens a session whose transactions cannot write (doctor, verify).
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        clock: Clock | None = None,
        create: bool = True,
        read_only: bool = False,
        connect_timeout: float = 5.0,
        lock_timeout: float = 30.0,
    ) -> None:
        conninfo, url_schema = split_schema(url)
        self.schema = s = identifier(schema or url_schema or "rota")
        self.clock = clock or SystemClock()
        self.read_only = read_only
        self.last_refusal: str | None = None
        self._lock = threading.RLock()
        self._generations: dict[str, int] = {}
        self._conninfo, self._connect_timeout = conninfo, connect_timeout
        self._lock_timeout = lock_timeout
        self._session: psycopg.Connection[Any] | None = None
        self._closed = False
        self._writer_held = self._writer_lost = False
        self._meta_table = f'"{s}".{META_TABLE}'
        self._row_tables = {name: f'"{s}".{table}' for name, table in PG_ROW_TABLES.items()}
        try:
            if create and not read_only and not self.exists():
                self._create()
        except BaseException:
            self.close()
            raise

    @property
    def where(self) -> str:
        return f"PostgreSQL schema {self.schema!r}"

    # -- the connection -----------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise ProjectionStoreError(f"the projection store in {self.where} is closed")
        conn = self._session
        if conn is None or conn.closed or conn.broken:
            conn = self._session = self._connect()
        return conn

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            timeout = max(2, round(self._connect_timeout))
            conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=timeout)
            ms = max(1, round(self._lock_timeout * 1000))
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false), "
                "set_config('idle_in_transaction_session_timeout', %s, false), "
                "set_config('synchronous_commit', 'off', false), "
                "set_config('default_transaction_read_only', %s, false)",
                (f"{ms}ms", f"{max(1000, 2 * ms)}ms", "on" if self.read_only else "off"),
            )
            why = "" if self.read_only else session_check(conn)  # a demoted node: not here
            if why:
                conn.close()
                raise ProjectionStoreError(f"the projection store in {self.where}: {why}")
        except psycopg.Error as exc:
            raise ProjectionStoreError(
                f"cannot connect to the projection store in {self.where}: {exc}"
            ) from exc
        if self._writer_held and not self._lock_writer(conn):
            # The session that held the lock died and another process took it meanwhile.
            self._writer_held, self._writer_lost = False, True
        return conn

    def _run(self, body: Callable[[psycopg.Connection[Any]], T], what: str) -> T:
        """Run `body` on the connection (under the store's lock), once more on a new
        connection if the first was lost; driver errors become `ProjectionStoreError`."""
        with self._lock:
            for attempt in (1, 2):
                conn = self._connection()
                try:
                    return body(conn)
                except psycopg.OperationalError as exc:
                    if attempt == 1 and conn.broken:
                        continue
                    raise ProjectionStoreError(f"cannot {what} {self.where}: {exc}") from exc
                except psycopg.Error as exc:
                    raise ProjectionStoreError(f"cannot {what} {self.where}: {exc}") from exc
            raise AssertionError("unreachable")

    def _create(self) -> None:
        def create(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                key = (WRITE_KEY, self.schema)
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", key)
                conn.execute(ddl(self.schema).encode())

        self._run(create, "create the projection tables in")

    def exists(self) -> bool:
        """Whether the projection tables are there (nothing is created to find out)."""
        names = [
            f'"{self.schema}".{META_TABLE}',
            *(f'"{self.schema}".{t}' for t in PG_ROW_TABLES.values()),
        ]

        def body(conn: psycopg.Connection[Any]) -> bool:
            found = conn.execute(
                "SELECT " + ", ".join(["to_regclass(%s)"] * len(names)), names
            ).fetchone()
            return found is not None and None not in found

        return self._run(body, "read")

    # -- transactions -------------------------------------------------------------------

    def _read(self, body: Callable[[Any], T]) -> T:
        def run(conn: psycopg.Connection[Any]) -> T:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                return body(conn)  # inside this store's own write: read in it
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try:
                return body(conn)
            finally:
                if not conn.broken:
                    conn.execute("ROLLBACK")  # it wrote nothing

        return self._run(run, "read the projection store in")

    def _write(self, body: Callable[[Any], T]) -> T:
        if self.read_only:
            raise ProjectionStoreError(f"{self.where} is open read-only", code=PortCode.READ_ONLY)
        if self._writer_lost:
            raise ProjectionStoreError(
                f"the writer lock of the projections in {self.where} was lost with its "
                "connection and another process keeps them now: reopen the store",
                code=PortCode.WRITER_LOCK_LOST,
            )
        with self._lock:
            conn = self._run(self._begin_write, "begin a write to")
            try:
                result = body(conn)
                conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback(conn)
                if classify(exc) is not None:  # its server is gone or read-only: a new one
                    conn.close()
                if isinstance(exc, psycopg.Error):
                    raise ProjectionStoreError(
                        f"a write to the projection store in {self.where} failed: {exc}"
                    ) from exc
                raise
            return result

    def _begin_write(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        """BEGIN and wait for the schema's projection write lock (nothing written yet, so
        `_run` may retry it on a new connection)."""
        try:
            conn.execute("BEGIN")
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))",
                (WRITE_KEY, self.schema),
            )
        except BaseException:
            self._rollback(conn)
            raise
        return conn

    @staticmethod
    def _rollback(conn: psycopg.Connection[Any]) -> None:
        if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")

    # -- reading ------------------------------------------------------------------------

    def _table(self, name: str) -> str:
        table = self._row_tables.get(name)
        if table is None:
            raise ProjectionStoreError(
                f"no stored projection is named {name!r}", code=EntryCode.USAGE
            )
        return table

    def _read_meta(self, conn: Any, name: str) -> ProjectionMeta | None:
        row = conn.execute(
            f"SELECT {META_COLUMNS} FROM {self._meta_table} WHERE name = %s", (name,)
        ).fetchone()
        return None if row is None else ProjectionMeta(*row)

    def metas(self) -> dict[str, ProjectionMeta]:
        def body(conn: Any) -> dict[str, ProjectionMeta]:
            found = conn.execute(f"SELECT {META_COLUMNS} FROM {self._meta_table} ORDER BY name")
            return {row[0]: ProjectionMeta(*row) for row in found}

        return self._read(body)

    def row(self, name: str, key: str) -> bytes | None:
        """One stored row's value."""
        sql = f"SELECT value FROM {self._table(name)} WHERE key = %s"

        def body(conn: psycopg.Connection[Any]) -> bytes | None:
            found = conn.cursor(binary=True).execute(sql, (key,)).fetchone()
            return None if found is None else bytes(found[0])

        return self._run(body, "read")

    def rows(self, name: str) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
        """A projection's meta and every row, read in one snapshot (in no set order)."""
        sql = f"SELECT key, value FROM {self._table(name)}"

        def body(conn: Any) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
            rows: list[tuple[str, bytes]] = conn.cursor(binary=True).execute(sql).fetchall()
            return self._read_meta(conn, name), rows

        return self._read(body)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside the block see one snapshot (a read-only REPEATABLE READ transaction
        on the store's session, under the lock)."""
        with self._lock:
            conn = self._connection()
            if conn.info.transaction_status != TransactionStatus.IDLE:
                yield  # inside this store's own transaction: read in it
                return
            try:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            except psycopg.Error as exc:
                raise ProjectionStoreError(f"cannot read {self.where}: {exc}") from exc
            try:
                yield
            finally:
                if not conn.broken:
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("ROLLBACK")  # it wrote nothing

    def sorted_rows(self, name: str) -> Iterator[tuple[str, bytes]]:
        """A projection's rows in key order (`COLLATE "C"`: byte order, the primary key's),
        read as iterated through a server-side cursor, 2,000 rows a fetch."""
        sql = f'SELECT key, value FROM {self._table(name)} ORDER BY key COLLATE "C"'
        with self.snapshot():
            # Two streams of one table may be open at once (a comparison that decodes the
            # rows it walks): each cursor has a name of its own.
            cursor_name = f"rota_rows_{next(_cursors)}"
            try:
                with self._connection().cursor(cursor_name, binary=True) as cursor:
                    cursor.itersize = 2000
                    cursor.execute(sql)
                    for key, value in cursor:
                        yield key, bytes(value)
            except psycopg.Error as exc:
                raise ProjectionStoreError(f"cannot read {self.where}: {exc}") from exc

    # Key ranges compare bytes (`COLLATE "C"`), as SQLite's do; the key column is created
    # with that collation, so its primary-key index serves them.

    def _rows_outside(self, conn: Any, name: str, low: str, high: str) -> list[tuple[str, bytes]]:
        sql = (
            f"SELECT key, value FROM {self._table(name)} "
            'WHERE key COLLATE "C" < %s OR key COLLATE "C" >= %s'
        )
        return fetch_rows(conn, sql, (low, high))

    def _rows_between(
        self, conn: Any, name: str, low: str, high: str | None
    ) -> list[tuple[str, bytes]]:
        sql = f'SELECT key, value FROM {self._table(name)} WHERE key COLLATE "C" >= %s'
        if high is None:
            return fetch_rows(conn, sql, (low,))
        return fetch_rows(conn, sql + ' AND key COLLATE "C" < %s', (low, high))

    def _rows_in(self, conn: Any, name: str, keys: list[str]) -> list[tuple[str, bytes]]:
        sql = f"SELECT key, value FROM {self._table(name)} WHERE key = ANY(%s)"
        return fetch_rows(conn, sql, (keys,))

    def _rows_after(
        self, conn: Any, name: str, low: str, high: str, limit: int
    ) -> list[tuple[str, bytes]]:
        sql = (
            f"SELECT key, value FROM {self._table(name)} "
            'WHERE key COLLATE "C" > %s AND key COLLATE "C" < %s '
            'ORDER BY key COLLATE "C" LIMIT %s'
        )
        return fetch_rows(conn, sql, (low, high, limit))

    def table_counts(self) -> dict[str, int]:
        """Rows per projection table, every row read (doctor's scan of the tables)."""
        return self._read(lambda conn: count_rows(conn, self._meta_table, self._row_tables))

    # -- writing ------------------------------------------------------------------------

    def _clear(self, conn: Any, name: str) -> None:
        conn.execute(f"DELETE FROM {self._table(name)}")

    def _write_rows(
        self, conn: Any, projection: Persisted, keys: Iterable[str], *, cleared: bool
    ) -> int:
        return write_rows(conn, self._table(projection.name), projection, keys, cleared=cleared)

    def _put_meta(self, conn: Any, meta: ProjectionMeta) -> int:
        return put_meta(conn, self._meta_table, meta)

    def _delete_meta(self, conn: Any, name: str) -> None:
        conn.execute(f"DELETE FROM {self._meta_table} WHERE name = %s", (name,))

    # -- the writer lock ----------------------------------------------------------------

    def writer_lock(self) -> AdvisoryWriterLock:
        """The session advisory lock the one process keeping these projections holds."""
        return AdvisoryWriterLock(self)

    def _lock_writer(self, conn: psycopg.Connection[Any]) -> bool:
        found = conn.execute(
            "SELECT pg_try_advisory_lock(hashtext(%s), hashtext(%s))", (WRITER_KEY, self.schema)
        ).fetchone()
        return bool(found and found[0])

    def _take_writer_lock(self) -> bool:
        with self._lock:
            if self._writer_held:
                return True
            self._writer_held = self._run(self._lock_writer, "lock")
            return self._writer_held

    def _release_writer_lock(self) -> None:
        with self._lock:
            if not self._writer_held:
                return
            self._writer_held = False
            conn = self._session
            if conn is not None and not conn.closed and not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    conn.execute(
                        "SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))",
                        (WRITER_KEY, self.schema),
                    )

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conn, self._session = self._session, None
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()  # ends the session: its advisory locks go with it

    def __enter__(self) -> PostgresProjectionStore:
        return self


__all__ = ["AdvisoryWriterLock", "PostgresProjectionStore"]
