"""The log as this process knows it held, and the judgement that the server's log lost some.

A failover to a replica that had not received the last commits (asynchronous replication)
gives rota a log that ends early: a perfectly valid chain, without events that clients were
told had been recorded. Written on, it would give new events the lost positions (a fork).
So every store remembers what it has seen of its log (`KnownHeads`): the highest position
it read or wrote, the hashes of the last heads it wrote or read, and the heads recorded
outside the database (the newest signed checkpoint, `pin`). On every new connection, and
whenever asked, it compares them with the server's log (`judge`): a head below what was
seen, or another hash at a known position, is a `Regression`, and the store refuses to
write (`log_regressed`) until the log holds them again. Nothing here writes.

What it cannot see: events acknowledged to a process that has gone since, that no other
process read and no checkpoint covers. Synchronous replication is what prevents the loss
(docs/postgresql.md, "Failover"); this is what detects it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from rota.application.errors import LogRegressed
from rota.infrastructure.chain import GENESIS_HEX

KEEP = 256  # hashes of recent heads kept (a fork point is found exactly within them)
GUIDE = 'docs/postgresql.md, "When a failover lost events"'


class KnownHeads:
    """What this process knows the log held (see the module docstring). Thread-safe."""

    def __init__(self, keep: int = KEEP) -> None:
        self._lock = threading.Lock()
        self.position = 0  # the highest position seen: read, written, or pinned
        self._keep = keep
        self._recent: dict[int, str] = {}  # position -> hash, oldest first
        self._pinned: dict[int, str] = {}  # from outside the database (checkpoints)

    def saw(self, position: int, hash_hex: str | None = None) -> None:
        """The log held `position` (with `hash_hex`, when known)."""
        with self._lock:
            self.position = max(self.position, position)
            if hash_hex is not None and position not in self._recent and position > 0:
                self._recent[position] = hash_hex
                if len(self._recent) > self._keep:
                    del self._recent[next(iter(self._recent))]

    def pin(self, position: int, hash_hex: str) -> None:
        """The log held `hash_hex` at `position`, as recorded outside it (a checkpoint)."""
        with self._lock:
            if position > 0:
                self._pinned[position] = hash_hex
            self.position = max(self.position, position)

    def points(self) -> list[tuple[int, str]]:
        """Every known (position, hash), by position (a pinned hash wins a tie)."""
        with self._lock:
            return sorted({**self._recent, **self._pinned}.items())

    def hash_at(self, position: int) -> str | None:
        with self._lock:
            return self._pinned.get(position) or self._recent.get(position)

    @property
    def empty(self) -> bool:
        return self.position == 0


@dataclass(frozen=True)
class Regression:
    """The server's log (`head`) lacks what was seen up to position `seen`: it ends early,
    or (`fork_after` set) holds other events after position `fork_after`, the last one
    known to agree; `differs` is the lowest known position whose hash differs."""

    head: int
    seen: int
    fork_after: int | None = None
    differs: int | None = None

    @property
    def missing(self) -> tuple[int, int]:
        """The first and last positions of the recorded log the server's log lacks."""
        first = self.head + 1 if self.fork_after is None else self.fork_after + 1
        return first, self.seen

    def describe(self, source: str = "what this process saw or a checkpoint recorded") -> str:
        first, last = self.missing
        count = last - first + 1
        if self.fork_after is None:
            return (
                f"the log ends at position {self.head}, but {source} reaches position {last}: "
                f"positions {first}..{last} ({count} events, acknowledged when they were "
                "recorded) are missing"
            )
        where = (
            f"from position {self.differs}"
            if self.differs == self.fork_after + 1
            else f"at a position in {self.fork_after + 1}..{self.differs}"
        )
        written = (
            f"; its positions {self.fork_after + 1}..{self.head} were written after they were lost"
            if self.head > self.fork_after
            else ""
        )
        return (
            f"the log holds other events than {source} {where} on (it agrees up to position "
            f"{self.fork_after}): positions {first}..{last} of the recorded log ({count} "
            f"events) are missing{written}"
        )

    def advice(self) -> str:
        first, _ = self.missing
        if self.fork_after is None:
            return (
                "a failover to a replica that lacked them (asynchronous replication) looks "
                "like this; rota writes nothing until the log holds them again. On the old "
                "primary, before pg_rewind or a new base backup (both discard them), start it "
                f"on its own and run 'rota --store OLD_URL export --from {self.head} --out "
                "tail.jsonl', then 'rota --store URL import --append tail.jsonl' "
                f"(or append them from an export that holds them); see {GUIDE}"
            )
        return (
            "events were written after the loss (by a process that knew nothing of the lost "
            "ones): stop every rota process on this store; the old primary (before pg_rewind) "
            f"still holds the acknowledged positions {first}.. and the events written since "
            f"must be reconciled by hand; rota writes nothing meanwhile; see {GUIDE}"
        )


def judge(
    head: int, head_hash: str, hash_at: Callable[[int], str | None], known: KnownHeads
) -> Regression | None:
    """Whether the server's log (head position and hash; `hash_at(p)` reads the hash at a
    position) lost anything `known` holds: None, or the `Regression`. One lookup when it
    did not (the newest known hash at or below the head); a binary search when it did."""
    seen = known.position
    points = [(p, h) for p, h in known.points() if p <= head]

    def agrees(index: int) -> bool:
        position, hash_hex = points[index]
        return (head_hash if position == head else hash_at(position)) == hash_hex

    if points and not agrees(len(points) - 1):
        low, high = -1, len(points) - 1  # points[low] agrees (-1: none known to), [high] not
        while high - low > 1:
            middle = (low + high) // 2
            if agrees(middle):
                low = middle
            else:
                high = middle
        fork_after = points[low][0] if low >= 0 else 0
        return Regression(head, seen, fork_after, points[high][0])
    if head < seen:
        return Regression(head, seen)
    return None


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
        if self.known.empty:
            return None
        points = self.known.points()
        newest = points[-1][0] if points else 0
        row = conn.execute(self._head_sql, (newest,)).fetchone()
        head, head_hash, at_newest = (0, GENESIS_HEX, None) if row is None else row
        sql = f"SELECT hash FROM {self._table} WHERE position = %s"

        def hash_at(position: int) -> str | None:
            if position == newest:
                return str(at_newest) if at_newest is not None else None
            found = conn.execute(sql, (position,)).fetchone()
            return None if found is None else str(found[0])

        self.regression = judge(int(head), str(head_hash), hash_at, self.known)
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
