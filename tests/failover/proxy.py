"""A local TCP proxy the drills control: the stable address rota connects to, standing in for
the Patroni/HAProxy endpoint (or a cloud database's writer endpoint) in front of the nodes.

- `point(port)`: new connections go to that node; open ones stay where they are (the role
  flip without closed sockets of river#1225: Aurora moves its writer endpoint, it does not
  close the sockets already connected). `point(None)`: nothing behind the address (every
  new connection is closed at once, as a dead endpoint does).
- `cut()`: close every open connection (a switchover that drops its clients).
- `freeze()`: stop forwarding on every open connection while keeping its sockets open: the
  client sees its bytes accepted and never gets an answer (a half-open connection, a frozen
  server); the proxy notes when the client closes its end (it gave up), and `cut()` or
  `stop()` ends the rest. New connections are served normally.

One thread accepts; each connection has a thread of its own pumping both directions.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time

CHUNK = 65536


class Link:
    """One client connection and its upstream socket."""

    def __init__(self, client: socket.socket, upstream: socket.socket, target: int) -> None:
        self.client, self.upstream, self.target = client, upstream, target
        self.frozen = threading.Event()
        self.closed = threading.Event()
        self.given_up: float | None = None  # when the client closed a frozen link (monotonic)

    def pump(self) -> None:
        sockets = [self.client, self.upstream]
        try:
            while not self.closed.is_set():
                if self.frozen.is_set():
                    # Forward nothing, keep the sockets; notice only the client giving up.
                    # (what the client sends is swallowed: it never reaches the server)
                    ready, _, _ = select.select([self.client], [], [], 0.2)
                    if ready and not self.client.recv(CHUNK):
                        self.given_up = time.monotonic()
                        return
                    continue
                ready, _, _ = select.select(sockets, [], [], 0.2)
                for sock in ready:
                    data = sock.recv(CHUNK)
                    if not data:
                        return
                    other = self.upstream if sock is self.client else self.client
                    if self.frozen.is_set():
                        break  # frozen mid-read: swallowed (its reader waits for ever)
                    other.sendall(data)
        except OSError:
            return
        finally:
            self.close()

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                # RST rather than FIN: the peer learns at once that the connection is gone
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.close()


class Proxy:
    """127.0.0.1:`port` forwarding to 127.0.0.1:`target` (see the module docstring)."""

    def __init__(self, target: int | None) -> None:
        self._target = target
        self._lock = threading.Lock()
        self.links: list[Link] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="failover-proxy", daemon=True)
        self._thread.start()

    @property
    def target(self) -> int | None:
        return self._target

    def point(self, target: int | None) -> None:
        """New connections go to `target` (None: nowhere); open ones stay where they are."""
        with self._lock:
            self._target = target

    def open_links(self, target: int | None = None) -> int:
        """How many connections are open (to `target` only, if given)."""
        with self._lock:
            return sum(
                1
                for link in self.links
                if not link.closed.is_set() and (target is None or link.target == target)
            )

    def cut(self, target: int | None = None) -> int:
        """Close every open connection (to `target` only, if given); how many were open."""
        with self._lock:
            links = [
                link
                for link in self.links
                if not link.closed.is_set() and (target is None or link.target == target)
            ]
            self.links = [link for link in self.links if link not in links]
        for link in links:
            link.close()
        return len(links)

    def freeze(self) -> list[Link]:
        """Stop forwarding on every open connection, keeping its sockets (half-open); the
        links frozen (`Link.given_up`: when the client closed its end)."""
        with self._lock:
            links = [link for link in self.links if not link.closed.is_set()]
        for link in links:
            link.frozen.set()
        return links

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                target = self._target
                self.links = [link for link in self.links if not link.closed.is_set()]
            upstream = None
            if target is not None:
                try:
                    upstream = socket.create_connection(("127.0.0.1", target), timeout=5)
                    upstream.settimeout(None)
                except OSError:
                    upstream = None
            if upstream is None:
                with contextlib.suppress(OSError):
                    client.close()
                continue
            link = Link(client, upstream, target)
            with self._lock:
                self.links.append(link)
            threading.Thread(target=link.pump, name="failover-link", daemon=True).start()
