"""The shared store: the log in PostgreSQL through psycopg 3 and a connection pool.

`postgresql://user@host/db?schema=rota` (the `schema` parameter picks the schema, default
`rota`; it is stripped before connecting). The schema holds `events` (the columns of the SQLite
store; rota payloads are text in `data`, eventsourcing payloads bytes in `data_bytes`, and the
chain hashes exactly the stored bytes), `head` (one row: last position and hash), `rota_meta`
and `tracking`. Identifiers are validated (`^[a-z_][a-z0-9_]{0,62}$`); every value is bound.

Order: every append locks the `head` row (`SELECT ... FOR UPDATE`) first and keeps the lock
until it commits, assigning positions head + 1 ... under it. Appends are therefore serialized
and commit in position order: a reader that has seen position N has seen every event at or
below N (no reader can skip an event committed late with a lower position). Reads take no
locks and never block writers. Every pooled connection is set up with `lock_timeout` (the
session-wide equivalent of `SET LOCAL` in each transaction), so a waiting writer surfaces as
`StoreUnavailable` (after the retries below), never as a hang; and with
`idle_in_transaction_session_timeout` at twice that (at least 1 s), so a writer paused
mid-transaction (a stopped process) loses its session and releases the lock instead of
stalling every host. An append takes two round trips: `BEGIN`, the lock and the reads it
decides on (stream versions, recorded delivery identities; run after the lock is granted, so
they see every earlier commit) in one simple-protocol query; then INSERT and COMMIT,
pipelined (see `Tx` for why the first is never a pipeline).

Time: `now()` and `recorded_at` are the DATABASE's clock (`clock_timestamp()`, read after the
head lock is taken, so times follow positions). The `clock` argument is ignored: lease expiry
and due timers, which the scheduler judges by `store.now()`, are judged by one clock for every
host, so hosts with skewed clocks agree. `now()` does not ask the server every time (a
scheduler pass asks for the time once per attempt it launches): it samples the server's clock
at most `clock_refresh` seconds (default 0.5) apart, and on every locked write, and advances
the last sample by the local boot-time clock (`CLOCK_BOOTTIME`: never stepped, counts
suspended time); the host's wall clock is never read. Dated at its receipt, a sample lags the
server by at most the reply's trip, so `now()` never runs ahead of the database (beyond the
two clocks' rate difference over `clock_refresh`, microseconds). `clock_refresh=0` asks every
time.

Retries: serialization failures, deadlocks, lock timeouts and dropped connections are retried
up to `max_retries` times (10 ms doubling, with jitter), each counted in
`metrics["retries"]`; stale expected versions are counted in `metrics["conflicts"]`. A retry
after a lost commit acknowledgement (the connection dropped during COMMIT) runs the append
again: an event with a delivery identity is then found recorded and returned (`written == 0`),
so it is recorded exactly once. An event without one is protected only by expected versions,
which turn the duplicate into `ConcurrencyConflict`; with neither it would be written twice
(and in a partly duplicate append, only the events with an identity are deduplicated), so give
every transition that can be retried a delivery identity. Tests simulate a lost acknowledgement
with the `_fault_after_commit` hook (called with the connection right after COMMIT).

Import: `append_raw` (what `rota import` uses) takes the same head lock, checks that the rows
continue the log (first position head + 1, every hash recomputed from the row and the
previous hash), inserts them with their own positions, times and hashes, and moves the head
row, all in one transaction. Imported times are the source store's: if its clock ran ahead
of the database's, the first events appended afterwards carry earlier times than the last
imported ones (positions, not times, order the log).

Wake-ups: appends `pg_notify` the schema's channel in their transaction; `wait_for_commit`
LISTENs on a dedicated connection (started on first use), and also polls `max(position)` every
`poll_interval` seconds in case a NOTIFY is lost, and is woken at once by local commits.

Like every store, it is safe to share between threads and must not be used in a child process
after `fork()` (open it again there; closing it in the child leaves the parent's sockets alone).

`synchronous` (the SQLite setting, accepted so one configuration serves both stores):
`normal` sets `synchronous_commit=off` (a server crash may lose the last acknowledged
commits, never corrupt the log); `full` and `extra` keep the server's setting (`on` unless a
DBA chose otherwise, e.g. `remote_apply` for synchronous replication).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import msgspec
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from rota.application.errors import (
    ConcurrencyConflict,
    DeliveryConflict,
    ForkedConnection,
    PortCode,
    StoreClosed,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
)
from rota.application.ports import (
    AppendResult,
    Clock,
    EventStore,
    LogHead,
    NewEvent,
    RawRecord,
    RecordedEvent,
)
from rota.application.timestamps import format_timestamp
from rota.infrastructure.chain import GENESIS_HEX, canonical_envelope, check_continuation, link
from rota.infrastructure.codec import DEFAULT_CODEC, Codec
from rota.infrastructure.deliveries import match_deliveries
from rota.infrastructure.log_rows import Row

SCHEMA_VERSION = 1
IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
T = TypeVar("T")
_SYNC = {"normal": "off", "full": None, "extra": None}  # None: keep the server's setting
# Worth another attempt: lost connections, lock timeouts, serialization failures, deadlocks.
_TRANSIENT = (psycopg.OperationalError, pg_errors.IdleInTransactionSessionTimeout)
_EVENT = "position, stream, version, type, type_version, delivery_id, data, data_bytes, recorded_at"
_RAW = f"{_EVENT}, hash"
_LOCK = (  # clock_timestamp() is read once the lock is held, so times follow positions
    'WITH h AS (SELECT position, hash FROM "{s}".head FOR UPDATE) '
    "SELECT position, hash, clock_timestamp() FROM h"
)
_INSERT = (  # the rows (as binary arrays), the new head and the wake-up, in one statement
    'WITH ins AS (INSERT INTO "{s}".events (' + _RAW + ") "
    "SELECT p, st, v, t, tv, d, x, xb, %s, h FROM unnest(%b::bigint[], %b::text[], "
    "%b::bigint[], %b::text[], %b::integer[], %b::text[], %b::text[], %b::bytea[], %b::text[]) "
    "AS u(p, st, v, t, tv, d, x, xb, h)), "
    'upd AS (UPDATE "{s}".head SET position = %s, hash = %s) SELECT pg_notify(%s, %s)'
)
_IMPORT = (  # append_raw: the same, with each row's own recorded_at
    'WITH ins AS (INSERT INTO "{s}".events (' + _RAW + ") "
    "SELECT p, st, v, t, tv, d, x, xb, at, h FROM unnest(%b::bigint[], %b::text[], "
    "%b::bigint[], %b::text[], %b::integer[], %b::text[], %b::text[], %b::bytea[], %b::text[], "
    "%b::text[]) AS u(p, st, v, t, tv, d, x, xb, at, h)), "
    'upd AS (UPDATE "{s}".head SET position = %s, hash = %s) SELECT pg_notify(%s, %s)'
)


def _json_literal(values: list[str]) -> str:
    """Strings as one SQL string literal holding their JSON array (quoted and escaped)."""
    return pg_sql.Literal(_JSON.encode(values).decode()).as_string(None)


_JSON = msgspec.json.Encoder()


def _ticks() -> float:
    """Seconds on a clock that never steps and (on Linux) counts suspended time too."""
    return time.clock_gettime(_TICKS)


_TICKS = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def split_schema(url: str) -> tuple[str, str | None]:
    """The connection URL without its `schema` query parameter (the rest kept verbatim), and it."""
    if "://" not in url:
        return url, None
    parts = urlsplit(url)
    items = [item for item in parts.query.split("&") if item]
    schemas = [unquote(i.partition("=")[2]) for i in items if i.partition("=")[0] == "schema"]
    kept = "&".join(i for i in items if i.partition("=")[0] != "schema")
    return urlunsplit(parts._replace(query=kept)), (schemas[-1] if schemas else None)


def identifier(name: str, what: str = "schema") -> str:
    """`name` if it is a safe SQL identifier (lower-case letters, digits, `_`), else an error."""
    if not IDENTIFIER.match(name):
        raise StoreError(
            f"{what} name {name!r} is not allowed: use ^[a-z_][a-z0-9_]{{0,62}}$",
            code=PortCode.INVALID_IDENTIFIER,
        )
    return name


def _ddl(s: str) -> str:
    return f"""
