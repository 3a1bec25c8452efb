"""The in-memory log: the whole store contract, kept in this process's memory.

A `MemoryLog` is the log itself (its rows as `RawRecord`s, exactly as a durable store
records them, and the indexes on them); a `MemoryStore` is one handle on it, with its own
clock, as a connection is. Every handle opened on `memory://name` in one process shares
one `MemoryLog` (`memory.backend`); `memory://` alone is a fresh private log.

It keeps what the other stores keep: positions gapless and assigned under the log's one
lock (so commit-ordered), stream versions checked against `expected` (`ConcurrencyConflict`),
delivery identities (`match_deliveries`, the stores' one rule), the hash chain
(`chain_values`, as SQLite and PostgreSQL chain), recording times from the handle's clock,
`wait_for_commit` woken by every commit, the Merkle tree's stored nodes (`merkle`) updated
under the same lock as the rows they cover. Reads decode the stored payload, so a read (and an
append's answer, `recorded_events`) sees exactly what a replay of a durable log would.
Nothing outlives the process: it is for tests and simulations, not for keeping decisions.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from rota.application.errors import ConcurrencyConflict, StoreClosed
from rota.application.ports import (
    AppendResult,
    Clock,
    EventStore,
    LogHead,
    NewEvent,
    RawRecord,
    RecordedEvent,
    TreeHead,
)
from rota.application.timestamps import format_timestamp
from rota.infrastructure.chain import GENESIS, check_continuation
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.codec import DEFAULT_CODEC, Codec
from rota.infrastructure.deliveries import match_deliveries
from rota.infrastructure.log_rows import chain_values, prepared_rows, recorded_events
from rota.infrastructure.memory.projections import MemoryTables
from rota.infrastructure.merkle import Key, completed
from rota.infrastructure.tree_reads import TreeReads

WIDTH = 9  # the columns of one row as `chain_values` lays them out


class MemoryLog:
    """The rows of one in-memory log and their indexes, under one lock; beside them the
    store's projection tables and its daemon lock's holders (`memory.backend`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tables = MemoryTables()
        self.guard = threading.Lock()  # the daemon lock's holders, below
        self.shared = 0
        self.exclusive = False
        self.store_id = uuid.uuid4().hex
        self.importing: str | None = None  # an unfinished import's marker (`mark_import`)
        self.commit = threading.Condition(threading.Lock())
        self.rows: list[RawRecord] = []  # position p is rows[p - 1]
        self.streams: dict[str, list[int]] = {}  # stream -> positions, version v at [v - 1]
        self.deliveries: dict[str, int] = {}  # delivery identity -> position
        self.head_hash = GENESIS
        self.nodes: dict[Key, bytes] = {}  # the Merkle tree's stored nodes (`merkle`)

    def leaves(self, start: int, end: int) -> list[str]:
        return [r.hash for r in self.rows[start:end]]

    def stored(self, keys: Sequence[Key]) -> dict[Key, bytes]:
        return {k: self.nodes[k] for k in keys if k in self.nodes}

    def grow_tree(self, new_leaves: Sequence[str]) -> None:
        """Store the nodes that leaves about to be added complete (under `commit`)."""
        for level, index, digest in completed(len(self.rows), new_leaves, _Source(self)):
            self.nodes[(level, index)] = digest

    def add(self, record: RawRecord) -> None:
        """Keep one row (under `commit`, its position the next one)."""
        self.rows.append(record)
        self.streams.setdefault(record.stream, []).append(record.position)
        if record.delivery_id is not None:
            self.deliveries[record.delivery_id] = record.position


class _Source:
    """A `MemoryLog` as the tree's `merkle.NodeSource` (read under its lock)."""

    def __init__(self, log: MemoryLog) -> None:
        self.leaves = log.leaves
        self.nodes = log.stored


class MemoryStore(EventStore):
    """One handle on a `MemoryLog`; see the module docstring."""

    path: Path | None = None

    def __init__(
        self,
        log: MemoryLog,
        url: str,
        *,
        clock: Clock | None = None,
        codec: Codec = DEFAULT_CODEC,
    ) -> None:
        self.log = log
        self.url = url
        self.clock: Clock = clock or SystemClock()
        self.codec = codec
        self._closed = False
        self._interrupts = 0  # moves on `wake_waiters`: waits in progress return False

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed(f"the store {self.url} is closed")

    def reopened(self) -> MemoryStore:
        """Another handle on the same log (as another connection would be)."""
        return MemoryStore(self.log, self.url, clock=self.clock, codec=self.codec)

    @property
    def store_id(self) -> str:
        return self.log.store_id

    def unfinished_import(self) -> str | None:
        return self.log.importing

    def mark_import(self, marker: str | None) -> None:
        self._check()
        self.log.importing = marker

    # -- writing ---------------------------------------------------------------------------

    def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int] | None = None
    ) -> AppendResult:
        self._check()
        expected = expected or {}
        prepared = prepared_rows(self.codec, events)
        if not prepared and not expected:
            return AppendResult([], 0)
        log = self.log
        with log.commit:
            deliveries = match_deliveries([new for new, _ in prepared], self._delivery)
            duplicates = deliveries.all_recorded()
            if duplicates is not None:
                return AppendResult(duplicates, 0)
            versions: dict[str, int] = {}
            for stream, want in expected.items():
                actual = len(log.streams.get(stream, ()))
                if actual != want:
                    raise ConcurrencyConflict(stream, want, actual)
            fresh = []
            for index, (_, row) in enumerate(prepared):
                if not deliveries.is_new(index):
                    continue
                current = versions.get(row.stream)
                if current is None:
                    current = len(log.streams.get(row.stream, ()))
                row.version = versions[row.stream] = current + 1
                fresh.append(row)
            position = len(log.rows)
            recorded_at = format_timestamp(self.clock.now())
            values, log.head_hash = chain_values(fresh, position, log.head_hash, recorded_at)
            log.grow_tree(values[WIDTH - 1 :: WIDTH])
            for start in range(0, len(values), WIDTH):
                log.add(RawRecord(*values[start : start + WIDTH]))
            if fresh:
                log.commit.notify_all()
        written: list[Any] = [(position + i, row, recorded_at) for i, row in enumerate(fresh, 1)]
        entries = written if deliveries.all_new() else deliveries.merge(written)
        return AppendResult(recorded_events(self.codec, entries), len(fresh))

    def append_raw(self, records: Sequence[RawRecord]) -> None:
        self._check()
        if not records:
            return
        log = self.log
        with log.commit:
            head = log.rows[-1] if log.rows else None
            check_continuation(len(log.rows), None if head is None else head.hash, records)
            log.grow_tree([r.hash for r in records])
            for record in records:
                log.add(RawRecord(*(getattr(record, f) for f in RawRecord.__struct_fields__)))
            log.head_hash = bytes.fromhex(records[-1].hash)
            log.commit.notify_all()

    # -- the Merkle tree ---------------------------------------------------------------------

    def rewrite_payloads(self, rows: Sequence[tuple[int, bytes]]) -> int:
        self._check()
        with self.log.commit:
            for position, payload in rows:
                old = self.log.rows[position - 1]
                self.log.rows[position - 1] = msgspec.structs.replace(old, data=payload)
        return len(rows)

    def _tree(self) -> TreeReads:
        self._check()
        log = self.log
        return TreeReads(_Source(log), lambda: len(log.rows))

    def tree_head(self, size: int | None = None) -> TreeHead:
        with self.log.commit:
            return self._tree().tree_head(size)

    def inclusion_path(self, position: int, size: int) -> list[bytes]:
        with self.log.commit:
            return self._tree().inclusion_path(position, size)

    def consistency_path(self, old_size: int, new_size: int) -> list[bytes]:
        with self.log.commit:
            return self._tree().consistency_path(old_size, new_size)

    def tree_nodes(self, level: int, after: int = -1, limit: int = 1000) -> list[tuple[int, bytes]]:
        self._check()
        with self.log.commit:
            found = sorted((i, h) for (lv, i), h in self.log.nodes.items() if lv == level)
        return [(i, h) for i, h in found if i > after][:limit]

    # -- reading ---------------------------------------------------------------------------

    def _decoded(self, record: RawRecord) -> RecordedEvent:
        event = self.codec.decode(record.type, record.type_version, record.data, record.position)
        return RecordedEvent(
            record.position,
            record.stream,
            record.version,
            record.delivery_id,
            record.recorded_at,
            event,
        )

    def _delivery(self, delivery_id: str) -> RecordedEvent | None:
        """The event recorded under `delivery_id` (the caller holds the log's lock)."""
        position = self.log.deliveries.get(delivery_id)
        return None if position is None else self._decoded(self.log.rows[position - 1])

    def _slice(self, after: int, limit: int) -> list[RawRecord]:
        self._check()
        with self.log.commit:
            return self.log.rows[max(after, 0) : max(after, 0) + max(limit, 0)]

    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        return [self._decoded(r) for r in self._slice(after, limit)]

    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        return self._slice(after, limit)

    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        self._check()
        with self.log.commit:
            rows = self.log.rows
            found = [rows[p - 1] for p in self.log.streams.get(stream, [])[max(after, 0) :]]
        return [self._decoded(r) for r in found]

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        found: dict[str, list[RecordedEvent]] = {}
        for stream in streams:
            events = self.read_stream(stream)
            if events:
                found[stream] = events
        return found

    def read_prefix(
        self, prefix: str, after: int = 0, limit: int = 1000, upto: int | None = None
    ) -> list[RecordedEvent]:
        if not prefix:
            raise ValueError("read_prefix needs a non-empty prefix")
        self._check()
        with self.log.commit:
            rows = self.log.rows[max(after, 0) : upto]
        found: list[RawRecord] = []
        for record in rows:
            if record.stream.startswith(prefix):
                found.append(record)
                if len(found) >= limit:
                    break
        return [self._decoded(r) for r in found]

    def stream_version(self, stream: str) -> int:
        self._check()
        with self.log.commit:
            return len(self.log.streams.get(stream, ()))

    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        self._check()
        with self.log.commit:
            return self._delivery(delivery_id)

    def head(self) -> LogHead:
        self._check()
        with self.log.commit:
            return LogHead(len(self.log.rows), self.log.head_hash.hex())

    # -- waiting, time, closing -------------------------------------------------------------

    def wait_for_commit(self, after: int, timeout: float) -> bool:
        self._check()
        deadline = time.monotonic() + timeout
        with self.log.commit:
            seen = self._interrupts
            while len(self.log.rows) <= after:
                left = deadline - time.monotonic()
                if left <= 0 or self._interrupts != seen or self._closed:
                    return False
                self.log.commit.wait(left)
            return True

    def wake_waiters(self) -> None:
        with self.log.commit:
            self._interrupts += 1
            self.log.commit.notify_all()

    def now(self) -> datetime:
        return self.clock.now()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.wake_waiters()


__all__ = ["MemoryLog", "MemoryStore"]
