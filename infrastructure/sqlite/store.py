"""The embedded store: the log in one SQLite file through apsw.

WAL journal, `synchronous=FULL` by default, every write in `BEGIN IMMEDIATE` so that two
processes never interleave a read-then-write. Positions are assigned inside that write lock
as head + 1, so they are gapless and commit-ordered. Readers use their own connection per
thread and never block the writer (WAL).

Durability setting (`synchronous`):
- `full` (default): a commit that returned survives a power cut.
- `normal`: faster; a power cut or OS crash may lose the last acknowledged commits (a process
  crash does not). Only a checkpoint kept outside the store can reveal such a loss, so choose
  it only where losing the last few seconds of decisions is acceptable.
- `extra`: like full, and also syncs the directory on every commit.

Never use the store in a child process after `fork()`: open it again there (executors start
processes with fork+exec, which is safe).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import apsw

from rota.application.errors import (
    ConcurrencyConflict,
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
from rota.infrastructure.chain import (
    GENESIS,
    GENESIS_HEX,
    canonical_envelope,
    check_continuation,
    link,
)
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.codec import DEFAULT_CODEC, Codec
from rota.infrastructure.deliveries import match_deliveries

SCHEMA_VERSION = 1
Synchronous = Literal["full", "normal", "extra"]
T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    position     INTEGER PRIMARY KEY,
    stream       TEXT    NOT NULL,
    version      INTEGER NOT NULL,
    type         TEXT    NOT NULL,
    type_version INTEGER NOT NULL,
    delivery_id  TEXT,
    data         BLOB    NOT NULL,
    recorded_at  TEXT    NOT NULL,
    hash         TEXT    NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_stream_version ON events (stream, version);
CREATE UNIQUE INDEX IF NOT EXISTS events_delivery_id ON events (delivery_id)
    WHERE delivery_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS rota_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tracking (
    application_name TEXT PRIMARY KEY,
    notification_id  INTEGER NOT NULL
);
"""

_COLUMNS = "position, stream, version, type, type_version, delivery_id, data, recorded_at, hash"
_INSERT = f"INSERT INTO events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


def sqlite_path(url: str) -> Path:
    """The file a `sqlite:` URL (or a bare path) names.

    `sqlite:///var/lib/rota/rota.db` is the absolute path `/var/lib/rota/rota.db`;
    `sqlite:rota.db` and `rota.db` are relative to the working directory.
    """
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
    elif url.startswith("sqlite:"):
        path = url[len("sqlite:") :]
    else:
        path = url
    if not path or path == ":memory:":
        raise StoreError(
            f"store URL {url!r} names no file: rota's SQLite store needs a file path "
            "(an in-memory database cannot be shared by the scheduler's connections)",
            code=PortCode.INVALID_STORE_URL,
        )
    return Path(path)


class Row:
    """One event about to be written, before its position, time and hash are known."""

    __slots__ = ("data", "delivery_id", "stream", "type", "type_version", "version")

    def __init__(
        self,
        stream: str,
        version: int | None,
        type_: str,
        type_version: int,
        delivery_id: str | None,
        data: str | bytes,
    ) -> None:
        self.stream = stream
        self.version = version
        self.type = type_
        self.type_version = type_version
        self.delivery_id = delivery_id
        self.data = data


class _Written:
    """A row this append wrote; decoded into a `RecordedEvent` after the commit."""

    __slots__ = ("position", "recorded_at", "row")

    def __init__(self, position: int, row: Row, recorded_at: str) -> None:
        self.position = position
        self.row = row
        self.recorded_at = recorded_at

    def decoded(self, decode: Callable[..., Any]) -> RecordedEvent:
        row = self.row
        event = decode(row.type, row.type_version, row.data, self.position)
        return RecordedEvent(
            self.position, row.stream, row.version or 0, row.delivery_id, self.recorded_at, event
        )


