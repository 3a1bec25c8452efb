"""A shell run's directory: creating it, finding it from recovery metadata, reading its
status and output tails back, testing its wrapper's lock, and removing it (on a thread of
the executor's own, `Cleaner`, once the host forgets the attempt).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import re
import secrets as random
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rota.application.errors import ExecutorError

RUN_FILES = ("input.json", "stdout", "stderr", "status.tmp", "status", "go", "abandoned")
ENDED_FILES = ("input.json", "stdout", "stderr", "go", "status")  # a run that ended cleanly
UNSAFE = re.compile(r"[^A-Za-z0-9._:@-]")  # each becomes "_" in a run directory's name


def run_prefix(execution_id: str) -> str:
    """How the names of an attempt's run directories begin: `<execution id, / as _>-e`."""
    return UNSAFE.sub("_", execution_id) + "-e"


def make_run(root: Path, execution_id: str, epoch: int, trusted: bool = False) -> Path:
    """A new run directory (0700) in `root`, which is created 0700 if missing and must be a
    directory of this user that no one else may write to. `trusted`: `root` passed that
    check before (no one else can have replaced a directory of ours that only we may
    write to), so it is not looked at again unless it is gone."""
    try:
        if not trusted:
            _check_root(root)
        directory = f"{root}/{run_prefix(execution_id)}{epoch}-{random.token_hex(4)}"
        try:
            os.mkdir(directory, 0o700)
        except FileNotFoundError:
            if not trusted:
                raise
            _check_root(root)  # removed meanwhile (a temporary-files cleaner): again
            os.mkdir(directory, 0o700)
        os.chmod(directory, 0o700)
    except OSError as error:
        raise ExecutorError(f"cannot create a run directory in {root}: {error}") from None
    return Path(directory)


def _check_root(root: Path) -> None:
    try:
        info = root.stat()
    except FileNotFoundError:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = root.stat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ExecutorError(f"runs_dir {root} must be a directory owned by this user")
    if info.st_mode & 0o022:
        raise ExecutorError(f"runs_dir {root} must not be writable by others")


def run_of(execution_id: str, metadata: dict[str, Any]) -> Path | None:
    """The run directory the metadata names, if it is an absolute one of this attempt."""
    run = metadata.get("run")
    if not isinstance(run, str) or "\0" in run or not os.path.isabs(run):
        return None
    path = Path(run)
    return path if path.name.startswith(run_prefix(execution_id)) else None


def read_status(directory: Path) -> int | None:
    """The exit code the wrapper recorded (-N: signal N); None while there is none."""
    try:
        fd = os.open(os.path.join(directory, "status"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return int(os.read(fd, 32))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def read_tail(path: str | os.PathLike[str], limit: int) -> bytes:
    """The last `limit` bytes of a file (b"" if it is missing); only those are read."""
    try:
        if os.stat(path).st_size == 0:
            return b""  # (most commands write nothing to one of their streams)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        offset = max(0, os.fstat(fd).st_size - limit)
        tail = b""
        while len(tail) < limit and (chunk := os.pread(fd, limit - len(tail), offset + len(tail))):
            tail += chunk
        return tail
    except OSError:
        return b""
    finally:
        os.close(fd)


def wrapper_alive(directory: Path) -> bool:
    """Whether a wrapper still holds the lock of the run directory (False if it is missing)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True  # held (or the lock cannot be tested: assume it is)
    finally:
        os.close(fd)  # releases the lock if this call took it
    return False


def held_back(directory: Path) -> bool | None:
    """Whether the wrapper of a run that waits for `go` never started its command and never
    will: True (it gave up, or it is gone and `go` never came), False (`go` came: it may have
    started) or None (it still waits)."""
    if (directory / "abandoned").exists():
        return True  # created after its last look for `go`: a final decision
    if (directory / "go").exists():
        return False
    if wrapper_alive(directory):
        return None
    return not (directory / "go").exists()  # looked at again: it may have come meanwhile


def remove_run(directory: Path, ended: bool = False) -> None:
    """Best effort: remove the files of a run (those it holds of RUN_FILES), then the
    directory. `ended`: a run whose result was reported, which holds ENDED_FILES (unlinked
    without listing the directory first; anything else there, listed after all)."""
    if ended:
        for name in ENDED_FILES:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
        try:
            os.rmdir(directory)
            return
        except OSError:
            pass
    try:
        names = [name for name in os.listdir(directory) if name in RUN_FILES]
    except OSError:
        names = list(RUN_FILES)
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))
    with contextlib.suppress(OSError):
        os.rmdir(directory)


log = logging.getLogger("rota.shell")


class Cleaner:
    """One thread that runs the executor's file-system cleanups (forgotten attempts' run
    directories) in the order they were handed over, so that `forget` never blocks the
    host's loop nor costs it a thread of its own per finished attempt."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def put(self, task: Callable[[], None]) -> None:
        """Run `task` on the cleaner's thread; at once here if the cleaner is closed."""
        with self._lock:
            if not self._closed:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._loop, name="rota-shell-cleaner", daemon=True
                    )
                    self._thread.start()
                self._tasks.put(task)
                return
        _run(task)

    def close(self, timeout: float) -> None:
        """Run what was handed over (waiting at most `timeout` seconds), then end; from now
        on `put` runs each task at once."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._tasks.put(None)
            thread.join(timeout)

    def _loop(self) -> None:
        while (task := self._tasks.get()) is not None:
            _run(task)


def _run(task: Callable[[], None]) -> None:
    try:
        task()
    except Exception:
        log.warning("a shell run cleanup failed", exc_info=True)
