"""Commit nudges between the processes of one SQLite log: how a waiter learns of a commit.

A store that waits for commits (`listen`) binds a unix datagram socket and leaves a marker
file for it in the directory `<log>.wake/` beside the log. Every store pokes each socket
listed there but its own (a store wakes its own waiters itself) after it commits (`poke`:
one byte, non-blocking; a full buffer means a poke is already pending, so nothing is
lost). A poke refused because the socket's owner died removes its marker. On Linux the
sockets live in the abstract namespace (their names carry a digest of the log's path, so
a long path never hits the 108-byte socket path limit); elsewhere a socket file in the
directory is used when its path is short enough, and a waiter falls back to polling when
it cannot listen. Nothing but a wake-up byte is sent: a nudge from anyone only makes a
waiter look at the log's head, which is the authority.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS
# A directory's mtime this much older than the clock cannot be moved again to the same value
# (file systems stamp with a coarse clock: jiffies on Linux, 2 s on FAT).
_SETTLED_NS = 3_000_000_000


class Nudges:
    """The wake directory of one log: poke its listeners, or listen for pokes."""

    def __init__(self, log_path: Path) -> None:
        self.directory = Path(f"{log_path}.wake")
        self._digest = hashlib.sha256(os.fsencode(log_path)).hexdigest()[:20]
        self._abstract = sys.platform.startswith("linux")
        self._sender: socket.socket | None = None
        self._lock = threading.Lock()
        self._receiver: socket.socket | None = None
        self._marker: Path | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.received = 0  # bursts of pokes received (tests and benchmarks read it)
        # The directory's listing as of `_seen` (its inode and mtime), reused while they stay.
        self._seen: tuple[int, int] | None = None
        self._names: list[str] = []

    def _address(self, name: str) -> str | bytes:
        if self._abstract:
            return f"\0rota-wake-{self._digest}-{name}".encode()
        return str(self.directory / f"{name}.sock")

    # -- writers --------------------------------------------------------------------------

    def poke(self) -> None:
        """Tell every listener of this log that a commit happened (never raises)."""
        names = self._listeners()
        if not names:
            return
        own = self._marker.name if self._marker is not None else None
        with self._lock:
            if self._sender is None:
                try:
                    self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    self._sender.setblocking(False)
                except OSError:
                    return
            sender = self._sender
            for name in names:
                if name.endswith(".sock") or name == own:
                    continue  # a socket file, addressed through its marker; or our own
                    # listener, whose store wakes its waiters itself (`SQLiteStore._wake`)
                try:
                    sender.sendto(b"!", self._address(name))
                except BlockingIOError:
                    pass  # its buffer is full: a poke is already waiting to be read
                except OSError as exc:
                    if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                        self._remove(name)  # its owner is gone
            # anything else (permissions, a foreign file): that listener polls instead

    def _listeners(self) -> list[str]:
        """The directory's names: listed again only when its mtime moved (a stat costs a
        fraction of a listing, and a poke follows every commit). A listing is reused only
        when the mtime it saw was older than the granularity of directory timestamps: a
        marker added later then always moves it."""
        try:
            info = os.stat(self.directory)
        except OSError:
            self._seen = None
            return []  # nobody ever listened here (or we may not look): nothing to poke
        seen = (info.st_ino, info.st_mtime_ns)
        if seen == self._seen:
            return self._names
        try:
            listed = time.time_ns()
            names = os.listdir(self.directory)
        except OSError:
            self._seen = None
            return []
        settled = listed - info.st_mtime_ns > _SETTLED_NS
        self._seen, self._names = (seen if settled else None), names
        return names

    def _remove(self, name: str) -> None:
        self._seen = None
        with contextlib.suppress(OSError):
            (self.directory / name).unlink()
        if not self._abstract:
            with contextlib.suppress(OSError):
                (self.directory / f"{name}.sock").unlink()

    # -- waiters --------------------------------------------------------------------------

    def listen(self, on_poke: Callable[[], None]) -> bool:
        """Start receiving pokes (once); call `on_poke` for each burst. False: cannot."""
        with self._lock:
            if self._thread is not None:
                return True
            if self._closed:
                return False
            name = f"{os.getpid()}-{secrets.token_hex(6)}"
            address = self._address(name)
            if isinstance(address, str) and len(address) > MAX_SOCKET_PATH:
                return False
            try:
                self.directory.mkdir(exist_ok=True)
                receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                receiver.bind(address)
                marker = self.directory / name
                marker.touch()
            except OSError:
                return False
            self._receiver, self._marker = receiver, marker
            self._thread = threading.Thread(
                target=self._receive, args=(receiver, on_poke), name="rota-nudges", daemon=True
            )
            self._thread.start()
            return True

    def _receive(self, receiver: socket.socket, on_poke: Callable[[], None]) -> None:
        while True:
            try:
                receiver.recv(64)
                receiver.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    while receiver.recv(64):  # a burst of pokes is one wake-up
                        pass
                receiver.setblocking(True)
            except OSError:
                return  # closed
            if self._closed:
                return
            self.received += 1
            on_poke()

    def close(self) -> None:
        """Stop listening and remove this store's marker (idempotent)."""
        with self._lock:
            self._closed = True
            receiver, self._receiver = self._receiver, None
            marker, self._marker = self._marker, None
            sender, self._sender = self._sender, None
            thread = self._thread
        if marker is not None:
            self._remove(marker.name)
        for sock in (sender, receiver):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