CREATE SCHEMA IF NOT EXISTS "{s}";
CREATE TABLE IF NOT EXISTS "{s}".events (
    position BIGINT PRIMARY KEY, stream TEXT NOT NULL, version BIGINT NOT NULL,
    type TEXT NOT NULL, type_version INTEGER NOT NULL, delivery_id TEXT UNIQUE,
    data TEXT, data_bytes BYTEA, recorded_at TEXT NOT NULL, hash TEXT NOT NULL,
    UNIQUE (stream, version), CHECK ((data IS NULL) <> (data_bytes IS NULL)));
CREATE TABLE IF NOT EXISTS "{s}".head (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    position BIGINT NOT NULL, hash TEXT NOT NULL);
INSERT INTO "{s}".head VALUES (TRUE, 0, '{GENESIS_HEX}') ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS "{s}".rota_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS "{s}".tracking (
    application_name TEXT PRIMARY KEY, notification_id BIGINT NOT NULL);
"""


Query = tuple[str, Sequence[Any]]


class Tx:
    """One write transaction: its cursor, the log head once locked, whether it wrote.

    `prefetched` holds the rows of the queries `write(..., with_lock=...)` ran right after
    taking the lock (in the same round trip); `deferred` statements are sent with COMMIT.

    The lock's round trip is one simple-protocol query (`BEGIN; lock; reads`), never
    pipeline mode: after a pipeline, the server does not re-arm
    `idle_in_transaction_session_timeout` (seen on PostgreSQL 15 with psycopg 3.3), so a
    writer paused while holding the lock would keep it. Only INSERT + COMMIT, which end the
    transaction, are pipelined.
    """

    def __init__(self, store: PostgresStore, cursor: psycopg.Cursor[Any], retrying: bool) -> None:
        self.store = store
        self.cursor = cursor
        self.retrying = retrying  # an earlier attempt may have committed (ack lost)
        self.wrote = False
        self.prefetched: list[list[Any]] = []
        self.deferred: list[Query] = []
        self._head: tuple[int, str, datetime] | None = None

    def head(self, begin: bool = False, also: Sequence[str] = ()) -> tuple[int, str, datetime]:
        """Lock the head row (once) and return (position, hash, database time after locking).

        With `begin`, the transaction begins first; `also` (statements without parameters:
        values inlined as literals) run after the lock is held, so each reads a snapshot
        taken after the lock was granted; their rows are kept in `prefetched`. All in one
        round trip.
        """
        if self._head is None:
            statements = ["BEGIN"] if begin else []
            statements += [self.store._sql_lock, *also]
            cursor = self.cursor
            cursor.execute("; ".join(statements))
            if begin:
                cursor.nextset()
            row = cursor.fetchone()
            assert row is not None
            self._head = (int(row[0]), str(row[1]), row[2])
            self.store._observe_clock(row[2])
            self.prefetched = []
            for _ in also:
                cursor.nextset()
                self.prefetched.append(cursor.fetchall())
        return self._head

    def commit(self) -> None:
        """Send the deferred statements and COMMIT (one round trip)."""
        conn = self.cursor.connection
        if not self.deferred:
            conn.execute("COMMIT")
            return
        with conn.pipeline():
            for sql, params in self.deferred:
                self.cursor.execute(sql, params)
            self.cursor.execute("COMMIT")


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
        poll_interval: float = 1.0,
        clock_refresh: float = 0.5,
        synchronous: str | None = None,
    ) -> None:
        conninfo, url_schema = split_schema(url)
        self.schema = s = identifier(url_schema or schema)
        if synchronous not in (None, *_SYNC):
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
        self._clock_sample: tuple[float, datetime] | None = None  # (_ticks() at receipt, time)
        self.metrics: dict[str, int] = {"retries": 0, "conflicts": 0, "delivery_conflicts": 0}
        self._fault_after_commit: Callable[[psycopg.Connection[Any]], None] | None = None  # tests
        self._conninfo, self._synchronous = conninfo, _SYNC.get(synchronous or "")
        self._channel, self._pid, self._closed = f"rota_{s}"[:63], os.getpid(), False
        self._metrics_lock, self._listener_lock = threading.Lock(), threading.Lock()
        self._commit, self._generation = threading.Condition(), 0
        self._listener: threading.Thread | None = None
        self._listening, self._listen_retry_at = threading.Event(), 0.0
        self.events_table = f'"{s}".events'
        self._sql_lock = _LOCK.format(s=s)
        self._sql_insert = _INSERT.format(s=s)
        self._sql_import = _IMPORT.format(s=s)
        # Read right after the lock, in its round trip: the values are one JSON literal.
        self._sql_versions = (  # each stream's last version (NULL: none), by the unique index
            f'SELECT u.s, (SELECT version FROM "{s}".events e WHERE e.stream = u.s '
            "ORDER BY version DESC LIMIT 1) FROM json_array_elements_text({}::json) AS u(s)"
        )
        self._sql_deliveries = (
            f'SELECT {_EVENT} FROM "{s}".events '
            "WHERE delivery_id = ANY(ARRAY(SELECT json_array_elements_text({}::json)))"
        )
        timeout = max(2, round(connect_timeout))
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            conninfo, min_size=pool_min, max_size=pool_max, configure=self._configure,
            kwargs={"autocommit": True, "connect_timeout": timeout}, timeout=connect_timeout,
            name=f"rota-{s}", open=False,
        )  # fmt: skip
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
            self._create_schema()
        except BaseException as exc:
            self._pool.close()
            if not isinstance(exc, PoolTimeout):
                raise
            reason = str(exc)
            try:  # the pool only says it timed out: ask the server for the reason
                psycopg.connect(conninfo, connect_timeout=timeout).close()
            except psycopg.Error as error:
                reason = str(error).strip()
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL (schema {s!r}): {reason}"
            ) from exc

    # -- connections -----------------------------------------------------------------

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        ms = max(1, round(self.lock_timeout * 1000))
        conn.execute(
            "SELECT set_config('lock_timeout', %s, false), set_config('TimeZone', 'UTC', false), "
            "set_config('idle_in_transaction_session_timeout', %s, false)",
            (f"{ms}ms", f"{max(1000, 2 * ms)}ms"),
        )
        if self._synchronous is not None:
            conn.execute("SELECT set_config('synchronous_commit', %s, false)", (self._synchronous,))

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed(f"the PostgreSQL store (schema {self.schema!r}) is closed")
        if os.getpid() != self._pid:
            raise ForkedConnection(
                "this store was opened in another process; a PostgreSQL connection must not "
                "cross fork(): open the store again in the child"
            )

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        self._check()
        try:
            conn = self._pool.getconn()
        except PoolClosed as exc:
            raise StoreClosed(f"the PostgreSQL store (schema {self.schema!r}) is closed") from exc
        except PoolTimeout as exc:
            raise StoreUnavailable(
                f"no PostgreSQL connection within {self.connect_timeout}s: {exc}"
            ) from exc
        try:
            yield conn
        except BaseException:
            if conn.broken:
                with contextlib.suppress(Exception):
                    self._pool.check()  # drop the pool's other dead connections too
            elif conn.info.transaction_status != TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
            raise
        finally:
            with contextlib.suppress(Exception):
                self._pool.putconn(conn)

    def _count(self, key: str) -> None:
        with self._metrics_lock:
            self.metrics[key] = self.metrics.get(key, 0) + 1

    def _backoff(self, attempt: int, exc: psycopg.Error) -> None:
        if attempt > self.max_retries:
            if isinstance(exc, pg_errors.LockNotAvailable):
                raise StoreUnavailable(
                    f"the log's write lock (schema {self.schema!r}) stayed held by another "
                    f"transaction beyond lock_timeout={self.lock_timeout}s on {attempt} attempts; "
                    "a writer may be stuck (see pg_stat_activity)"
                ) from exc
            raise StoreUnavailable(
                f"the PostgreSQL store (schema {self.schema!r}) failed {attempt} attempts: {exc}"
            ) from exc
        self._count("retries")
        time.sleep(0.01 * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))

    def _create_schema(self) -> None:
        s = self.schema
        names = tuple(f'"{s}".{t}' for t in ("events", "head", "rota_meta", "tracking"))
        if None in self._query("SELECT " + ", ".join(["to_regclass(%s)"] * 4), names)[0]:

            def create(tx: Tx) -> None:
                tx.cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"rota {s}",))
                tx.cursor.execute(_ddl(s))
                tx.cursor.execute(
                    f'INSERT INTO "{s}".rota_meta VALUES (%s, %s), (%s, %s) ON CONFLICT DO NOTHING',
                    ("schema_version", str(SCHEMA_VERSION), "store_id", str(uuid.uuid4())),
                )

            self.write(create)
        version = int(self._meta("schema_version"))
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"schema {s!r} has store schema version {version}, newer than this rota's "
                f"{SCHEMA_VERSION}: upgrade rota to open it",
                code=PortCode.SCHEMA_TOO_NEW,
            )

    def _meta(self, key: str) -> str:
        return str(
            self._query(f'SELECT value FROM "{self.schema}".rota_meta WHERE key = %s', (key,))[0][0]
        )

    @property
    def store_id(self) -> str:
        return self._meta("store_id")

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
                with self._connection() as conn:
                    tx = Tx(self, conn.cursor(), retrying)
                    if lock:
                        tx.head(begin=True, also=with_lock)
                    else:
                        conn.execute("BEGIN")
                    result = body(tx)
                    committing = True
                    tx.commit()
                    if self._fault_after_commit is not None:
                        self._fault_after_commit(conn)
            except _TRANSIENT as exc:
                retrying = retrying or committing
                attempt += 1
                self._backoff(attempt, exc)
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
        wanted = dict(expected or {})
        prepared: list[tuple[NewEvent, Row]] = []
        for new in events:
            tag, version, payload = self.codec.encode(new.event)
            prepared.append(
                (new, Row(new.stream, None, tag, version, new.delivery_id, payload.decode()))
            )
        if not prepared and not wanted:
            return AppendResult([], 0)
        # Read under the lock, in the round trip that takes it: the recorded delivery
        # identities and the version of every stream the append may touch.
        ids = list({row.delivery_id for _, row in prepared if row.delivery_id is not None})
        streams = list(set(wanted) | {row.stream for _, row in prepared})
        reads = [self._sql_versions.format(_json_literal(streams))]
        if ids:
            reads.append(self._sql_deliveries.format(_json_literal(ids)))
        try:
            recorded, written = self.write(
                lambda tx: self._append_in(tx, prepared, wanted), lock=True, with_lock=reads
            )
        except ConcurrencyConflict:
            self._count("conflicts")
            raise
        except DeliveryConflict:
            self._count("delivery_conflicts")
            raise
        # New events come back decoded from what was stored; decoded after the commit, so
        # the log's lock is not held for it.
        decode = self.codec.decode
        out: list[RecordedEvent] = []
        for entry in recorded:
            if isinstance(entry, RecordedEvent):
                out.append(entry)
                continue
            position, row, at = entry
            event = decode(row.type, row.type_version, row.data, position)
            out.append(
                RecordedEvent(position, row.stream, row.version or 0, row.delivery_id, at, event)
            )
        return AppendResult(out, written)

    def _append_in(
        self, tx: Tx, prepared: list[tuple[NewEvent, Row]], expected: dict[str, int]
    ) -> tuple[list[RecordedEvent | tuple[int, Row, str]], int]:
        versions = {str(stream): int(version or 0) for stream, version in tx.prefetched[0]}
        found = {r[5]: r for r in tx.prefetched[1]} if len(tx.prefetched) > 1 else {}
        deliveries = match_deliveries(
            [new for new, _ in prepared],
            lambda d: self._decode_rows([found[d]])[0] if d in found else None,
        )
        duplicates = deliveries.all_recorded()
        if duplicates is not None:
            return [*duplicates], 0

        for stream, want in expected.items():
            if versions[stream] != want:
                raise ConcurrencyConflict(stream, want, versions[stream])
        fresh = [r for i, (_, r) in enumerate(prepared) if deliveries.is_new(i)]
        for row in fresh:
            row.version = versions[row.stream] = versions[row.stream] + 1
        return deliveries.merge(self.insert_rows(tx, fresh, defer=True)), len(fresh)

    def insert_rows(
        self, tx: Tx, rows: Sequence[Row], *, defer: bool = False
    ) -> list[tuple[int, Row, str]]:
        """Chain and insert rows whose versions are set, under the head lock; inside `write`.

        With `defer`, the INSERT is sent with the COMMIT (one round trip less).
        """
        if not rows:
            return []
        position, head_hash, when = tx.head()
        previous = bytes.fromhex(head_hash)
        recorded_at = format_timestamp(when)
        columns: list[list[Any]] = [[] for _ in range(9)]
        written: list[tuple[int, Row, str]] = []
        for row in rows:
            position += 1
            assert row.version is not None
            key = (position, row.stream, row.version, row.type, row.type_version, row.delivery_id)
            previous = link(previous, canonical_envelope(*key, recorded_at, row.data))
            text, blob = (row.data, None) if isinstance(row.data, str) else (None, bytes(row.data))
            for column, value in zip(columns, (*key, text, blob, previous.hex()), strict=True):
                column.append(value)
            written.append((position, row, recorded_at))
        params = (recorded_at, *columns, position, previous.hex(), self._channel, str(position))
        if defer:
            tx.deferred.append((self._sql_insert, params))
        else:
            tx.cursor.execute(self._sql_insert, params)
        tx._head = (position, previous.hex(), when)
        tx.wrote = True
        return written

    def append_raw(self, records: Sequence[RawRecord]) -> None:
        """Import rows exactly as recorded elsewhere; see `EventStore.append_raw`.

        Under the head lock, like `append`: the first position must be head + 1 and its hash
        must link to the head's hash; every hash is recomputed; one transaction, which also
        moves the head row and wakes waiters. A retry after a lost commit acknowledgement
        that finds these very rows recorded (the head is the last record) is a no-op.
        """
        if records:
            rows = list(records)
            self.write(lambda tx: self._append_raw_in(tx, rows), lock=True)

    def _append_raw_in(self, tx: Tx, records: list[RawRecord]) -> None:
        position, head_hash, when = tx.head()
        last = records[-1]
        if tx.retrying and (position, head_hash) == (last.position, last.hash):
            return  # an earlier attempt committed these rows; its acknowledgement was lost
        check_continuation(position, head_hash, records)
        columns: list[list[Any]] = [[] for _ in range(10)]
        for record in records:
            key = (
                record.position,
                record.stream,
                record.version,
                record.type,
                record.type_version,
                record.delivery_id,
            )
            data = record.data
            text, blob = (data, None) if isinstance(data, str) else (None, bytes(data))
            values = (*key, text, blob, record.recorded_at, record.hash)
            for column, value in zip(columns, values, strict=True):
                column.append(value)
        position = last.position
        params = (*columns, position, last.hash, self._channel, str(position))
        tx.deferred.append((self._sql_import, params))  # sent with the COMMIT
        tx._head = (position, last.hash, when)
        tx.wrote = True

    # -- reading ---------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        attempt = 0
        while True:
            try:
                with self._connection() as conn:
                    return conn.execute(sql, params).fetchall()
            except _TRANSIENT as exc:
                attempt += 1
                self._backoff(attempt, exc)
            except psycopg.Error as exc:
                raise StoreError(f"a read of schema {self.schema!r} failed: {exc}") from exc

    def _decode_rows(self, rows: list[Any]) -> list[RecordedEvent]:
        codec = self.codec
        current, fast, decode = codec.current, codec._decoder.decode, codec.decode
        out: list[RecordedEvent] = []
        append = out.append
        for p, s, v, t, tv, d, x, xb, at in rows:
            data = x if x is not None else bytes(xb)
            event: Any = None
            if current.get(t) == tv:  # the current schema: one typed decode (as SQLite's)
                try:
                    event = fast(data)
                except Exception:
                    event = None  # let `decode` name the position and the error
                else:
                    if event.__struct_config__.tag != t:
                        event = None
            if event is None:
                event = decode(t, tv, data, p)
            append(RecordedEvent(p, s, v, d, at, event))
        return out

    def _events(self, where: str, params: Sequence[Any]) -> list[RecordedEvent]:
        sql = f"SELECT {_EVENT} FROM {self.events_table} WHERE {where}"
        return self._decode_rows(self._query(sql, params))

    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        return self._events("position > %s ORDER BY position LIMIT %s", (after, limit))

    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        return self._events("stream = %s AND version > %s ORDER BY version", (stream, after))

    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        found = self._events("delivery_id = %s", (delivery_id,))
        return found[0] if found else None

    def stream_version(self, stream: str) -> int:
        sql = f"SELECT max(version) FROM {self.events_table} WHERE stream = %s"
        return int(self._query(sql, (stream,))[0][0] or 0)

    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        sql = f"SELECT {_RAW} FROM {self.events_table} WHERE position > %s ORDER BY position"
        return [
            RawRecord(p, s, v, t, tv, d, x if x is not None else bytes(xb), at, h)
            for p, s, v, t, tv, d, x, xb, at, h in self._query(f"{sql} LIMIT %s", (after, limit))
        ]

    def head(self) -> LogHead:
        sql = f"SELECT position, hash FROM {self.events_table} ORDER BY position DESC LIMIT 1"
        rows = self._query(sql)
        return LogHead(int(rows[0][0]), str(rows[0][1])) if rows else LogHead(0, GENESIS_HEX)

    def head_position(self) -> int:
        return int(self._query(f"SELECT max(position) FROM {self.events_table}")[0][0] or 0)

    def now(self) -> datetime:
        """The database's clock: sampled at most `clock_refresh` seconds ago (every locked
        write samples it too), advanced since by this machine's boot-time clock."""
        sample = self._clock_sample
        ticks = _ticks()
        if sample is None or ticks - sample[0] >= self.clock_refresh:
            when: datetime = self._query("SELECT clock_timestamp()")[0][0]
            return self._observe_clock(when)
        return sample[1] + timedelta(seconds=ticks - sample[0])

    def _observe_clock(self, when: datetime) -> datetime:
        """Take a database time just received as the clock's new sample."""
        when = when.astimezone(UTC)
        # Dated at receipt, the estimate lags the server by at most the reply's trip.
        self._clock_sample = (_ticks(), when)
        return when

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
                conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=timeout)
                conn.execute(f'LISTEN "{self._channel}"')
            except psycopg.Error:
                self._listen_retry_at = time.monotonic() + 5.0
                return
            self._listening.set()
            name = f"rota-listen-{self.schema}"
            self._listener = threading.Thread(target=self._listen_loop, args=(conn,), name=name)
            self._listener.daemon = True
            self._listener.start()

    def _listen_loop(self, conn: psycopg.Connection[Any]) -> None:
        try:
            while not self._closed:
                for _ in conn.notifies(timeout=0.2):
                    self._wake()
        except psycopg.Error:
            self._listen_retry_at = time.monotonic() + 1.0
        finally:
            self._listening.clear()
            with contextlib.suppress(psycopg.Error):
                conn.close()
            self._wake()  # waiters fall back to polling until a listener runs again

    def wait_for_commit(self, after: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        self._listen()
        fallback = 0.005
        while True:
            with self._commit:
                generation = self._generation
            if self.head_position() > after:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._listening.is_set():
                step = self.poll_interval
            else:
                step, fallback = fallback, min(fallback * 2, 0.1)
            with self._commit:
                if self._generation == generation:
                    self._commit.wait(min(step, remaining))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake()
        if os.getpid() != self._pid:
            return  # the parent's sockets: closing them here would break its connections
        listener = self._listener
        if listener is not None and listener is not threading.current_thread():
            listener.join(timeout=2.0)
        self._pool.close(timeout=2.0)
