"""The embedded store: the log in one SQLite file through apsw.

WAL journal, `synchronous=FULL` by default, every write in `BEGIN IMMEDIATE` so that two
processes never interleave a read-then-write. Positions are assigned inside that write lock
as head + 1, so they are gapless and commit-ordered. Readers use their own connection per
thread and never block the writer (WAL).

Durability setting (`synchronous`):
- `full` (default): a commit that returned survives a power cut. SQLite commits on NORMAL
  and the WAL is synced after the write lock is let go (`sqlite.durability`): one sync
  covers every commit made before it, and a caller inside `deferring()` syncs later.
- `normal`: faster; a power cut or OS crash (not a process crash) may lose the last commits,
  which only a checkpoint kept outside the store reveals: choose it only where that is fine.
- `extra`: like full, and also syncs the directory on every commit.

Never use the store in a child process after `fork()` (executors' fork+exec is safe).

The store owns connections, write transaction and commit waits; `sqlite.appends`, `.reads`,
`.tree` (Merkle nodes), `.log_file` (tables) and `.pruning` (retention) do the rest.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import apsw

from rota.application.errors import (
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
    StoreSpace,
    TreeHead,
)
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.codec import DEFAULT_CODEC, Codec
from rota.infrastructure.log_rows import IMPORTING, Row
from rota.infrastructure.sqlite import pruning
from rota.infrastructure.sqlite.appends import LogAppends
from rota.infrastructure.sqlite.durability import WalSync
from rota.infrastructure.sqlite.log_file import (
    Synchronous,
    check_file,
    create_schema,
    sqlite_path,
)
from rota.infrastructure.sqlite.nudges import Nudges
from rota.infrastructure.sqlite.reads import LogReads
from rota.infrastructure.sqlite.tree import SqliteNodes
from rota.infrastructure.store_url import sqlite_url
from rota.infrastructure.tree_reads import TreeReads

T = TypeVar("T")
FALLBACK_POLL = 1.0  # seconds between looks at the head while nudges can arrive


class SQLiteStore(EventStore):
    """The log in one SQLite file; see the module docstring."""

    path: Path
    # Defaults for subclasses that set a store up by hand (`rota.replay.read_only`): no
    # nudges (a read-only opener writes nothing beside the log), waits poll, SQLite syncs.
    _wal_sync: WalSync | None = None
    _quiet: int | None = None
    _generation = 0
    _interrupts = 0
    _nudges: Nudges | None = None

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        codec: Codec = DEFAULT_CODEC,
        synchronous: Synchronous = "full",
        busy_timeout: float = 30.0,
        create: bool = True,
    ) -> None:
        if synchronous not in ("full", "normal", "extra"):
            raise StoreError(
                f"synchronous={synchronous!r} is not one of full, normal, extra",
                code=PortCode.INVALID_SETTING,
            )
        self.path = sqlite_path(os.fspath(path))
        self.url = sqlite_url(self.path)
        check_file(self.path, create=create)
        self.clock: Clock = clock or SystemClock()
        self.codec = codec
        self.synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        self._pid = os.getpid()
        self._closed = False
        # FULL: SQLite commits on NORMAL and the WAL is fsynced outside the write lock.
        self._wal_sync = WalSync(self.path) if synchronous == "full" else None
        # The writer's `PRAGMA data_version` at our last commit: the writer's caches
        # (`LogAppends`) and `nothing_after` are trusted only while it has not moved.
        self._quiet = None
        self._write_lock = threading.RLock()
        self._commit = threading.Condition()
        self._waiting = 0  # threads in `wait_for_commit`; a commit wakes them only if any
        self._generation = 0  # moves on every nudge or local commit seen while waiting
        self._interrupts = 0  # moves on `wake_waiters`: waits in progress return False
        self._nudges = Nudges(self.path)
        self._local = threading.local()
        self._reads = LogReads(self._query, codec)
        self._appends = LogAppends(self.write, codec, self.clock, self._reads.recorded)
        self._connections: list[apsw.Connection] = []
        self._connections_lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = self._connect()
        self._create_schema(create)

    # -- connections -----------------------------------------------------------------

    def _connect(self) -> apsw.Connection:
        try:
            conn = apsw.Connection(str(self.path))
            conn.setbusytimeout(self._busy_ms)
            pruning.incremental_when_new(conn)
            conn.execute("PRAGMA journal_mode=WAL")
            level = "NORMAL" if self._wal_sync is not None else self.synchronous.upper()
            conn.execute(f"PRAGMA synchronous={level}")
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
            # A thread's reader goes with the thread (launch threads come and go: their
            # connections must not pile up as open files).
            weakref.finalize(threading.current_thread(), self._drop_reader, conn)
        return conn

    def _drop_reader(self, conn: apsw.Connection) -> None:
        with self._connections_lock:
            if conn not in self._connections:
                return  # the store was closed: closed with it
            self._connections.remove(conn)
        with contextlib.suppress(apsw.Error):
            conn.close()

    def _create_schema(self, create: bool = True) -> None:
        try:
            self.write(lambda cursor: create_schema(cursor, self.path, create=create))
        except StoreError:
            self.close()
            raise

    @property
    def store_id(self) -> str:
        row = self._reader().execute("SELECT value FROM rota_meta WHERE key='store_id'").fetchone()
        assert row is not None  # written with the schema version when the store was created
        return str(row[0])

    def unfinished_import(self) -> str | None:
        row = self._reader().execute(f"SELECT value FROM rota_meta WHERE key='{IMPORTING}'")
        found = row.fetchone()
        return None if found is None else str(found[0])

    def mark_import(self, marker: str | None) -> None:
        def mark(cursor: apsw.Cursor) -> None:
            cursor.execute(f"DELETE FROM rota_meta WHERE key='{IMPORTING}'")
            if marker is not None:
                cursor.execute(f"INSERT INTO rota_meta VALUES ('{IMPORTING}', ?)", (marker,))

        self.write(mark)

    # -- writing ---------------------------------------------------------------------

    def write(self, body: Callable[[apsw.Cursor], T]) -> T:
        """Run `body` in one `BEGIN IMMEDIATE` transaction on the writer connection."""
        self._check()
        number = 0
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
                # `PRAGMA data_version` moves only when another connection commits: if it is
                # not what it was at our last commit, another connection wrote in between
                # (and nobody can until our COMMIT: this transaction holds the write lock).
                quiet = _others_version(conn)
                if quiet != self._quiet:
                    self._appends.forget()
                result = body(conn.cursor())
                conn.execute("COMMIT")
                self._quiet = quiet
                if self._wal_sync is not None:
                    self._wal_sync.committed += 1
                    number = self._wal_sync.committed
            except BaseException as exc:
                self._quiet = None
                self._appends.forget()
                if not conn.getautocommit():
                    conn.execute("ROLLBACK")
                if isinstance(exc, apsw.BusyError):
                    raise StoreUnavailable(f"the store at {self.path} is busy: {exc}") from exc
                if isinstance(exc, apsw.ConstraintError):
                    raise StoreIntegrityError(f"the log refused a write: {exc}") from exc
                if isinstance(exc, apsw.Error):
                    raise StoreUnavailable(f"a write to {self.path} failed: {exc}") from exc
                raise
        if number:
            local = self._local
            if getattr(local, "deferring", 0):
                local.pending = number
                if getattr(local, "ahead", 0):
                    self._wal_sync.begin(number)  # type: ignore[union-attr]
            else:
                self._wal_sync.sync(number)  # type: ignore[union-attr]
        if self._nudges is not None:
            self._nudges.poke()  # the other stores waiting on this log (not this one's)
        self._wake()  # this store's own waiters
        return result

    def deferring(self, *, ahead: bool = False) -> contextlib.AbstractContextManager[None]:
        return _Deferring(self._local, ahead)

    def sync(self) -> None:
        local = self._local
        pending: int = getattr(local, "pending", 0)
        depth: int = getattr(local, "deferring", 0)
        if pending == 0 or depth > 0 or self._wal_sync is None:
            return
        self._wal_sync.sync(pending)
        local.pending = 0

    def nothing_after(self, position: int) -> bool:
        if self._closed or not self._write_lock.acquire(blocking=False):
            return False  # another thread is writing: it may move the head
        try:
            head = self._appends.head
            if head is None or head[0] != position or self._quiet is None:
                return False
            return _others_version(self._writer) == self._quiet
        except apsw.Error:
            return False
        finally:
            self._write_lock.release()

    def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int] | None = None
    ) -> AppendResult:
        return self._appends.append(events, expected)

    def insert_rows(self, cursor: apsw.Cursor, rows: Sequence[Row]) -> list[tuple[int, Row, str]]:
        """Chain and insert rows whose versions are set; call inside `write`."""
        return self._appends.insert_rows(cursor, rows)

    def append_raw(self, records: Sequence[RawRecord]) -> None:
        self._appends.append_raw(records)

    def rewrite_payloads(self, rows: Sequence[tuple[int, bytes]]) -> int:
        return self.write(lambda cursor: pruning.rewrite(cursor, rows, self._appends.forget))

    def storage(self, reclaim: int = 0) -> StoreSpace | None:
        return pruning.space(self.write, self._reader, reclaim)

    # -- reading ---------------------------------------------------------------------

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        try:
            return self._reader().execute(sql, params).fetchall()
        except apsw.BusyError as exc:
            raise StoreUnavailable(f"the store at {self.path} is busy: {exc}") from exc

    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        return self._reads.read(after, limit)

    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        return self._reads.read_stream(stream, after)

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        return self._reads.read_streams(streams)

    def stream_version(self, stream: str) -> int:
        return self._reads.stream_version(stream)

    def read_prefix(
        self, prefix: str, after: int = 0, limit: int = 1000, upto: int | None = None
    ) -> list[RecordedEvent]:
        return self._reads.read_prefix(prefix, after, limit, upto)

    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        return self._reads.read_raw(after, limit)

    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        return self._reads.find_delivery(delivery_id)

    def head(self) -> LogHead:
        return self._reads.head()

    def head_position(self) -> int:
        return self._reads.head_position()

    def tree_head(self, size: int | None = None) -> TreeHead:
        return TreeReads(SqliteNodes(self._query), self.head_position).tree_head(size)

    def inclusion_path(self, position: int, size: int) -> list[bytes]:
        return TreeReads(SqliteNodes(self._query), self.head_position).inclusion_path(
            position, size
        )

    def consistency_path(self, old_size: int, new_size: int) -> list[bytes]:
        tree = TreeReads(SqliteNodes(self._query), self.head_position)
        return tree.consistency_path(old_size, new_size)

    def tree_nodes(self, level: int, after: int = -1, limit: int = 1000) -> list[tuple[int, bytes]]:
        return SqliteNodes(self._query).level(level, after, limit)

    def _wake(self) -> None:
        # Moves on every local commit, waiters or not: a waiter that read the head just
        # before the commit sees the generation moved and looks again (no lost wake-up).
        with self._commit:
            self._generation += 1
            if self._waiting:
                self._commit.notify_all()

    def wake_waiters(self) -> None:
        with self._commit:
            self._interrupts += 1
            self._commit.notify_all()

    def wait_for_commit(self, after: int, timeout: float) -> bool:
        """Wait for a nudge (`sqlite.nudges`) or a local commit; look at the head every
        FALLBACK_POLL seconds all the same, and poll quickly when no nudge can arrive."""
        deadline = time.monotonic() + timeout
        nudged = self._nudges is not None and self._nudges.listen(self._wake)
        interval = 0.002
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
            if nudged:
                step = FALLBACK_POLL
            else:
                step, interval = interval, min(interval * 2, 0.05)
            with self._commit:
                if self._interrupts != interrupts:
                    return False
                if self._generation != generation:
                    continue
                self._waiting += 1
                try:
                    self._commit.wait(min(step, remaining))
                finally:
                    self._waiting -= 1
                if self._interrupts != interrupts:
                    return False

    def now(self) -> datetime:
        return self.clock.now()

    def integrity_check(self) -> list[str]:
        """SQLite's full `PRAGMA integrity_check`: `["ok"]` when the file is sound."""
        return [str(row[0]) for row in self._query("PRAGMA integrity_check", ())]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.wake_waiters()
        if self._wal_sync is not None:
            self._wal_sync.close()
        if self._nudges is not None:
            self._nudges.close()
        with self._connections_lock:
            connections, self._connections = self._connections, []
        if os.getpid() != self._pid:
            return
        for conn in connections:
            with contextlib.suppress(apsw.Error):
                conn.close()


class _Deferring:
    """`SQLiteStore.deferring()`: the thread's depth of deferring blocks, and of `ahead` ones,
    one up while in it (a plain class: entered twice a transaction, a generator's context
    manager costs more)."""

    __slots__ = ("ahead", "local")

    def __init__(self, local: threading.local, ahead: bool) -> None:
        self.local = local
        self.ahead = ahead

    def __enter__(self) -> None:
        local = self.local
        local.deferring = getattr(local, "deferring", 0) + 1
        if self.ahead:
            local.ahead = getattr(local, "ahead", 0) + 1

    def __exit__(self, *exc: object) -> None:
        local = self.local
        local.deferring -= 1
        if self.ahead:
            local.ahead -= 1


def _others_version(conn: apsw.Connection) -> int:
    """`PRAGMA data_version`: moves when another connection commits, never on our own."""
    row = conn.execute("PRAGMA data_version").fetchone()
    return -1 if row is None else int(row[0])