class SQLiteStore(EventStore):
    """The log in one SQLite file; see the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        codec: Codec = DEFAULT_CODEC,
        synchronous: Synchronous = "full",
        busy_timeout: float = 30.0,
    ) -> None:
        if synchronous not in ("full", "normal", "extra"):
            raise StoreError(
                f"synchronous={synchronous!r} is not one of full, normal, extra",
                code=PortCode.INVALID_SETTING,
            )
        self.path = sqlite_path(os.fspath(path))
        self.url = f"sqlite://{self.path}"
        self.clock: Clock = clock or SystemClock()
        self.codec = codec
        self.synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        self._pid = os.getpid()
        self._closed = False
        self._write_lock = threading.RLock()
        self._commit = threading.Condition()
        self._waiting = 0  # threads in `wait_for_commit`; a commit wakes them only if any
        self._local = threading.local()
        # Writer-side caches of the log head and stream versions. They are trusted only while
        # `PRAGMA data_version` shows no other connection committed since our last write.
        self._data_version: int | None = None
        self._head: tuple[int, bytes] | None = None
        self._versions: dict[str, int] = {}
        self._connections: list[apsw.Connection] = []
        self._connections_lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = self._connect()
        self._create_schema()

    # -- connections -----------------------------------------------------------------

    def _connect(self) -> apsw.Connection:
        try:
            conn = apsw.Connection(str(self.path))
            conn.setbusytimeout(self._busy_ms)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        except apsw.Error as exc:
            raise StoreUnavailable(f"cannot open the SQLite store at {self.path}: {exc}") from exc
        with self._connections_lock:
            self._connections.append(conn)
        return conn

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed(f"the store at {self.path} is closed")
        if os.getpid() != self._pid:
            raise ForkedConnection(
                "this store was opened in another process; a SQLite connection must not "
                "cross fork(): open the store again in the child"
            )

    def _reader(self) -> apsw.Connection:
        self._check()
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _create_schema(self) -> None:
        def create(cursor: apsw.Cursor) -> None:
            cursor.execute(SCHEMA)
            row = cursor.execute(
                "SELECT value FROM rota_meta WHERE key = 'schema_version'"
            ).fetchone()
            if row is None:
                cursor.execute(
                    "INSERT INTO rota_meta (key, value) VALUES ('schema_version', ?), "
                    "('store_id', ?)",
                    (str(SCHEMA_VERSION), str(uuid.uuid4())),
                )
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreError(
                    f"the store at {self.path} has schema version {row[0]}, newer than this "
                    f"rota's {SCHEMA_VERSION}: upgrade rota to open it",
                    code=PortCode.SCHEMA_TOO_NEW,
                )

        self.write(create)

    @property
    def store_id(self) -> str:
        row = self._reader().execute("SELECT value FROM rota_meta WHERE key='store_id'").fetchone()
        assert row is not None  # written with the schema version when the store was created
        return str(row[0])

    # -- writing ---------------------------------------------------------------------

    def write(self, body: Callable[[apsw.Cursor], T]) -> T:
        """Run `body` in one `BEGIN IMMEDIATE` transaction on the writer connection."""
        self._check()
        with self._write_lock:
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
            except apsw.BusyError as exc:
                raise StoreUnavailable(
                    f"the store at {self.path} stayed locked for {self._busy_ms} ms: {exc}"
                ) from exc
            except apsw.Error as exc:
                raise StoreUnavailable(f"cannot begin a write on {self.path}: {exc}") from exc
            try:
                # The file's data version moves with every commit, ours included; if it is
                # not what our last commit left, another connection wrote in between.
                if conn.data_version() != self._data_version:
                    self._forget()
                result = body(conn.cursor())
                conn.execute("COMMIT")
                self._data_version = conn.data_version()
            except BaseException as exc:
                self._forget()
                if not conn.getautocommit():
                    conn.execute("ROLLBACK")
                if isinstance(exc, apsw.BusyError):
                    raise StoreUnavailable(f"the store at {self.path} is busy: {exc}") from exc
                if isinstance(exc, apsw.ConstraintError):
                    raise StoreIntegrityError(f"the log refused a write: {exc}") from exc
                if isinstance(exc, apsw.Error):
                    raise StoreUnavailable(f"a write to {self.path} failed: {exc}") from exc
                raise
        if self._waiting:
            with self._commit:
                self._commit.notify_all()
        return result

    def _forget(self) -> None:
        self._head = None
        self._versions.clear()

    def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int] | None = None
    ) -> AppendResult:
        expected = expected or {}
        if len(events) == 1 and expected.keys() <= {events[0].stream}:
            return self._append_one(events[0], expected)
        encode = self.codec.encode
        prepared: list[tuple[NewEvent, Row]] = []
        for new in events:
            tag, version, payload = encode(new.event)
            prepared.append(
                (new, Row(new.stream, None, tag, version, new.delivery_id, payload.decode()))
            )
        if not prepared and not expected:
            return AppendResult([], 0)
        result = self.write(lambda cursor: self._append_in(cursor, prepared, expected))
        # Decode what was written outside the write lock: the events returned are exactly
        # what a later read or replay will see.
        decode = self.codec.decode
        recorded = [
            r if isinstance(r, RecordedEvent) else r.decoded(decode) for r in result.recorded
        ]
        return AppendResult(recorded, result.written)

    def _append_one(self, new: NewEvent, expected: Mapping[str, int]) -> AppendResult:
        """Append one event whose only expectation, if any, is on its own stream.

        Many of the scheduler's writes are one event (a new Work, an input, a renewal). This
        does what the general path does with fewer Python objects, and skips two reads
        whenever the log's unique indexes can answer instead (see `_insert_one`).
        """
        tag, type_version, payload = self.codec.encode(new.event)
        row = Row(new.stream, None, tag, type_version, new.delivery_id, payload.decode())
        want = expected.get(new.stream)

        def body(cursor: apsw.Cursor) -> AppendResult | _Written:
            written = self._insert_one(cursor, row, want)
            if written is not None:
                return written
            # Refused or undecided: the general path, in the same transaction, finds out
            # why (a duplicate delivery, a stale expected version) and answers as always.
            return self._append_in(cursor, [(new, row)], expected)

        result = self.write(body)
        if isinstance(result, _Written):
            return AppendResult([result.decoded(self.codec.decode)], 1)
        recorded = result.recorded[0]
        if isinstance(recorded, _Written):
            recorded = recorded.decoded(self.codec.decode)
        return AppendResult([recorded], result.written)

    def _insert_one(self, cursor: apsw.Cursor, row: Row, want: int | None) -> _Written | None:
        """Insert `row` optimistically; None (nothing written) when the general path must decide.

        Two reads are left to the unique indexes: the delivery identity (a duplicate makes the
        INSERT fail) and, when the caller expects a new stream (`want == 0`), the stream's
        version (an existing stream makes UNIQUE(stream, version) refuse version 1). A refused
        INSERT undoes only itself; the caller's transaction goes on, still empty.
        """
        if want == 0 and not self._versions.get(row.stream):
            version = 1
        else:
            current = self._stream_version(cursor, row.stream)
            if want is not None and want != current:
                return None
            version = current + 1
        row.version = version
        position, previous = self._head or self._read_head(cursor)
        position += 1
        recorded_at = format_timestamp(self.clock.now())
        stream, type_, delivery_id, data = row.stream, row.type, row.delivery_id, row.data
        envelope = canonical_envelope(
            position, stream, version, type_, row.type_version, delivery_id, recorded_at, data
        )
        digest = link(previous, envelope)
        values = (position, stream, version, type_, row.type_version, delivery_id, data)
        try:
            cursor.execute(_INSERT, (*values, recorded_at, digest.hex()))
        except apsw.ConstraintError:
            row.version = None
            return None
        self._head = (position, digest)
        self._versions[stream] = version
        return _Written(position, row, recorded_at)

    def _append_in(
        self,
        cursor: apsw.Cursor,
        prepared: list[tuple[NewEvent, Row]],
        expected: Mapping[str, int],
    ) -> AppendResult:
        deliveries = match_deliveries(
            [new for new, _ in prepared], lambda delivery_id: self._delivery(cursor, delivery_id)
        )
        duplicates = deliveries.all_recorded()
        if duplicates is not None:
            return AppendResult(duplicates, 0)

        versions: dict[str, int] = {}
        for stream, want in expected.items():
            actual = self._stream_version(cursor, stream)
            if actual != want:
                raise ConcurrencyConflict(stream, want, actual)
            versions[stream] = actual
        fresh: list[Row] = []
        for index, (_, row) in enumerate(prepared):
            if not deliveries.is_new(index):
                continue
            current = versions.get(row.stream)
            if current is None:
                current = self._stream_version(cursor, row.stream)
            row.version = current + 1
            versions[row.stream] = row.version
            fresh.append(row)
        written = self.insert_rows(cursor, fresh)
        recorded = deliveries.merge(_Written(*entry) for entry in written)
        for row in fresh:
            assert row.version is not None
            self._versions[row.stream] = row.version
        return AppendResult(recorded, len(fresh))  # type: ignore[arg-type]

    def _delivery(self, cursor: apsw.Cursor, delivery_id: str) -> RecordedEvent | None:
        """The event recorded under `delivery_id`, read inside the write transaction."""
        found = cursor.execute(
            f"SELECT {_COLUMNS} FROM events WHERE delivery_id = ?", (delivery_id,)
        ).fetchone()
        return None if found is None else self._recorded(found)

    def insert_rows(self, cursor: apsw.Cursor, rows: Sequence[Row]) -> list[tuple[int, Row, str]]:
        """Chain and insert rows whose versions are set; call inside `write`."""
        if not rows:
            return []
        position, previous = self._head or self._read_head(cursor)
        recorded_at = format_timestamp(self.clock.now())
        values: list[tuple[Any, ...]] = []
        written: list[tuple[int, Row, str]] = []
        for row in rows:
            position += 1
            assert row.version is not None
            key = (position, row.stream, row.version, row.type, row.type_version, row.delivery_id)
            previous = link(previous, canonical_envelope(*key, recorded_at, row.data))
            values.append((*key, row.data, recorded_at, previous.hex()))
            written.append((position, row, recorded_at))
            self._versions.pop(row.stream, None)
        cursor.executemany(_INSERT, values)
        self._head = (position, previous)
        return written

    def _read_head(self, cursor: apsw.Cursor) -> tuple[int, bytes]:
        """The log's last (position, hash), read inside the write transaction and cached."""
        head = cursor.execute(
            "SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"
        ).fetchone()
        self._head = (0, GENESIS) if head is None else (head[0], bytes.fromhex(head[1]))
        return self._head

    def append_raw(self, records: Sequence[RawRecord]) -> None:
        if records:
            self.write(lambda cursor: self._append_raw_in(cursor, records))

    def _append_raw_in(self, cursor: apsw.Cursor, records: Sequence[RawRecord]) -> None:
        head = cursor.execute(
            "SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"
        ).fetchone()
        check_continuation(
            0 if head is None else int(head[0]),
            None if head is None else str(head[1]),
            records,
        )
        values = [
            (
                r.position,
                r.stream,
                r.version,
                r.type,
                r.type_version,
                r.delivery_id,
                r.data,
                r.recorded_at,
                r.hash,
            )
            for r in records
        ]
        cursor.executemany(_INSERT, values)
        # The writer caches (head, stream versions) do not know these rows.
        self._forget()

    def _stream_version(self, cursor: apsw.Cursor, stream: str) -> int:
        cached = self._versions.get(stream)
        if cached is not None:
            return cached
        row = cursor.execute(
            "SELECT max(version) FROM events WHERE stream = ?", (stream,)
        ).fetchone()
        version = int(row[0]) if row is not None and row[0] is not None else 0
        if len(self._versions) > 100_000:
            self._versions.clear()
        self._versions[stream] = version
        return version

    # -- reading ---------------------------------------------------------------------

    def _recorded(self, row: Sequence[Any]) -> RecordedEvent:
        position, stream, version, type_, type_version, delivery_id, data, recorded_at = row[:8]
        event = self.codec.decode(type_, type_version, data, position)
        return RecordedEvent(position, stream, version, delivery_id, recorded_at, event)

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        try:
            return self._reader().execute(sql, params).fetchall()
        except apsw.BusyError as exc:
            raise StoreUnavailable(f"the store at {self.path} is busy: {exc}") from exc

    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        rows = self._query(
            "SELECT position, stream, version, type, type_version, delivery_id, data, "
            "recorded_at FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (after, limit),
        )
        return self._decode_rows(rows)

    def _decode_rows(self, rows: list[Any]) -> list[RecordedEvent]:
        codec = self.codec
        current = codec.current
        fast = codec._decoder.decode
        decode = codec.decode
        out: list[RecordedEvent] = []
        append = out.append
        for position, stream, version, type_, type_version, delivery_id, data, at in rows:
            if current.get(type_) == type_version:
                try:
                    event = fast(data)
                except Exception:
                    event = decode(type_, type_version, data, position)
                else:
                    if event.__struct_config__.tag != type_:
                        event = decode(type_, type_version, data, position)
            else:
                event = decode(type_, type_version, data, position)
            append(RecordedEvent(position, stream, version, delivery_id, at, event))
        return out

    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        rows = self._query(
            "SELECT position, stream, version, type, type_version, delivery_id, data, "
            "recorded_at FROM events WHERE stream = ? AND version > ? ORDER BY version",
            (stream, after),
        )
        return self._decode_rows(rows)

    def stream_version(self, stream: str) -> int:
        rows = self._query("SELECT max(version) FROM events WHERE stream = ?", (stream,))
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (after, limit),
        )
        return [RawRecord(*row) for row in rows]

    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        rows = self._query(f"SELECT {_COLUMNS} FROM events WHERE delivery_id = ?", (delivery_id,))
        return self._recorded(rows[0]) if rows else None

    def head(self) -> LogHead:
        rows = self._query("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1", ())
        if not rows:
            return LogHead(0, GENESIS_HEX)
        return LogHead(int(rows[0][0]), str(rows[0][1]))

    def head_position(self) -> int:
        rows = self._query("SELECT max(position) FROM events", ())
        return int(rows[0][0] or 0)

    def wait_for_commit(self, after: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        interval = 0.002
        while True:
            if self.head_position() > after:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._commit:
                self._waiting += 1
                try:
                    self._commit.wait(min(interval, remaining))
                finally:
                    self._waiting -= 1
            interval = min(interval * 2, 0.05)

    def now(self) -> datetime:
        return self.clock.now()

    def integrity_check(self) -> list[str]:
        """SQLite's full `PRAGMA integrity_check`: `["ok"]` when the file is sound."""
        return [str(row[0]) for row in self._query("PRAGMA integrity_check", ())]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._connections_lock:
            connections, self._connections = self._connections, []
        if os.getpid() != self._pid:
            return
        for conn in connections:
            with contextlib.suppress(apsw.Error):
                conn.close()
