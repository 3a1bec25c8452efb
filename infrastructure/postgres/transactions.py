"""One write transaction on the PostgreSQL log: the head lock, its reads, deferred statements.

Order: every append locks the `head` row (`SELECT ... FOR UPDATE`) first and keeps the lock
until it commits, assigning positions head + 1 ... under it. Appends are therefore
serialized and commit in position order: a reader that has seen position N has seen every
event at or below N (no reader can skip an event committed late with a lower position).
Reads take no locks and never block writers. An append takes two round trips: `BEGIN`, the
lock and the reads it decides on (stream versions, recorded delivery identities; run after
the lock is granted, so they see every earlier commit) in one simple-protocol query; then
INSERT and COMMIT, pipelined (see `Tx` for why the first is never a pipeline).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import psycopg

Query = tuple[str, Sequence[Any]]


class Tx:
    """One write transaction: its cursor, the log head once locked, whether it wrote.

    `prefetched` holds the rows of the queries `write(..., with_lock=...)` ran right after
    taking the lock (in the same round trip); `deferred` statements are sent with COMMIT.

    The lock's round trip is one simple-protocol query (`BEGIN; lock; reads`), never
    pipeline mode: after a pipeline, the server does not re-arm
    `idle_in_transaction_session_timeout` (seen on PostgreSQL 15 with psycopg 3.3), so a
    writer paused while holding the lock would keep it. Only INSERT + COMMIT, which end the
    transaction, are pipelined.
    """

    def __init__(
        self,
        cursor: psycopg.Cursor[Any],
        retrying: bool,
        lock: str,
        observe: Callable[[datetime], datetime],
    ) -> None:
        self.cursor = cursor
        self.retrying = retrying  # an earlier attempt may have committed (ack lost)
        self.wrote = False
        self.prefetched: list[list[Any]] = []
        self.deferred: list[Query] = []
        self._head: tuple[int, str, datetime] | None = None
        self._lock, self._observe = lock, observe  # the head lock's SQL; the database clock

    def head(self, begin: bool = False, also: Sequence[str] = ()) -> tuple[int, str, datetime]:
        """Lock the head row (once) and return (position, hash, database time after locking).

        With `begin`, the transaction begins first; `also` (statements without parameters:
        values inlined as literals) run after the lock is held, so each reads a snapshot
        taken after the lock was granted; their rows are kept in `prefetched`. All in one
        round trip.
        """
        if self._head is None:
            statements = ["BEGIN"] if begin else []
            statements += [self._lock, *also]
            cursor = self.cursor
            cursor.execute("; ".join(statements))
            if begin:
                cursor.nextset()
            row = cursor.fetchone()
            assert row is not None
            self._head = (int(row[0]), str(row[1]), row[2])
            self._observe(row[2])
            self.prefetched = []
            for _ in also:
                cursor.nextset()
                self.prefetched.append(cursor.fetchall())
        return self._head

    def wrote_up_to(self, position: int, hash_hex: str, when: datetime) -> None:
        """The rows this transaction inserted (or deferred) end at `position`, `hash_hex`."""
        self._head = (position, hash_hex, when)
        self.wrote = True

    def commit(self) -> None:
        """Send the deferred statements and COMMIT (one round trip)."""
        conn = self.cursor.connection
        if not self.deferred:
            conn.execute("COMMIT")
            return
        with conn.pipeline():
            for sql, params in self.deferred:
                self.cursor.execute(sql, params)
            self.cursor.execute("COMMIT")
