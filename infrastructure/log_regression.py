"""The log as a process knows it held, and the judgement that a log lost some of it.

A failover to a replica that had not received the last commits (asynchronous replication)
gives rota a log that ends early: a perfectly valid chain, without events that clients were
told had been recorded. Written on, it would give new events the lost positions (a fork).
So a PostgreSQL store remembers what it has seen of its log (`KnownHeads`): the highest
position it read or wrote, the hashes of the last heads it wrote or read, and the heads
recorded outside the database (the newest signed checkpoint, `pin`). On every new
connection, and whenever asked, it compares them with the server's log (`judge`): a head
below what was seen, or another hash at a known position, is a `Regression`, and the store
refuses to write (`log_regressed`) until the log holds them again
(`rota.infrastructure.postgres.log_guard`). `rota doctor` judges a log against its
checkpoints the same way (`rota.replay.regression`). Nothing here reads or writes.

What it cannot see: events acknowledged to a process that has gone since, that no other
process read and no checkpoint covers. Synchronous replication is what prevents the loss
(docs/postgresql.md, "Failover"); this is what detects it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

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

    def copy(self) -> KnownHeads:
        """What is known now, apart from what is learnt later: a check takes it BEFORE it
        reads the log (what a later commit teaches would otherwise look missing from a
        snapshot taken before that commit)."""
        with self._lock:
            copied = KnownHeads(self._keep)
            copied.position = self.position
            copied._recent, copied._pinned = dict(self._recent), dict(self._pinned)
            return copied

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

    def describe(self, source: str = "seen by this process or recorded in a checkpoint") -> str:
        """What is missing, in words; `source` says who knew of the missing positions."""
        first, last = self.missing
        count = last - first + 1
        if self.fork_after is None:
            return (
                f"the log ends at position {self.head}, but position {last} was {source}: "
                f"positions {first}..{last} ({count} events, each acknowledged when it was "
                "recorded) are missing"
            )
        where = (
            f"from position {self.differs} on"
            if self.differs == self.fork_after + 1
            else f"from a position in {self.fork_after + 1}..{self.differs} on"
        )
        written = (
            f"; its positions {self.fork_after + 1}..{self.head} were written after they were lost"
            if self.head > self.fork_after
            else ""
        )
        return (
            f"the log holds other events than those {source} {where} (it agrees up to "
            f"position {self.fork_after}): positions {first}..{last} of the recorded log "
            f"({count} events) are missing{written}"
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
