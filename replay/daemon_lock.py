"""The daemon lock: `rota run` holds it shared and `rota recover-corrupt` exclusively.

A daemon holds its store's lock shared for its lifetime (racing daemons share it);
recover-corrupt takes it exclusively, so it is refused (`StoreBusy`) while any daemon runs,
and no daemon starts while it works. The store's backend says which lock is its own
(`Backend.daemon_lock`: the flock `<log>.lock` beside an SQLite log, one kept in memory for
`memory://`, none on PostgreSQL); `held_by_another` probes a lock file without creating it.
"""

from __future__ import annotations

import os

from rota.application.ports import EventStore
from rota.domain.errors import RotaError
from rota.infrastructure.backend import StoreLock
from rota.infrastructure.sqlite.locks import FileDaemonLock, held_by_another
from rota.infrastructure.store_url import backend
from rota.replay.errors import ReplayCode


class StoreBusy(RotaError):
    code = ReplayCode.STORE_BUSY


class DaemonLock:
    """The daemon lock of a store (`<log>.lock`, an flock, when given a path): `rota run`
    holds it shared for its lifetime (racing daemons share it), recover-corrupt
    exclusively (refused while any daemon holds it). A file lock dies with the process;
    the file stays (removing it would race)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        exclusive: bool = False,
        lock: StoreLock | None = None,
    ) -> None:
        if lock is None and path is not None:
            lock = FileDaemonLock(path, exclusive=exclusive)
        self.lock = lock
        self.path = lock.path if isinstance(lock, FileDaemonLock) else None
        self.exclusive = exclusive

    @classmethod
    def for_store(
        cls, store: EventStore | str | os.PathLike[str], *, exclusive: bool = False
    ) -> DaemonLock:
        """The lock of a store (an opened store or its URL); a no-op one where the store's
        backend has none (PostgreSQL)."""
        url = store.url if isinstance(store, EventStore) else os.fspath(store)
        return cls(lock=backend(url).daemon_lock(exclusive=exclusive), exclusive=exclusive)

    def acquire(self) -> DaemonLock:
        if self.lock is None:
            return self
        try:
            taken = self.lock.acquire()
        except OSError as exc:  # a symlink planted there, a read-only directory ...
            raise StoreBusy(
                f"cannot open the lock file {self.lock.where}: {exc.strerror}"
            ) from None
        if not taken:
            if self.exclusive:
                raise StoreBusy(f"a daemon holds {self.lock.where}: stop 'rota run' first")
            raise StoreBusy(
                f"recover-corrupt holds {self.lock.where}: wait for it to finish, then start again"
            )
        return self

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def __enter__(self) -> DaemonLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


__all__ = ["DaemonLock", "StoreBusy", "held_by_another"]
