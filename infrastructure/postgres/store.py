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
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg

from rota.application.errors import PortCode, StoreError, StoreIntegrityError, StoreUnavailable
from rota.application.ports import (
    AppendResult,
    Clock,
    EventStore,
    LogHead,
    NewEvent,
    RawRecord,
    RecordedEvent,
    StoreState,
    TreeHead,
)
from rota.application.ports.records import WRITABLE
from rota.infrastructure.codec import DEFAULT_CODEC, Codec
from rota.infrastructure.log_rows import IMPORTING, Row
from rota.infrastructure.postgres.appends import LogAppends
from rota.infrastructure.postgres.connections import SYNCHRONOUS_COMMIT, TRANSIENT, LogConnections
from rota.infrastructure.postgres.database_clock import DatabaseClock
from rota.infrastructure.postgres.log_guard import LogGuard
from rota.infrastructure.postgres.log_setup import open_schema
from rota.infrastructure.postgres.log_sql import LogStatements, mark_import_in
from rota.infrastructure.postgres.names import identifier, split_schema
from rota.infrastructure.postgres.node_health import READ_ONLY, classify
from rota.infrastructure.postgres.reads import LogReads
from rota.infrastructure.postgres.transactions import Tx
from rota.infrastructure.postgres.tree import PgNodes
from rota.infrastructure.postgres.wakeups import Wakeups
from rota.infrastructure.tree_reads import TreeReads

