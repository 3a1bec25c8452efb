"""The fsync of a SQLite log's WAL taken out of the write lock: commits now, durable once synced.

On `synchronous=full` the store runs its connections on SQLite's `NORMAL` (a commit writes
its WAL frames without an fsync) and fsyncs the WAL file itself after the commit, outside
the write lock (`WalSync.sync`). That is as durable as FULL for every caller that waits
for `sync` before it tells anyone (a commit is acknowledged only once synced) and lets
other threads commit while one waits on the disk. The WAL is one file written in order, so
an fsync makes every frame written before it durable: each commit gets a sequence number,
and a sync covers every commit numbered up to what had committed when its fsync began; a
thread whose commit an fsync in progress covers waits for it and does not fsync again
(group sync), and one whose commit came after that fsync began issues its own at once,
beside it, rather than after it (the disk serves overlapping flushes together).
SQLite's checkpoints keep their own order on NORMAL (the WAL is synced before its frames
are copied, the database file after), so a WAL restarted after a checkpoint loses nothing.

Another connection may read a commit before it is synced. Anything it writes in turn is
appended to the same WAL after it, and made durable only with everything before it.

A commit whose sync is deferred by a block that goes on with work of its own
(`SQLiteStore.deferring(ahead=True)`: a cadence pass) starts its fsync at once on the
syncer thread (`begin`), when no fsync is on its way already, so the disk works while the
committing thread goes on with what does not need the commit durable (applying the events
to the projections, preparing the launches); the `sync` it then calls waits for that
fsync, or finds it done, instead of starting one only then. A plain deferred commit (a
transaction that only applies its own events before it waits) issues its fsync in its
`sync`, on its own thread: handing a wait of ~100 us to the syncer and back costs more
CPU in thread switches than the overlap gains. What is acknowledged, and when, is
unchanged: nothing waits in `begin`, and every caller still returns from `sync` only once
its commit is durable. An fsync begun there that fails is issued again, and its error
raised, by the `sync` that needs it.
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

    def __init__(self, log_path: Path, *, early: bool = True) -> None:
        self.wal = Path(f"{log_path}-wal")
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._fd: int | None = None
        self._ino = -1  # the inode `_fd` names
        self._stale: list[int] = []  # descriptors of a replaced WAL, closed once idle
        self._running = 0  # fsyncs in progress
        self._started = 0  # the highest commit number an fsync in progress will cover
        self.committed = 0  # commits numbered so far (the store counts under its write lock)
        self.synced = 0  # every commit numbered up to this is durable
        self.fsyncs = 0  # fsyncs issued (tests and benchmarks read it)
        # `begin`: the highest commit number asked for, and the thread that syncs it.
        self._asked = threading.Condition(lock)
        self.early = early  # whether `begin` starts fsyncs (else each waits for `sync`)
        self._wanted = 0
        self._syncer: threading.Thread | None = None
        self._closed = False

    def begin(self, upto: int) -> None:
        """Start making commit `upto` durable now, off the calling thread, unless an fsync
        is on its way already (then the caller's `sync` issues what that one misses)."""
        if self.synced >= upto or not self.early:
            return
        with self._cond:
            if self._closed or self._running or self._wanted > self.synced:
                return
            self._wanted = upto
            if self._syncer is None:
                self._syncer = threading.Thread(
                    target=self._sync_begun, name="rota-wal-sync", daemon=True
                )
                self._syncer.start()
            self._asked.notify()

    def _sync_begun(self) -> None:
        """The syncer thread: the fsyncs `begin` asked for, until `close`."""
        while True:
            with self._cond:
                while not self._closed and self._wanted <= self.synced:
                    self._asked.wait()
                if self._closed:
                    self._syncer = None
                    return
                upto = self._wanted
            try:
                self.sync(upto)
            except StoreUnavailable:
                with self._cond:
                    self._wanted = self.synced  # not again: the caller's `sync` retries

    def sync(self, upto: int) -> None:
        """Return once commit number `upto` (and every earlier one) is durable.

        A commit that an fsync already in progress covers (it began after the commit) waits
        for that fsync; any other issues its own at once, beside those in progress: the disk
        serves overlapping flushes together, where one after the other each waits for the
        last."""
        if self.synced >= upto:
            return
        with self._cond:
            while self._started >= upto and self.synced < upto:
                self._cond.wait()  # an fsync that covers this commit is on its way
            if self.synced >= upto:
                return
            target = self.committed  # every commit numbered so far is in the file now
            self._started = max(self._started, target)
            try:
                fd = self._wal_fd()
            except OSError as exc:
                self._started = self.synced
                raise StoreUnavailable(f"cannot sync the log's WAL {self.wal}: {exc}") from exc
            self._running += 1
        try:
            _datasync(fd)
        except OSError as exc:
            with self._cond:
                self._running -= 1
                self._started = self.synced  # whoever counted on it syncs for itself
                self._retire(fd)
                self._cond.notify_all()
            raise StoreUnavailable(f"cannot sync the log's WAL {self.wal}: {exc}") from exc
        with self._cond:
            self._running -= 1
            self.fsyncs += 1
            self.synced = max(self.synced, target)
            self._close_stale()
            self._cond.notify_all()

    def _wal_fd(self) -> int:
        """An open descriptor of the WAL file, reopened if the file was replaced (under the
        lock; a replaced one is closed once no fsync uses it)."""
        fd = self._fd
        if fd is not None:
            try:
                if os.stat(self.wal).st_ino == self._ino:
                    return fd
            except OSError:
                pass
            self._retire(fd)
        fd = os.open(self.wal, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._fd, self._ino = fd, os.fstat(fd).st_ino
        return fd

    def _retire(self, fd: int) -> None:
        if self._fd == fd:
            self._fd = None
        if fd not in self._stale:
            self._stale.append(fd)
        self._close_stale()

    def _close_stale(self) -> None:
        if self._running:
            return
        stale, self._stale = self._stale, []
        for fd in stale:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._asked.notify_all()
            if self._fd is not None:
                self._retire(self._fd)
