"""`<log>.lock`: the flock `rota run` holds shared and `rota recover-corrupt` exclusively.

A daemon holds its store's lock shared for its lifetime (racing daemons share it);
recover-corrupt takes it exclusively, so it is refused (`StoreBusy`) while any daemon runs,
and no daemon starts while it works. `held_by_another` probes a lock without creating it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from rota.application.ports import EventStore
from rota.domain.errors import RotaError
from rota.infrastructure.sqlite.log_file import sqlite_path
from rota.infrastructure.store_url import is_postgres_url
from rota.replay.errors import ReplayCode


class StoreBusy(RotaError):
    code = ReplayCode.STORE_BUSY


class DaemonLock:
    """`<log>.lock`, an flock: `rota run` holds it shared for its lifetime (racing daemons
    share it), recover-corrupt exclusively (refused while any daemon holds it). The lock
    dies with the process; the file stays (removing it would race)."""

    def __init__(self, path: str | os.PathLike[str] | None, *, exclusive: bool = False) -> None:
        self.path = None if path is None else Path(path)
        self.exclusive = exclusive
        self._fd: int | None = None

    @classmethod
    def for_store(
        cls, store: EventStore | str | os.PathLike[str], *, exclusive: bool = False
    ) -> DaemonLock:
        """The lock of a store (an opened store or its URL); a no-op one for PostgreSQL."""
        if isinstance(store, EventStore):
            path = getattr(store, "path", None)
            return cls(None if path is None else f"{path}.lock", exclusive=exclusive)
        url = os.fspath(store)
        if is_postgres_url(url):
            return cls(None, exclusive=exclusive)
        return cls(f"{sqlite_path(url)}.lock", exclusive=exclusive)

    def acquire(self) -> DaemonLock:
        if self.path is None or self._fd is not None:
            return self
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:  # a symlink planted there, a read-only directory ...
            raise StoreBusy(f"cannot open the lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if self.exclusive:
                raise StoreBusy(f"a daemon holds {self.path}: stop 'rota run' first") from None
            raise StoreBusy(
                f"recover-corrupt holds {self.path}: wait for it to finish, then start again"
            ) from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None

    def __enter__(self) -> DaemonLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def held_by_another(path: str | os.PathLike[str]) -> bool:
    """Whether some open file holds the flock on `path` (never creates the file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # a symlink or an unreadable lock: treat as held
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the probe's lock
    return False