log = logging.getLogger(__name__)
T = TypeVar("T")
REPLY_TIMEOUT = 30.0  # seconds a statement may go unanswered before its connection is dropped


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
        reply_timeout: float = REPLY_TIMEOUT,
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
            reply_timeout=reply_timeout,
        )
        self.metrics = self._db.metrics
        self._guard = LogGuard(self.events_table, s)  # the log as this process saw it
        self._db.on_connect = self._guard.check
        self._wakeups = Wakeups(
            conninfo=conninfo,
            channel=self._channel,
            name=s,
            connect_timeout=connect_timeout,
            poll_interval=poll_interval,
            connection_class=self._db.connection_class,
            notify=self._notify,
            head_position=self.head_position,
            closed=lambda: self._db.closed,
        )
        self._db.on_reset = self._wakeups.restart
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

    def _notify(self, payload: str) -> None:
        """NOTIFY the channel from a pooled session (the listener's probe), and check the
        server it reached: a pool left on a read-only node (which takes NOTIFY, and whose
        own listener hears it) is replaced, so an idle process leaves a demoted primary."""
        role = "pg_is_in_recovery(), current_setting('transaction_read_only')"
        rows = self._query(f"SELECT pg_notify(%s, %s), {role}", (self._channel, payload))
        if rows and (rows[0][1] or rows[0][2] == "on"):
            self._db.note(StoreState(READ_ONLY, "the server turned read-only (a demoted primary?)"))
            self._db.reset()

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
        guard = self._guard
        while True:
            committing = False
            try:
                guard.refuse(self._recheck)  # a log that lost events takes no write
                with self._db.connection() as conn:
                    guard.refuse(self._recheck)  # (that connection's check may have found it)
                    tx = Tx(conn.cursor(), retrying, self._sql.lock, self._clock.observe)
                    if lock:
                        with self._db.lock_wait(conn):  # it may wait lock_timeout first
                            position, hash_hex, _ = tx.head(begin=True, also=with_lock)
                        guard.admit(conn, position, hash_hex)
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
                if classify(exc) is not None:  # a read-only or recovering server: retry
                    attempt += 1
                    self._db.backoff(attempt, exc)
                    continue
                raise StoreError(f"a write to schema {self.schema!r} failed: {exc}") from exc
            if self._db.found.code:
                self._db.note(WRITABLE)
            if tx.wrote:
                position, hash_hex, _ = tx.head()
                guard.known.saw(position, hash_hex)
                self._wakeups.wake()
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
        self._guard.refuse(self._recheck)
        seen = self._commits_seen()
        events = self._reads.read(after, limit)
        if not events and seen is not None:
            self._quiet = (seen, after)  # nothing after `after` as of `seen`
        if events:
            self._guard.known.saw(events[-1].position)
        return events

    def _commits_seen(self) -> int | None:
        """The commit generation while a LISTEN connection is live (every commit of the
        schema notifies it, and every local commit bumps it), else None: unknown."""
        wakeups = self._wakeups
        with wakeups.commit:
            return wakeups.generation if wakeups.proven.is_set() else None

    def nothing_after(self, position: int) -> bool:
        """True when a read found nothing after `position` and, the LISTEN connection live
        throughout, no commit was notified since (nor made here). A commit's NOTIFY can
        arrive a moment after the commit is visible: a writer that decides in that moment
        decides as if it had read just before the commit, which its expected versions
        and fences refuse (and `Transactions.transact` then reads before deciding again)."""
        seen = self._commits_seen()
        return seen is not None and self._quiet == (seen, position)

    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        self._guard.refuse(self._recheck)
        return self._reads.read_stream(stream, after)

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        self._guard.refuse(self._recheck)
        return self._reads.read_streams(streams)

    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        self._guard.refuse(self._recheck)
        return self._reads.find_delivery(delivery_id)

    def stream_version(self, stream: str) -> int:
        return self._reads.stream_version(stream)

    def read_prefix(
        self, prefix: str, after: int = 0, limit: int = 1000, upto: int | None = None
    ) -> list[RecordedEvent]:
        self._guard.refuse(self._recheck)
        return self._reads.read_prefix(prefix, after, limit, upto)

    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        rows = self._reads.read_raw(after, limit)
        if rows:
            self._guard.known.saw(rows[-1].position, rows[-1].hash)
        return rows

    def head(self) -> LogHead:
        head = self._reads.head()
        self._guard.known.saw(head.position, head.hash)
        return head

    def head_position(self) -> int:
        position = self._reads.head_position()
        self._guard.known.saw(position)
        return position

    # -- writability and failover ----------------------------------------------------

    def state(self) -> StoreState:
        """What the store last found (no I/O): `log_regressed` while its log lacks what it
        knows, else what its connections found (`LogConnections.found`)."""
        if self._guard.regression is not None:
            return StoreState(PortCode.LOG_REGRESSED, self._guard.reason())
        return self._db.found

    def probe(self) -> StoreState:
        """Ask the server now, on a connection of its own (see `LogConnections.probe`)."""
        self._db.probe(self._guard.check)
        return self.state()

    def known_head(self, position: int, hash_hex: str) -> StoreState:
        """Pin a head recorded outside the database (a checkpoint) and check it now."""
        self._guard.known.pin(position, hash_hex)
        with contextlib.suppress(StoreError):  # unreachable: connections made later check it
            self._recheck()
        return self.state()

    def _recheck(self) -> None:
        try:
            with self._db.connection() as conn:
                self._guard.check(conn)
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"the log of schema {self.schema!r} could not be checked: {exc}"
            ) from exc

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

    # -- waiting for commits (`wakeups`) ---------------------------------------------

    def _wake(self) -> None:
        self._wakeups.wake()

    @property
    def _listening(self) -> threading.Event:
        listening: threading.Event = self._wakeups.listening
        return listening

    @property
    def _proven(self) -> threading.Event:
        proven: threading.Event = self._wakeups.proven
        return proven

    @property
    def _generation(self) -> int:
        return int(self._wakeups.generation)

    def wake_waiters(self) -> None:
        self._wakeups.wake_waiters()

    def wait_for_commit(self, after: int, timeout: float) -> bool:
        return bool(self._wakeups.wait_for_commit(after, timeout))

    def close(self) -> None:
        if self._db.closed:
            return
        self._db.closed = True
        forked = self._db.forked
        self._wakeups.close(forked)
        if forked:
            return  # the parent's sockets: closing them here would break its connections
        self._wakeups.join()
        self._db.close()
