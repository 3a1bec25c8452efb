"""Waiting for commits to the PostgreSQL log: LISTEN/NOTIFY, a silence watchdog, polling.

Appends `pg_notify` the schema's channel in their transaction. A waiter (`wait_for_commit`)
starts, on first use, a thread LISTENing on a dedicated connection, made like the pool's
(TCP keepalives, every wait bounded by the reply timeout) and checked like them: a server
in recovery or read-only is not listened to (its NOTIFYs never come: the demoted primary
a stale address still reaches). The thread sleeps on the connection's socket and wakes
the waiters once per burst of notifications; no timer runs while commits arrive.

A listener can go deaf without an error (pgbus PR #237, opal PR #946): a connection still
open to a demoted node, or half-open. So after `SILENCE` seconds without a notification the
thread sends its channel a probe from another session (the pool's, on the node that takes
writes now) and, heard nothing `ANSWER` seconds later, reconnects; the store also makes it
reconnect whenever it replaces its pool (`restart`). Meanwhile, and whenever the listener
is down or not yet proven (none of its notifications seen: behind a transaction-pooling
PgBouncer none ever arrive), waiters poll `max(position)`: every `poll_interval` seconds
while the listener is proven, every second while it is not, fast (5 ms doubling to 100 ms)
while none runs. A deaf LISTEN costs latency, never liveness. Local commits wake waiters
at once (`wake`); `wake_waiters` ends the waits in progress.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from rota.application.errors import StoreError
from rota.infrastructure.postgres.node_health import ReplyTimeoutConnection, session_check

UNPROVEN_POLL = 1.0  # a waiter's poll while LISTEN has not shown it delivers (seconds)
SILENCE = 5.0  # seconds without a notification before the watchdog probes the channel
ANSWER = 2.0  # seconds the probe has to arrive before the listener reconnects
WATCHDOG = "watchdog"  # a probe's payload: proves the listener, wakes no waiter
RETRY = 1.0  # seconds before a listener that failed to start is tried again


class Wakeups:
    """The commit generation, the waiters and the LISTEN thread of one store (see the
    module docstring). `notify(payload)` sends the channel a NOTIFY from a pooled session;
    `head_position()` reads the log's head; `closed()` says the store closed."""

    def __init__(
        self,
        *,
        conninfo: str,
        channel: str,
        name: str,
        connect_timeout: float,
        poll_interval: float,
        connection_class: type[ReplyTimeoutConnection],
        notify: Callable[[str], None],
        head_position: Callable[[], int],
        closed: Callable[[], bool],
    ) -> None:
        self._conninfo, self._channel, self._name = conninfo, channel, name
        self._connect_timeout, self.poll_interval = connect_timeout, poll_interval
        self._connection_class = connection_class
        self._notify, self._head_position, self._closed = notify, head_position, closed
        self._lock = threading.Lock()
        self.commit = threading.Condition()
        self.generation, self._interrupts = 0, 0
        self._closing = os.pipe()  # written on close: ends the listener's sleep
        self._restart = os.pipe()  # written by `restart`: the listener reconnects
        os.set_blocking(self._restart[0], False)
        self.listener: threading.Thread | None = None
        self.listening, self._retry_at = threading.Event(), 0.0
        # The LISTEN connection has received a notification (its own probe at least): it
        # works, so a waiter may poll slowly and `nothing_after` may trust the generation.
        self.proven = threading.Event()
        self.reconnects = 0  # listeners ended by the watchdog or `restart`

    def wake(self) -> None:
        with self.commit:
            self.generation += 1
            self.commit.notify_all()

    def wake_waiters(self) -> None:
        with self.commit:
            self._interrupts += 1
            self.commit.notify_all()

    def restart(self) -> None:
        """Make the listener reconnect (the store replaced its pool: a new node)."""
        with contextlib.suppress(OSError):
            os.write(self._restart[1], b"r")
        self._retry_at = 0.0

    def listen(self) -> None:
        """Start the LISTEN thread unless it runs (or failed less than `RETRY` s ago)."""
        with self._lock:
            if self.listening.is_set() or time.monotonic() < self._retry_at or self._closed():
                return
            try:
                conn = self._connection_class.connect(
                    self._conninfo,
                    autocommit=True,
                    connect_timeout=max(2, round(self._connect_timeout)),
                    keepalives=1,
                    keepalives_idle=10,
                    keepalives_interval=5,
                    keepalives_count=3,
                )
                if session_check(conn):  # a replica or a demoted primary: never notified
                    conn.close()
                    raise psycopg.OperationalError("the server takes no writes")
                conn.execute(f'LISTEN "{self._channel}"')
            except psycopg.Error:
                self._retry_at = time.monotonic() + RETRY
                return
            with contextlib.suppress(OSError):  # a restart asked before this listener
                os.read(self._restart[0], 512)
            self.listening.set()
            self.listener = threading.Thread(
                target=self._loop, args=(conn,), name=f"rota-listen-{self._name}", daemon=True
            )
            self.listener.start()
            # A probe from another session proves notifications arrive (`proven`, set by
            # the loop); psycopg would consume one sent on the LISTEN connection itself.
            with contextlib.suppress(psycopg.Error, StoreError):
                self._notify("listening")

    def _loop(self, conn: psycopg.Connection[Any]) -> None:
        """Sleep on the LISTEN connection's socket (and the close and restart pipes) until
        a NOTIFY arrives; wake the waiters once per burst; probe after a silence."""
        pgconn = conn.pgconn
        probed_at: float | None = None
        try:
            while True:
                wait = SILENCE if probed_at is None else ANSWER
                watched = [pgconn.socket, self._closing[0], self._restart[0]]
                ready, _, _ = select.select(watched, [], [], wait)
                if self._closed():
                    break
                if self._restart[0] in ready:
                    raise psycopg.OperationalError("the store reconnects: listen again")
                if not ready:
                    if probed_at is not None:
                        raise psycopg.OperationalError("the probe never arrived: deaf")
                    probed_at = time.monotonic()
                    with contextlib.suppress(psycopg.Error, StoreError):
                        self._notify(WATCHDOG)
                    continue
                pgconn.consume_input()
                heard, woke = False, False
                while (notice := pgconn.notifies()) is not None:
                    heard = True
                    woke = woke or notice.extra != WATCHDOG.encode()
                if heard:
                    probed_at = None
                    self.proven.set()
                    if woke:
                        self.wake()
                elif pgconn.status != psycopg.pq.ConnStatus.OK:
                    raise psycopg.OperationalError("the LISTEN connection was lost")
        except (psycopg.Error, OSError):
            self.reconnects += 1
        finally:
            self.proven.clear()
            self.listening.clear()
            with contextlib.suppress(psycopg.Error):
                conn.close()
            self.wake()  # waiters fall back to polling until a listener runs again

    def wait_for_commit(self, after: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        self.listen()
        fallback = 0.005
        with self.commit:
            interrupts = self._interrupts
        while True:
            with self.commit:
                generation = self.generation
            if self._head_position() > after:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if not self.listening.is_set():
                self.listen()  # (re)LISTEN as soon as it may: after a reconnect, at once
            if self.proven.is_set():
                step = self.poll_interval
            elif self.listening.is_set():  # no notification seen yet: LISTEN may not work
                step = min(self.poll_interval, UNPROVEN_POLL)
            else:
                step, fallback = fallback, min(fallback * 2, 0.1)
            with self.commit:
                if self._interrupts != interrupts:
                    return False
                if self.generation == generation:
                    self.commit.wait(min(step, remaining))
                if self._interrupts != interrupts:
                    return False

    def close(self, forked: bool) -> None:
        """Stop the listener (not in a forked child: the parent's socket) and wake all."""
        self.wake_waiters()
        self.wake()
        if forked:
            self._close_pipes()
            return
        with contextlib.suppress(OSError):
            os.write(self._closing[1], b"x")

    def join(self) -> None:
        listener = self.listener
        if listener is not None and listener is not threading.current_thread():
            listener.join(timeout=2.0)
        if listener is None or not listener.is_alive():
            self._close_pipes()

    def _close_pipes(self) -> None:
        for fd in (*self._closing, *self._restart):
            with contextlib.suppress(OSError):
                os.close(fd)
