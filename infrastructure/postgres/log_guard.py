"""A PostgreSQL store's guard against writing on a log that lost events after a failover.

What the store knows its log held (`KnownHeads`: read, written, or pinned from a
checkpoint) is compared with the server's log on every new connection (`check`, run by the
pool's configure step, before the connection is used), under the head lock of every append
(`admit`: a connection made before something newer was seen elsewhere), and before every
read and write while the log is known to lack it (`refuse`, which checks again at most
once a second, so a restored log lets the store go on). See `rota.infrastructure.
log_regression` for the judgement and what it cannot see.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from rota.application.errors import LogRegressed
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.log_regression import KnownHeads, Regression, judge


class LogGuard:
    """A store's guard against writing on a log that lost events (see the module docstring):
    `check` a connection's server, `admit` a write's locked head, `refuse` while regressed."""

    def __init__(self, events_table: str, where: str) -> None:
        self.known = KnownHeads()
        self.regression: Regression | None = None
        self._where = where  # the schema, for messages
        self._recheck_at = 0.0
        self._table = events_table
        self._head_sql = (
            f"SELECT h.position, h.hash, (SELECT hash FROM {events_table} WHERE position = %s) "
            f"FROM (SELECT position, hash FROM {events_table} ORDER BY position DESC LIMIT 1) h"
        )

    def check(self, conn: psycopg.Connection[Any]) -> Regression | None:
        """Compare the log on `conn`'s server with what is known; remember the verdict."""
        known = self.known.copy()  # before the read: see `KnownHeads.copy`
        if known.empty:
            return None
        points = known.points()
        newest = points[-1][0] if points else 0
        row = conn.execute(self._head_sql, (newest,)).fetchone()
        head, head_hash, at_newest = (0, GENESIS_HEX, None) if row is None else row
        sql = f"SELECT hash FROM {self._table} WHERE position = %s"

        def hash_at(position: int) -> str | None:
            if position == newest:
                return str(at_newest) if at_newest is not None else None
            found = conn.execute(sql, (position,)).fetchone()
            return None if found is None else str(found[0])

        self.regression = judge(int(head), str(head_hash), hash_at, known)
        return self.regression

    def admit(self, conn: psycopg.Connection[Any], position: int, hash_hex: str) -> None:
        """Raise `LogRegressed` (the transaction is rolled back) unless the head a write
        locked (`position`, `hash_hex`) holds what is known: a server reached before what
        was seen elsewhere was (the check at its connection passed) is caught here."""
        known = self.known.hash_at(position)
        fine = position >= self.known.position and known in (None, hash_hex)
        if fine and self.regression is None:
            return
        if self.check(conn) is not None:
            raise self.error()

    def refuse(self, recheck: Callable[[], object]) -> None:
        """Raise `LogRegressed` while regressed; `recheck` (at most once a second) checks
        again on a pooled connection: a restored log lets the store go on."""
        if self.regression is None:
            return
        if time.monotonic() >= self._recheck_at:
            self._recheck_at = time.monotonic() + 1.0
            recheck()
            if not self.regressed():
                return
        raise self.error()

    def regressed(self) -> bool:
        return self.regression is not None

    def error(self) -> LogRegressed:
        found = self.regression
        assert found is not None
        return LogRegressed(
            f"{self.reason()}; {found.advice()}",
            head=found.head,
            missing=found.missing,
            fork_after=found.fork_after,
        )

    def reason(self) -> str:
        found = self.regression
        assert found is not None
        return f"schema {self._where!r}: {found.describe()}"
