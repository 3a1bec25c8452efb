"""Opening a SQLite log or projection file for doctor so that nothing can write it.

The log (`ReadOnlyLog`) and a projection file (`ReadOnlyProjections`) through the read-only
connections of `rota.infrastructure.sqlite.read_only` (`SQLITE_OPEN_READONLY`, and
`immutable=1` for a file no connection has open: `quiescent`, `fingerprint`), which also
holds SQLite's `PRAGMA integrity_check` (`integrity`, the backend's `check_integrity`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

from rota.application.errors import PortCode, StoreError
from rota.application.ports import Clock
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.sqlite.appends import LogAppends
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore
from rota.infrastructure.sqlite.read_only import (
    COMPANIONS,
    connect_readonly,
    fingerprint,
    integrity,
    quiescent,
)
from rota.infrastructure.sqlite.reads import LogReads
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.store_url import sqlite_url
from rota.replay.errors import ReplayCode


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
        """The same log opened again, read-only as this one (`EventStore.reopened`)."""
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


__all__ = [
    "COMPANIONS",
    "ReadOnlyLog",
    "ReadOnlyProjections",
    "connect_readonly",
    "fingerprint",
    "integrity",
    "quiescent",
]
