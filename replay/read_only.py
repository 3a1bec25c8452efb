"""Opening a SQLite log or projection file for doctor so that nothing can write it.

Files are opened with `SQLITE_OPEN_READONLY`, never through a writer. A file with no
`-wal`/`-shm` beside it is open nowhere (a WAL connection always keeps its `-shm`), so it
is read with `immutable=1`, which creates no companion file; `fingerprint` shows whether a
writer opened it meanwhile (then the caller reads again with ordinary read-only
connections, which, like any WAL reader, share the writer's `-wal`/`-shm`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import apsw

from rota.application.errors import PortCode, StoreError
from rota.application.ports import Clock
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.sqlite.appends import LogAppends
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore
from rota.infrastructure.sqlite.reads import LogReads
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.store_url import sqlite_url
from rota.replay.errors import ReplayCode

COMPANIONS = ("-wal", "-shm", "-journal")


def quiescent(path: Path) -> bool:
    """No `-wal`, `-shm` or `-journal` beside the file: no connection has it open now."""
    return not any(os.path.lexists(f"{path}{suffix}") for suffix in COMPANIONS)


def fingerprint(path: Path) -> tuple[Any, ...]:
    """What changes when anyone writes the file or opens it in WAL mode."""
    found: list[Any] = []
    for suffix in ("", *COMPANIONS):
        try:
            st = os.lstat(f"{path}{suffix}")
        except FileNotFoundError:
            found.append(None)
        else:
            found.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(found)


def connect_readonly(path: Path, *, immutable: bool) -> apsw.Connection:
    """A connection that cannot write the file (`immutable`: nor create its companions)."""
    uri = f"file://{quote(os.path.abspath(path))}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.setbusytimeout(30_000)
    return conn


def integrity(path: Path, *, immutable: bool) -> list[str]:
    """SQLite's full `PRAGMA integrity_check` (`["ok"]` when sound)."""
    try:
        conn = connect_readonly(path, immutable=immutable)
        try:
            return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
        finally:
            conn.close()
    except apsw.Error as exc:
        return [f"cannot be read as a database: {exc}"]


class ReadOnlyLog(SQLiteStore):
    """The SQLite log through read-only connections: reads work, any write raises."""

    def __init__(self, path: Path, *, immutable: bool, clock: Clock | None = None) -> None:
        # SQLiteStore.__init__ opens a writer and creates the schema: set up by hand.
        self.path, self.url, self.immutable = Path(path), sqlite_url(path), immutable
        self.clock, self.codec, self.synchronous = clock or SystemClock(), DEFAULT_CODEC, "full"
        self._busy_ms, self._pid, self._closed = 30_000, os.getpid(), False
        self._write_lock, self._commit = threading.RLock(), threading.Condition()
        self._local, self._data_version = threading.local(), None
        self._reads = LogReads(self._query, self.codec)
        self._appends = LogAppends(self.write, self.codec, self.clock, self._reads.recorded)
        self._connections: list[apsw.Connection] = []
        self._connections_lock = threading.Lock()
        if not self.path.is_file():
            raise StoreError(f"no log file at {self.path}", code=ReplayCode.NO_STORE)

    def _connect(self) -> apsw.Connection:
        conn = connect_readonly(self.path, immutable=self.immutable)
        with self._connections_lock:
            self._connections.append(conn)
        return conn

    def write(self, body: Callable[[apsw.Cursor], Any]) -> Any:
        raise StoreError(f"{self.path} is open read-only", code=PortCode.READ_ONLY)

    def reopened(self) -> ReadOnlyLog:
        """The same log opened again, read-only as this one (what a forked fold opens:
        `rota.replay.side_by_side`)."""
        return ReadOnlyLog(self.path, immutable=self.immutable, clock=self.clock)


class ReadOnlyProjections(SQLiteProjectionStore):
    """A projection file through one read-only connection (`rows`, `meta`, `refusal`)."""

    def __init__(self, path: Path, *, immutable: bool) -> None:
        # ProjectionStore.__init__ creates the schema in WAL mode: set up by hand.
        self.path, self.clock, self.last_refusal = Path(path), SystemClock(), None
        self._lock, self._generations, self._closed = threading.RLock(), {}, False
        self._conn = connect_readonly(self.path, immutable=immutable)

    def tables(self) -> set[str]:
        found = self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {str(row[0]) for row in found}
