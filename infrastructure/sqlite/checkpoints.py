"""WAL checkpoints of a SQLite log run beside the commits, not inside one.

SQLite's automatic checkpoint runs in the connection that committed, on its thread, right
after the COMMIT: every ~1,000 pages a commit copies the WAL into the database file and
fsyncs both (on NORMAL too), so one caller in a few hundred waits milliseconds more, and in
a group commit so does every caller of its batch. Here the writer's automatic checkpoint is
off; its WAL hook (called after each commit, with the WAL's size in pages and the write
lock already released) asks a checkpoint thread, on its own connection, for a PASSIVE
checkpoint once the WAL holds `pages` pages. PASSIVE copies what no reader still needs and
never blocks a writer. The WAL starts over from its beginning (overwriting the same file
blocks, as with the automatic checkpoint) only at a write after a checkpoint that copied
all of it, and commits go on while the thread copies: so the commit after the thread's
checkpoint copies the few frames committed meanwhile itself, completing it (the bulk of
the copy and its sync of the database file stay off the commit path). Asked again instead,
the thread would chase the commits, two syncs each time.

The WAL stays bounded as before: should the thread fall behind (a long checkpoint, a slow
disk), a commit that finds the WAL at `limit` pages checkpoints on its own thread, as
SQLite would have. Ordering is SQLite's: a checkpoint syncs the WAL before it copies
frames into the database file, and the file before the WAL restarts, so a checkpoint
taken on another connection loses nothing a commit was told was durable.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

import apsw

from rota.application.errors import StoreError

PAGES = 1000  # SQLite's default wal_autocheckpoint
LIMIT_FACTOR = 8  # the writer checkpoints itself once the WAL is this many times larger
log = logging.getLogger("rota.sqlite")


class Checkpoints:
    """The checkpoint thread of one store's writer; see the module docstring.

    `connect` opens the thread's own connection (the store's, so it is closed with the
    store's others). The thread starts at the first request and stops at `close`."""

    def __init__(self, connect: Callable[[], apsw.Connection], *, pages: int = PAGES) -> None:
        self._connect = connect
        self.pages = pages
        self.limit = pages * LIMIT_FACTOR
        self._cond = threading.Condition(threading.Lock())
        self._wanted = False
        self._closed = False
        self._busy = False
        self._finish = False  # the thread's last checkpoint left frames for a commit to copy
        self._thread: threading.Thread | None = None
        self.runs = 0  # checkpoints the thread ran (tests and benchmarks read them)
        self.inline = 0  # checkpoints a commit ran itself (`limit`, or completing the thread's)
        self.wal_pages = 0  # the WAL's size in pages after the writer's last commit

    def attach(self, writer: apsw.Connection) -> None:
        """Take the writer's checkpoints over: its automatic checkpoint off, its WAL hook
        ours (setting a WAL hook replaces SQLite's automatic checkpoint)."""
        writer.wal_autocheckpoint(0)
        writer.set_wal_hook(self._committed)

    def _committed(self, conn: apsw.Connection, name: str, pages: int) -> int:
        # Called by SQLite after each commit of the writer, on the committing thread, while
        # the store's write lock is held: no commit of this store runs beside it.
        self.wal_pages = pages
        if pages >= self.limit or (self._finish and pages >= self.pages):
            # Over the limit, or the thread's checkpoint left the frames committed while it
            # ran: copying those few here completes it, and the next write restarts the WAL.
            self._finish = False
            self.inline += 1
            with contextlib.suppress(apsw.Error):
                conn.wal_checkpoint(name, apsw.SQLITE_CHECKPOINT_PASSIVE)
        elif pages >= self.pages:
            self.request()
        return apsw.SQLITE_OK

    def request(self) -> None:
        """Ask for a checkpoint soon (on the thread; returns at once)."""
        with self._cond:
            if self._closed or self._wanted or self._busy or self._finish:
                return  # one on its way, or one that a commit completes
            self._wanted = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="rota-checkpoints", daemon=True
                )
                self._thread.start()
            else:
                self._cond.notify()

    def wait_idle(self) -> None:
        """Return once no checkpoint is asked for or running (for tests)."""
        with self._cond:
            while (self._wanted or self._busy) and not self._closed:
                self._cond.wait()

    def _run(self) -> None:
        conn: apsw.Connection | None = None
        while True:
            with self._cond:
                while not self._wanted and not self._closed:
                    self._cond.wait()
                if self._closed:
                    self._cond.notify_all()
                    return
                self._wanted, self._busy = False, True
            try:
                if conn is None:
                    conn = self._connect()
                conn.wal_checkpoint(None, apsw.SQLITE_CHECKPOINT_PASSIVE)
                self.runs += 1
                # Commits went on while it copied, and the WAL restarts only once a
                # checkpoint copied all of it: the next commit copies the few frames left
                # (asked again here, a checkpoint would chase the commits, two syncs a time).
                self._finish = True
            except apsw.BusyError:
                pass  # another connection is checkpointing: the next request tries again
            except (apsw.Error, StoreError) as exc:  # the file's trouble: commits report it
                log.warning("a WAL checkpoint failed: %s", exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def close(self) -> None:
        """Stop the thread (a checkpoint in progress finishes first)."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
