"""`<log>.lock`: the flock `rota run` holds shared and `rota recover-corrupt` exclusively.

A daemon holds its store's lock shared for its lifetime (racing daemons share it);
recover-corrupt takes it exclusively, so it is refused while any daemon runs, and no daemon
starts while it works. The lock dies with the process; the file stays (removing it would
race). `held_by_another` probes a lock file without creating it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class FileDaemonLock:
    """An flock on `path` (`StoreLock`): shared, or exclusive; `OSError` when the file
    cannot be opened (a symlink planted there, a read-only directory)."""

    def __init__(self, path: str | os.PathLike[str], *, exclusive: bool = False) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self.exclusive = exclusive
        self._fd: int | None = None

    def acquire(self) -> bool:
        if self._fd is not None:
            return True
        if not self.exclusive:
            # A daemon creates its store, folder and all (as submit does); recover-corrupt
            # (exclusive) never creates anything for a store that is not there.
            self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None

    def held_by_another(self) -> bool:
        return self._fd is None and held_by_another(self.path)


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


__all__ = ["FileDaemonLock", "held_by_another"]
