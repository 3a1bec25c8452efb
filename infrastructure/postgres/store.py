"""The shared store: the log in PostgreSQL through psycopg 3 and a connection pool.

`postgresql://user@host/db?schema=rota` (the `schema` parameter picks the schema, default `rota`;
see `names`). The schema holds `events`, `head` (one row: last position and hash),
`merkle_nodes` (`tree`), `rota_meta` and `tracking` (`log_sql`; created or upgraded by
`log_setup`). Every append locks the `head` row and keeps the lock until it commits, so
appends commit in position order and a reader that has seen position N has seen every event at or
below N (`transactions`, `appends`); reads take no locks (`reads`). Time is the DATABASE's clock,
so hosts with skewed clocks agree (`database_clock`; the `clock` argument is ignored). Connections,
their session settings and the retry of transient failures are `connections`'.

Retries: a write is retried as `connections` says; a retry after a lost commit acknowledgement (the
connection dropped during COMMIT) runs the body again with `Tx.retrying` set, and an append then
finds its delivery identities recorded (`appends`). Tests simulate a lost acknowledgement with the
`_fault_after_commit` hook (right after COMMIT).

Wake-ups: appends `pg_notify` the schema's channel in their transaction; `wait_for_commit` LISTENs
on a dedicated connection (started on first use; its thread sleeps on the socket, no timer, with
TCP keepalives), and also polls `max(position)` in case a NOTIFY is lost: every `poll_interval`
seconds (10) once the connection has received a notification (its own probe, sent right after
LISTEN), every second until then (behind a transaction-pooling PgBouncer none arrives), fast while
no listener runs; it is woken at once by local commits. `wake_waiters` ends the waits in progress.
`nothing_after` trusts the commit generation only while the listener is proven, so an idle pass
reads the log once, not once per step.

Like every store, it is safe to share between threads and not to use in a child after `fork()`
(open it again there; closing it in the child leaves the parent's sockets alone).

`synchronous` (the SQLite setting, accepted so one configuration serves both stores): `normal` sets
`synchronous_commit=off` (a server crash may lose the last acknowledged commits, never corrupt the
log); `full` and `extra` keep the server's setting (`on` unless a DBA chose otherwise, e.g.
`remote_apply` for synchronous replication)."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg

from rota.application.errors import PortCode, StoreError, StoreIntegrityError
from rota.application.ports import (
    AppendResult,
    Clock,
    EventStore,
    LogHead,
    NewEvent,
    RawRecord,
    RecordedEvent,
    TreeHead,
)
from rota.infrastructure.codec import DEFAULT_CODEC, Codec
from rota.infrastructure.log_rows import IMPORTING, Row
from rota.infrastructure.postgres.appends import LogAppends
from rota.infrastructure.postgres.connections import SYNCHRONOUS_COMMIT, TRANSIENT, LogConnections
from rota.infrastructure.postgres.database_clock import DatabaseClock
from rota.infrastructure.postgres.log_setup import open_schema
from rota.infrastructure.postgres.log_sql import LogStatements, mark_import_in
from rota.infrastructure.postgres.names import identifier, split_schema
from rota.infrastructure.postgres.reads import LogReads
from rota.infrastructure.postgres.transactions import Tx
from rota.infrastructure.postgres.tree import PgNodes
from rota.infrastructure.tree_reads import TreeReads

log = logging.getLogger(__name__)
T = TypeVar("T")
UNPROVEN_POLL = 1.0  # a waiter's poll while LISTEN has not shown it delivers (seconds)


class PostgresStore(EventStore):
    """The log in one PostgreSQL schema; see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        schema: str = "rota",
        clock: Clock | None = None,
        codec: Codec = DEFAULT_CODEC,
        pool_min: int = 1,
        pool_max: int = 8,
        lock_timeout: float = 5.0,
        max_retries: int = 5,
        connect_timeout: float = 5.0,
        poll_interval: float = 10.0,
        clock_refresh: float = 0.5,
        synchronous: str | None = None,
        create: bool = True,
    ) -> None:
        conninfo, url_schema = split_schema(url)
        self.schema = s = identifier(url_schema or schema)
        if synchronous not in (None, *SYNCHRONOUS_COMMIT):
            raise StoreError(
                f"synchronous={synchronous!r}: use normal, full or extra",
                code=PortCode.INVALID_SETTING,
            )
        add = "" if url_schema or "://" not in url else f"{'&' if '?' in url else '?'}schema={s}"
        self.url = url + add  # what another process passes to `open_store` (incl. credentials)
        self.clock = clock  # not used: the database's clock is the store's clock
        self.codec, self.lock_timeout, self.max_retries = codec, lock_timeout, max_retries
        self.connect_timeout, self.poll_interval = connect_timeout, poll_interval
        self.clock_refresh = clock_refresh
        self._fault_after_commit: Callable[[psycopg.Connection[Any]], None] | None = None  # tests
        self._conninfo, self._channel = conninfo, f"rota_{s}"[:63]
        self._listener_lock = threading.Lock()
        self._commit, self._generation, self._interrupts = threading.Condition(), 0, 0
        self._closing = os.pipe()  # written on close: ends the listener's sleep
        self._listener: threading.Thread | None = None
        self._listening, self._listen_retry_at = threading.Event(), 0.0
        # The LISTEN connection has received a notification (its own probe at least): it
        # works, so a waiter may poll slowly and `nothing_after` may trust the generation.
        # (Behind a transaction-pooling PgBouncer LISTEN succeeds but nothing arrives.)
        self._proven = threading.Event()
        # (generation, position): a read found nothing after position (`nothing_after`)
        self._quiet: tuple[int, int] | None = None
        self._sql = LogStatements(s)
        self.events_table = self._sql.events_table
        self._db = LogConnections(
            conninfo,
            schema=s,
            pool_min=pool_min,
            pool_max=pool_max,
            lock_timeout=lock_timeout,
            max_retries=max_retries,
            connect_timeout=connect_timeout,
            synchronous_commit=SYNCHRONOUS_COMMIT.get(synchronous or ""),
        )
        self.metrics = self._db.metrics
        self._clock = DatabaseClock(
            lambda: self._query("SELECT clock_timestamp()")[0][0], clock_refresh
        )
        self._reads = LogReads(self._query, codec, self.events_table)
        self._appends = LogAppends(
            self.write, self._sql, self._channel, codec, self._reads.decode_rows, self._db.count
        )
        self._create = create
        self._db.open(self._create_schema)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._db.query(sql, params)

    def _create_schema(self) -> None:
        open_schema(self, create=self._create)

    def _meta(self, key: str) -> str | None:
        rows = self._query(f'SELECT value FROM "{self.schema}".rota_meta WHERE key = %s', (key,))
        return str(rows[0][0]) if rows else None

    @property
    def store_id(self) -> str:
        return self._meta("store_id") or ""  # written with the schema

    def unfinished_import(self) -> str | None:
        return self._meta(IMPORTING)

    def mark_import(self, marker: str | None) -> None:
        self.write(lambda tx: mark_import_in(tx.cursor, self.schema, marker))

    # -- writing ---------------------------------------------------------------------

    def write(
        self, body: Callable[[Tx], T], *, lock: bool = False, with_lock: Sequence[str] = ()
    ) -> T:
        """Run `body` in one transaction, retried on transient failures (see the docstring).

        With `lock`, the head row is locked as the transaction begins (`Tx.head`), and the
        `with_lock` queries run right after it, in the same round trip (`Tx.prefetched`).
        """
        attempt, retrying = 0, False
        while True:
            committing = False
            try:
                with self._db.connection() as conn:
                    tx = Tx(conn.cursor(), retrying, self._sql.lock, self._clock.observe)
                    if lock:
                        tx.head(begin=True, also=with_lock)
                    else:
                        conn.execute("BEGIN")
                    result = body(tx)
                    committing = True
                    tx.commit()
                    if self._fault_after_commit is not None:
                        self._fault_after_commit(conn)
            except TRANSIENT as exc:
                retrying = retrying or committing
                attempt += 1
                self._db.backoff(attempt, exc)
                continue
            except psycopg.IntegrityError as exc:
                raise StoreIntegrityError(f"the log refused a write: {exc}") from exc
            except psycopg.Error as exc:
                raise StoreError(f"a write to schema {self.schema!r} failed: {exc}") from exc
            if tx.wrote:
                self._wake()
            return result

    def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int] | None = None
    ) -> AppendResult:
        return self._appends.append(events, expected)

    def insert_rows(
        self, tx: Tx, rows: Sequence[Row], *, defer: bool = False
    ) -> list[tuple[int, Row, str]]:
        """Chain and insert rows whose versions are set, under the head lock; inside `write`.

        With `defer`, the INSERT is sent with the COMMIT (one round trip less).
        """
        return self._appends.insert_rows(tx, rows, defer=defer)

    def append_raw(self, records: Sequence[RawRecord]) -> None:
        """Import rows exactly as recorded elsewhere; see `EventStore.append_raw` and
        `appends` (under the head lock, in one transaction)."""
        self._appends.append_raw(records)

    def rewrite_payloads(self, rows: Sequence[tuple[int, bytes]]) -> int:
        update = (
            f'UPDATE "{self.schema}".events SET data = %s, data_bytes = NULL WHERE position = %s'
        )
        params = [(payload.decode(), position) for position, payload in rows]

        def body(tx: Tx) -> int:
            tx.cursor.executemany(update, params)
            return len(params)

        return self.write(body)

    # -- reading ---------------------------------------------------------------------

    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        seen = self._commits_seen()
        events = self._reads.read(after, limit)
        if not events and seen is not None:
            self._quiet = (seen, after)  # nothing after `after` as of `seen`
        return events

    def _commits_seen(self) -> int | None:
        """The commit generation while a LISTEN connection is live (every commit of the
        schema notifies it, and every local commit bumps it), else None: unknown."""
        with self._commit:
            return self._generation if self._proven.is_set() else None

    def nothing_after(self, position: int) -> bool:
        """True when a read found nothing after `position` and, the LISTEN connection live
        throughout, no commit was notified since (nor made here). A commit's NOTIFY can
        arrive a moment after the commit is visible: a writer that decides in that moment
        decides as if it had read just before the commit, which its expected versions
        and fences refuse (and `Transactions.transact` then reads before deciding again)."""
        seen = self._commits_seen()
        return seen is not None and self._quiet == (seen, position)

    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        return self._reads.read_stream(stream, after)

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        return self._reads.read_streams(streams)

    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        return self._reads.find_delivery(delivery_id)

    def stream_version(self, stream: str) -> int:
        return self._reads.stream_version(stream)

    def read_prefix(
        self, prefix: str, after: int = 0, limit: int = 1000, upto: int | None = None
    ) -> list[RecordedEvent]:
        return self._reads.read_prefix(prefix, after, limit, upto)

    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        return self._reads.read_raw(after, limit)

    def head(self) -> LogHead:
        return self._reads.head()

    def head_position(self) -> int:
        return self._reads.head_position()

    def _tree(self) -> TreeReads:
        return TreeReads(PgNodes(self.schema, self._query), self.head_position)

    def tree_head(self, size: int | None = None) -> TreeHead:
        return self._tree().tree_head(size)

    def inclusion_path(self, position: int, size: int) -> list[bytes]:
        return self._tree().inclusion_path(position, size)

    def consistency_path(self, old_size: int, new_size: int) -> list[bytes]:
        return self._tree().consistency_path(old_size, new_size)

    def tree_nodes(self, level: int, after: int = -1, limit: int = 1000) -> list[tuple[int, bytes]]:
        return PgNodes(self.schema, self._query).level(level, after, limit)

    def now(self) -> datetime:
        """The database's clock (see `database_clock`)."""
        return self._clock.now()

    # -- waiting for commits ---------------------------------------------------------

    def _wake(self) -> None:
        with self._commit:
            self._generation += 1
            self._commit.notify_all()

    def _listen(self) -> None:
        """Start the LISTEN thread unless it runs (or failed less than 5 s ago)."""
        with self._listener_lock:
            if self._listening.is_set() or time.monotonic() < self._listen_retry_at:
                return
            try:
                timeout = max(2, round(self.connect_timeout))
                conn = psycopg.connect(
                    self._conninfo,
                    autocommit=True,
                    connect_timeout=timeout,
                    # A connection that dies without a sign (a dropped route) ends in
                    # about 25 s, and the waiters poll fast again (`_listen_loop`).
                    keepalives=1,
                    keepalives_idle=10,
                    keepalives_interval=5,
                    keepalives_count=3,
                )
                conn.execute(f'LISTEN "{self._channel}"')
            except psycopg.Error:
                self._listen_retry_at = time.monotonic() + 5.0
                return
            self._listening.set()
            name = f"rota-listen-{self.schema}"
            self._listener = threading.Thread(target=self._listen_loop, args=(conn,), name=name)
            self._listener.daemon = True
            self._listener.start()
            # A probe from another session proves notifications arrive (`_proven`, set by
            # the loop); psycopg would consume one sent on the LISTEN connection itself.
            with contextlib.suppress(psycopg.Error, StoreError):
                self._query("SELECT pg_notify(%s, 'listening')", (self._channel,))

    def _listen_loop(self, conn: psycopg.Connection[Any]) -> None:
        """Sleep on the LISTEN connection's socket (and the close pipe) until a NOTIFY
        arrives; wake the waiters once per burst. No timer: an idle store sleeps."""
        pgconn = conn.pgconn
        try:
            while True:
                ready, _, _ = select.select([pgconn.socket, self._closing[0]], [], [], 60.0)
                if self._db.closed:
                    break
                if not ready:
                    conn.execute("SELECT 1")  # a quiet minute: check the connection lives
                    continue
                pgconn.consume_input()
                woke = False
                while pgconn.notifies() is not None:
                    woke = True
                if woke:
                    self._proven.set()
                    self._wake()
                elif pgconn.status != psycopg.pq.ConnStatus.OK:
                    raise psycopg.OperationalError("the LISTEN connection was lost")
        except (psycopg.Error, OSError):
            self._listen_retry_at = time.monotonic() + 1.0
        finally:
            self._proven.clear()
            self._listening.clear()
            with contextlib.suppress(psycopg.Error):
                conn.close()
            self._wake()  # waiters fall back to polling until a listener runs again

    def wake_waiters(self) -> None:
        with self._commit:
            self._interrupts += 1
            self._commit.notify_all()

    def wait_for_commit(self, after: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        self._listen()
        fallback = 0.005
        with self._commit:
            interrupts = self._interrupts
        while True:
            with self._commit:
                generation = self._generation
            if self.head_position() > after:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._proven.is_set():
                step = self.poll_interval
            elif self._listening.is_set():  # no notification seen yet: LISTEN may not work
                step = min(self.poll_interval, UNPROVEN_POLL)
            else:
                step, fallback = fallback, min(fallback * 2, 0.1)
            with self._commit:
                if self._interrupts != interrupts:
                    return False
                if self._generation == generation:
                    self._commit.wait(min(step, remaining))
                if self._interrupts != interrupts:
                    return False

    def close(self) -> None:
        if self._db.closed:
            return
        self._db.closed = True
        self.wake_waiters()
        self._wake()
        if self._db.forked:
            self._close_pipe()
            return  # the parent's sockets: closing them here would break its connections
        with contextlib.suppress(OSError):
            os.write(self._closing[1], b"x")
        listener = self._listener
        if listener is not None and listener is not threading.current_thread():
            listener.join(timeout=2.0)
        self._db.close()
        if listener is None or not listener.is_alive():
            self._close_pipe()

    def _close_pipe(self) -> None:
        for fd in self._closing:
            with contextlib.suppress(OSError):
                os.close(fd)
