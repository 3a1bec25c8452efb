"""The fsync of a SQLite log's WAL taken out of the write lock: commits now, durable once synced.

On `synchronous=full` the store runs its connections on SQLite's `NORMAL` (a commit writes
its WAL frames without an fsync) and fsyncs the WAL file itself after the commit, outside
the write lock (`WalSync.sync`). That is as durable as FULL for every caller that waits
for `sync` before it tells anyone (a commit is acknowledged only once synced) and lets
other threads commit while one waits on the disk. The WAL is one file written in order, so
an fsync makes every frame written before it durable: each commit gets a sequence number,
and a sync covers every commit numbered up to what had committed when its fsync began; a
thread whose commit was covered by another's fsync does not fsync again (group sync).
SQLite's checkpoints keep their own order on NORMAL (the WAL is synced before its frames
are copied, the database file after), so a WAL restarted after a checkpoint loses nothing.

Another connection may read a commit before it is synced. Anything it writes in turn is
appended to the same WAL after it, and made durable only with everything before it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from rota.application.errors import StoreUnavailable

# The data (and a changed size) only, as SQLite's own FULL sync does on Linux; an fsync
# would also journal the mtime on every call.
_datasync = getattr(os, "fdatasync", os.fsync)


class WalSync:
    """Commit numbering and the shared fsync of one log's WAL file; see the module docstring."""

    def __init__(self, log_path: Path) -> None:
        self.wal = Path(f"{log_path}-wal")
        self._lock = threading.Lock()  # one fsync at a time; the others wait and see
        self._fd: int | None = None
        self.committed = 0  # commits numbered so far (the store counts under its write lock)
        self.synced = 0  # every commit numbered up to this is durable
        self.fsyncs = 0  # fsyncs issued (tests and benchmarks read it)

    def sync(self, upto: int) -> None:
        """Return once commit number `upto` (and every earlier one) is durable."""
        if self.synced >= upto:
            return
        with self._lock:
            if self.synced >= upto:
                return  # another thread's fsync began after our commit: it covered it
            target = self.committed  # every commit numbered so far is in the file now
            try:
                _datasync(self._wal_fd())
            except OSError as exc:
                self._close_fd()
                raise StoreUnavailable(f"cannot sync the log's WAL {self.wal}: {exc}") from exc
            self.fsyncs += 1
            self.synced = max(self.synced, target)

    def _wal_fd(self) -> int:
        """An open descriptor of the WAL file, reopened if the file was replaced."""
        fd = self._fd
        if fd is not None:
            try:
                if os.fstat(fd).st_ino == os.stat(self.wal).st_ino:
                    return fd
            except OSError:
                pass
            self._close_fd()
        self._fd = os.open(self.wal, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return self._fd

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._close_fd()
