"""The writer lock of a projection store: one process keeps a store current at a time.

A scheduler takes its projection store's writer lock when it opens (`LiveProjections`);
another scheduler on the same log that cannot take it still starts from the stored
projection but keeps it in memory only, so two writers never thrash the store. Each store
says which lock is its own (`writer_lock()`): an `flock` on `<file>.lock` beside an SQLite
projection file (`FileWriterLock`), a PostgreSQL session advisory lock for projections in
a PostgreSQL schema (`AdvisoryWriterLock` in `rota.infrastructure.postgres.projection_store`).
Both die with the process (or its database session), so a crashed writer never leaves the
lock behind.
"""

from __future__ import annotations

import contextlib
from typing import IO


class FileWriterLock:
    """`flock(LOCK_EX | LOCK_NB)` on a lock file, held by an open handle until release."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._handle: IO[bytes] | None = None

    def acquire(self) -> bool:
        try:
            import fcntl
        except ImportError:  # no advisory locks here: assume a single writer
            return True
        if self._handle is not None:
            return True
        handle = open(self.path, "ab")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._handle = handle
        return True

    def release(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()  # releases the lock
            self._handle = None


__all__ = ["FileWriterLock"]
