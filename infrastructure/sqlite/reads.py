"""Reading the SQLite log: events by position, by stream and by delivery identity; its head.

Every read runs on the calling thread's own reader connection (`query`, which the store
gives), so reads never block the writer (WAL). Rows of the current schema version of their
type are decoded by the codec's one typed decoder; any other is upcast (`Codec.decode`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from rota.application.ports import LogHead, RawRecord, RecordedEvent
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.codec import Codec
from rota.infrastructure.sqlite.log_file import COLUMNS, SCHEDULE_RANGE

RunQuery = Callable[[str, tuple[Any, ...]], list[Any]]


class LogReads:
    """The reads of one SQLite log through `query`; see the module docstring."""

    def __init__(self, query: RunQuery, codec: Codec) -> None:
        self._query = query
        self.codec = codec

    def recorded(self, row: Sequence[Any]) -> RecordedEvent:
        position, stream, version, type_, type_version, delivery_id, data, recorded_at = row[:8]
        event = self.codec.decode(type_, type_version, data, position)
        return RecordedEvent(position, stream, version, delivery_id, recorded_at, event)

    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        rows = self._query(
            "SELECT position, stream, version, type, type_version, delivery_id, data, "
            "recorded_at FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (after, limit),
        )
        return self.decode_rows(rows)

    def decode_rows(self, rows: list[Any]) -> list[RecordedEvent]:
        codec = self.codec
        current = codec.current
        fast = codec._decoder.decode
        decode = codec.decode
        out: list[RecordedEvent] = []
        append = out.append
        for position, stream, version, type_, type_version, delivery_id, data, at in rows:
            if current.get(type_) == type_version:
                try:
                    event = fast(data)
                except Exception:
                    event = decode(type_, type_version, data, position)
                else:
                    if event.__struct_config__.tag != type_:
                        event = decode(type_, type_version, data, position)
            else:
                event = decode(type_, type_version, data, position)
            append(RecordedEvent(position, stream, version, delivery_id, at, event))
        return out

    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        rows = self._query(
            "SELECT position, stream, version, type, type_version, delivery_id, data, "
            "recorded_at FROM events WHERE stream = ? AND version > ? ORDER BY version",
            (stream, after),
        )
        return self.decode_rows(rows)

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        """Several streams in one query (the (stream, version) index, once per stream)."""
        found: dict[str, list[RecordedEvent]] = {}
        if not streams:
            return found
        rows = self._query(
            "SELECT position, stream, version, type, type_version, delivery_id, data, "
            "recorded_at FROM events WHERE stream IN (SELECT value FROM json_each(?)) "
            "ORDER BY stream, version",
            (msgspec.json.encode(list(streams)).decode(),),
        )
        for r in self.decode_rows(rows):
            found.setdefault(r.stream, []).append(r)
        return found

    def read_prefix(
        self, prefix: str, after: int = 0, limit: int = 1000, upto: int | None = None
    ) -> list[RecordedEvent]:
        """A range of stream names, in position order. A range within the schedule streams'
        (`SCHEDULE_RANGE`) reads their index (`events_schedules`: SQLite uses a partial index
        only when the query names its range in so many words); any other scans the log in
        position order, keeping the streams in the range."""
        end = prefix_end(prefix)
        low, high = SCHEDULE_RANGE
        within = (
            f"stream >= '{low}' AND stream < '{high}' AND " if low <= prefix < end <= high else ""
        )
        rows = self._query(
            "SELECT position, stream, version, type, type_version, delivery_id, data, "
            f"recorded_at FROM events WHERE {within}stream >= ? AND stream < ? AND position > ? "
            "AND position <= ? ORDER BY position LIMIT ?",
            (prefix, end, after, upto if upto is not None else 2**62, limit),
        )
        return self.decode_rows(rows)

    def stream_version(self, stream: str) -> int:
        rows = self._query("SELECT max(version) FROM events WHERE stream = ?", (stream,))
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        rows = self._query(
            f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (after, limit),
        )
        return [RawRecord(*row) for row in rows]

    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        rows = self._query(f"SELECT {COLUMNS} FROM events WHERE delivery_id = ?", (delivery_id,))
        return self.recorded(rows[0]) if rows else None

    def head(self) -> LogHead:
        rows = self._query("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1", ())
        if not rows:
            return LogHead(0, GENESIS_HEX)
        return LogHead(int(rows[0][0]), str(rows[0][1]))

    def head_position(self) -> int:
        rows = self._query("SELECT max(position) FROM events", ())
        return int(rows[0][0] or 0)


def prefix_end(prefix: str) -> str:
    """The first string after every string that starts with `prefix` (a range's end)."""
    if not prefix:
        raise ValueError("read_prefix needs a non-empty prefix")
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
