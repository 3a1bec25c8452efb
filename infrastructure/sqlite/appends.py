"""Appending to the SQLite log: positions, versions and hashes, inside the write transaction.

Positions are assigned inside the store's write lock as head + 1, so they are gapless and
commit-ordered. Expected versions are checked against the streams as the transaction sees
them (`ConcurrencyConflict`), and a delivery identity already recorded answers with the
original event (`deliveries`). The writer keeps the log head and stream versions it last
saw (`head`, `versions`); the store makes it `forget` them whenever another connection may
have committed since, so they are trusted only while they are exact. Every insert also
keeps the Merkle tree (`tree.grow`, in the same transaction: nothing unless the append
completes a block of 256 leaves).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import apsw
import msgspec

from rota.application.errors import ConcurrencyConflict
from rota.application.ports import AppendResult, Clock, NewEvent, RawRecord, RecordedEvent
from rota.application.timestamps import format_timestamp
from rota.infrastructure.chain import GENESIS, check_continuation, link_event
from rota.infrastructure.codec import Codec
from rota.infrastructure.deliveries import match_deliveries
from rota.infrastructure.log_rows import (
    Row,
    chain_values,
    payload_of,
    prepared_rows,
    recorded_events,
)
from rota.infrastructure.sqlite.log_file import COLUMNS, INSERT
from rota.infrastructure.sqlite.tree import grow

T = TypeVar("T")


class Write(Protocol):
    """The store's write transaction (`SQLiteStore.write`)."""

    def __call__(self, body: Callable[[apsw.Cursor], T]) -> T: ...


class _Written:
    """A row this append wrote; made a `RecordedEvent` after the commit."""

    __slots__ = ("position", "recorded_at", "row")

    def __init__(self, position: int, row: Row, recorded_at: str) -> None:
        self.position = position
        self.row = row
        self.recorded_at = recorded_at

    def recorded(self, codec: Codec) -> RecordedEvent:
        return recorded_events(codec, [(self.position, self.row, self.recorded_at)])[0]


INSERT_ROWS = 32  # rows a multi-row INSERT of `_insert` writes (9 parameters each)
INSERT_MANY = INSERT + ", (?, ?, ?, ?, ?, ?, ?, ?, ?)" * (INSERT_ROWS - 1)


def _by_row(values: list[Any]) -> list[tuple[Any, ...]]:
    """A flat run of INSERT parameters cut into one tuple per row."""
    width = 9
    return [tuple(values[i : i + width]) for i in range(0, len(values), width)]


class LogAppends:
    """The appends of one SQLite log and the writer's caches; see the module docstring."""

    def __init__(
        self,
        write: Write,
        codec: Codec,
        clock: Clock,
        recorded: Callable[[Sequence[Any]], RecordedEvent],
    ) -> None:
        self.write = write
        self.codec = codec
        self.clock = clock
        self._recorded = recorded
        # Writer-side caches of the log head and stream versions. They are trusted only while
        # `PRAGMA data_version` shows no other connection committed since our last write.
        self.head: tuple[int, bytes] | None = None
        self.versions: dict[str, int] = {}
        # The hex hashes of the leaves of the Merkle tree's open block (positions after the
        # last multiple of 256 up to `head`), when known exactly (`tree.grow` reads them
        # otherwise): trusted exactly as long as `head`.
        self.block: list[str] | None = None

    def forget(self) -> None:
        self.head = None
        self.block = None
        self.versions.clear()

    def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int] | None = None
    ) -> AppendResult:
        expected = expected or {}
        if len(events) == 1 and expected.keys() <= {events[0].stream}:
            return self._append_one(events[0], expected)
        prepared = prepared_rows(self.codec, events)
        if not prepared and not expected:
            return AppendResult([], 0)
        result = self.write(lambda cursor: self._append_in(cursor, prepared, expected))
        # (position, row, recorded_at) each row written: returned as a read will see them.
        entries: list[Any] = result.recorded
        return AppendResult(recorded_events(self.codec, entries), result.written)

    def _append_one(self, new: NewEvent, expected: Mapping[str, int]) -> AppendResult:
        """Append one event whose only expectation, if any, is on its own stream.

        Many of the scheduler's writes are one event (a new Work, an input, a renewal). This
        does what the general path does with fewer Python objects, and skips two reads
        whenever the log's unique indexes can answer instead (see `_insert_one`).
        """
        tag, type_version, payload = self.codec.encode(new.event)
        row = Row(
            new.stream, None, tag, type_version, new.delivery_id, payload.decode(), payload,
            new.event,
        )  # fmt: skip
        want = expected.get(new.stream)

        def body(cursor: apsw.Cursor) -> AppendResult | _Written:
            written = self._insert_one(cursor, row, want)
            if written is not None:
                return written
            # Refused or undecided: the general path, in the same transaction, finds out
            # why (a duplicate delivery, a stale expected version) and answers as always.
            return self._append_in(cursor, [(new, row)], expected)

        result = self.write(body)
        if isinstance(result, _Written):
            return AppendResult([result.recorded(self.codec)], 1)
        recorded: Any = result.recorded[0]
        if type(recorded) is tuple:  # written by `_append_in`: (position, row, recorded_at)
            recorded = _Written(*recorded).recorded(self.codec)
        return AppendResult([recorded], result.written)

    def _insert_one(self, cursor: apsw.Cursor, row: Row, want: int | None) -> _Written | None:
        """Insert `row` optimistically; None (nothing written) when the general path must decide.

        Two reads are left to the unique indexes: the delivery identity (a duplicate makes the
        INSERT fail) and, when the caller expects a new stream (`want == 0`), the stream's
        version (an existing stream makes UNIQUE(stream, version) refuse version 1). A refused
        INSERT undoes only itself; the caller's transaction goes on, still empty.
        """
        if want == 0 and not self.versions.get(row.stream):
            version = 1
        else:
            current = self._stream_version(cursor, row.stream)
            if want is not None and want != current:
                return None
            version = current + 1
        row.version = version
        position, previous = self.head or self._read_head(cursor)
        position += 1
        recorded_at = format_timestamp(self.clock.now())
        stream, type_, delivery_id, data = row.stream, row.type, row.delivery_id, row.data
        digest = link_event(
            previous, position, stream, version, type_, row.type_version, delivery_id,
            recorded_at, payload_of(row),
        )  # fmt: skip
        values = (position, stream, version, type_, row.type_version, delivery_id, data)
        hex_digest = digest.hex()
        try:
            cursor.execute(INSERT, (*values, recorded_at, hex_digest))
        except apsw.ConstraintError:
            row.version = None
            return None
        block = self.block if self.head is not None else None
        if not position & 0xFF:  # a block of 256 leaves completes: the tree's nodes
            grow(cursor, position - 1, [hex_digest], block)
            self.block = []
        elif block is not None:
            block.append(hex_digest)
        self.head = (position, digest)
        self.versions[stream] = version
        return _Written(position, row, recorded_at)

    def _append_in(
        self,
        cursor: apsw.Cursor,
        prepared: list[tuple[NewEvent, Row]],
        expected: Mapping[str, int],
    ) -> AppendResult:
        ids = [new.delivery_id for new, _ in prepared if new.delivery_id is not None]
        recorded: Callable[[str], RecordedEvent | None]
        if len(ids) > 1:  # (a bulk submit: an input identity per Work) looked up at once
            recorded = self._deliveries(cursor, ids).get
        else:
            recorded = lambda delivery_id: self._delivery(cursor, delivery_id)  # noqa: E731
        deliveries = match_deliveries([new for new, _ in prepared], recorded)
        duplicates = deliveries.all_recorded()
        if duplicates is not None:
            return AppendResult(duplicates, 0)

        self._read_versions(cursor, [*expected, *[row.stream for _, row in prepared]])
        versions: dict[str, int] = {}
        cached = self.versions  # (read first here: one call less a stream)
        for stream, want in expected.items():
            actual = cached.get(stream)
            if actual is None:
                actual = self._stream_version(cursor, stream)
            if actual != want:
                raise ConcurrencyConflict(stream, want, actual)
            versions[stream] = actual
        every = deliveries.all_new()  # then each event is written, in order: no merging
        fresh: list[Row] = []
        for index, (_, row) in enumerate(prepared):
            if not every and not deliveries.is_new(index):
                continue
            current = versions.get(row.stream)
            if current is None:
                current = cached.get(row.stream)
            if current is None:
                current = self._stream_version(cursor, row.stream)
            row.version = versions[row.stream] = current + 1
            fresh.append(row)
        written = self._insert(cursor, fresh)
        self.versions.update(versions)  # what this append leaves each stream at
        if every:
            return AppendResult(written, len(fresh))  # type: ignore[arg-type]
        return AppendResult(deliveries.merge(written), len(fresh))  # type: ignore[arg-type]

    def _delivery(self, cursor: apsw.Cursor, delivery_id: str) -> RecordedEvent | None:
        """The event recorded under `delivery_id`, read inside the write transaction."""
        found = cursor.execute(
            f"SELECT {COLUMNS} FROM events WHERE delivery_id = ?", (delivery_id,)
        ).fetchone()
        return None if found is None else self._recorded(found)

    def _deliveries(self, cursor: apsw.Cursor, delivery_ids: list[str]) -> dict[str, RecordedEvent]:
        """The events recorded under any of `delivery_ids`, by identity, in one query."""
        rows = cursor.execute(
            f"SELECT {COLUMNS} FROM events WHERE delivery_id IN (SELECT value FROM json_each(?))",
            (msgspec.json.encode(delivery_ids).decode(),),
        ).fetchall()
        return {str(row[5]): self._recorded(row) for row in rows}

    def insert_rows(self, cursor: apsw.Cursor, rows: Sequence[Row]) -> list[tuple[int, Row, str]]:
        """Chain and insert rows whose versions are set; call inside `write`."""
        written = self._insert(cursor, rows)
        for row in rows:  # the caller sets versions without telling this cache
            self.versions.pop(row.stream, None)
        return written

    def _insert(self, cursor: apsw.Cursor, rows: Sequence[Row]) -> list[tuple[int, Row, str]]:
        """Chain and insert rows whose versions are set; (position, row, recorded_at) each."""
        if not rows:
            return []
        position, previous = self.head or self._read_head(cursor)
        recorded_at = format_timestamp(self.clock.now())
        values, digest = chain_values(rows, position, previous, recorded_at)
        # Whole chunks of INSERT_ROWS rows go in one statement each (one statement step and
        # bind per chunk, not per row); the rest row by row.
        width = INSERT_ROWS * 9
        whole = len(values) - len(values) % width
        for start in range(0, whole, width):
            cursor.execute(INSERT_MANY, values[start : start + width])
        if whole < len(values):
            cursor.executemany(INSERT, _by_row(values[whole:]))
        leaves: list[str] = values[8::9]
        block, end = self.block, position + len(rows)
        if position >> 8 != end >> 8:  # a block of 256 leaves completes: the tree's nodes
            grow(cursor, position, leaves, block if self.head is not None else None)
            self.block = leaves[len(leaves) - (end & 0xFF) :] if end & 0xFF else []
        elif block is not None and self.head is not None:
            block.extend(leaves)
        self.head = (position + len(rows), digest)
        return [(position + index, row, recorded_at) for index, row in enumerate(rows, 1)]

    def _read_head(self, cursor: apsw.Cursor) -> tuple[int, bytes]:
        """The log's last (position, hash), read inside the write transaction and cached
        (the tree's open block is not known then, unless the log is empty)."""
        head = cursor.execute(
            "SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"
        ).fetchone()
        self.head = (0, GENESIS) if head is None else (head[0], bytes.fromhex(head[1]))
        self.block = [] if head is None else None
        return self.head

    def append_raw(self, records: Sequence[RawRecord]) -> None:
        if records:
            self.write(lambda cursor: self._append_raw_in(cursor, records))

    def _append_raw_in(self, cursor: apsw.Cursor, records: Sequence[RawRecord]) -> None:
        head = cursor.execute(
            "SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"
        ).fetchone()
        check_continuation(
            0 if head is None else int(head[0]),
            None if head is None else str(head[1]),
            records,
        )
        values = [
            (
                r.position,
                r.stream,
                r.version,
                r.type,
                r.type_version,
                r.delivery_id,
                r.data,
                r.recorded_at,
                r.hash,
            )
            for r in records
        ]
        cursor.executemany(INSERT, values)
        grow(cursor, 0 if head is None else int(head[0]), [r.hash for r in records])
        # The writer caches (head, stream versions) do not know these rows.
        self.forget()

    def _read_versions(self, cursor: apsw.Cursor, streams: Sequence[str]) -> None:
        """Cache the versions of those of `streams` not cached, in one query when there
        are several (a bulk submit names hundreds of new streams)."""
        missing = set(streams).difference(self.versions)  # (in C: hundreds of streams)
        if len(missing) < 2:
            return
        rows = cursor.execute(
            "SELECT stream, max(version) FROM events "
            "WHERE stream IN (SELECT value FROM json_each(?)) GROUP BY stream",
            (msgspec.json.encode(sorted(missing)).decode(),),
        ).fetchall()
        found: dict[Any, Any] = dict(rows)  # type: ignore[arg-type]
        if len(self.versions) + len(missing) > 100_000:
            self.versions.clear()
        for stream in missing:
            self.versions[stream] = int(found.get(stream) or 0)

    def _stream_version(self, cursor: apsw.Cursor, stream: str) -> int:
        cached = self.versions.get(stream)
        if cached is not None:
            return cached
        row = cursor.execute(
            "SELECT max(version) FROM events WHERE stream = ?", (stream,)
        ).fetchone()
        version = int(row[0]) if row is not None and row[0] is not None else 0
        if len(self.versions) > 100_000:
            self.versions.clear()
        self.versions[stream] = version
        return version
