"""Reading the PostgreSQL log: events by position, stream and delivery identity; its head.

Reads take no locks and never block writers; each runs on a pooled connection through
`query` (transient failures retried, see `connections`). Rows of the current schema
version of their type are decoded by the codec's one typed decoder (as SQLite's are); any
other is upcast (`Codec.decode`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rota.application.ports import LogHead, RawRecord, RecordedEvent
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.codec import Codec
from rota.infrastructure.postgres.log_sql import EVENT, RAW, SCHEDULE_PREFIX


class RunQuery(Protocol):
    """A read on a pooled connection (`LogConnections.query`)."""

    def __call__(self, sql: str, params: Sequence[Any] = ...) -> list[Any]: ...


class LogReads:
    """The reads of the log in one schema (`events_table`) through `query`."""

    def __init__(self, query: RunQuery, codec: Codec, events_table: str) -> None:
        self._query = query
        self.codec = codec
        self.events_table = events_table

    def decode_rows(self, rows: list[Any]) -> list[RecordedEvent]:
        codec = self.codec
        current, fast, decode = codec.current, codec._decoder.decode, codec.decode
        out: list[RecordedEvent] = []
        append = out.append
        for p, s, v, t, tv, d, x, xb, at in rows:
            data = x if x is not None else bytes(xb)
            event: Any = None
            if current.get(t) == tv:  # the current schema: one typed decode (as SQLite's)
                try:
                    event = fast(data)
                except Exception:
                    event = None  # let `decode` name the position and the error
                else:
                    if event.__struct_config__.tag != t:
                        event = None
            if event is None:
                event = decode(t, tv, data, p)
            append(RecordedEvent(p, s, v, d, at, event))
        return out

    def events(self, where: str, params: Sequence[Any]) -> list[RecordedEvent]:
        sql = f"SELECT {EVENT} FROM {self.events_table} WHERE {where}"
        return self.decode_rows(self._query(sql, params))

    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        return self.events("position > %s ORDER BY position LIMIT %s", (after, limit))

    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        return self.events("stream = %s AND version > %s ORDER BY version", (stream, after))

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        """Several streams in one round trip (the (stream, version) index, per stream)."""
        found: dict[str, list[RecordedEvent]] = {}
        if streams:
            for r in self.events("stream = ANY(%s) ORDER BY stream, version", (list(streams),)):
                found.setdefault(r.stream, []).append(r)
        return found

    def read_prefix(
        self, prefix: str, after: int = 0, limit: int = 1000, upto: int | None = None
    ) -> list[RecordedEvent]:
        """Streams starting with `prefix`, in position order (`starts_with`: exact whatever
        the database's collation; the server filters, nothing is decoded that is not asked
        for). A prefix within the schedule streams' reads their index (`SCHEDULE_PREFIX`)."""
        within = (
            f"starts_with(stream, '{SCHEDULE_PREFIX}') AND "
            if prefix.startswith(SCHEDULE_PREFIX)
            else ""
        )
        return self.events(
            f"{within}starts_with(stream, %s) AND position > %s AND position <= %s "
            "ORDER BY position LIMIT %s",
            (prefix, after, upto if upto is not None else 2**62, limit),
        )

    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        found = self.events("delivery_id = %s", (delivery_id,))
        return found[0] if found else None

    def stream_version(self, stream: str) -> int:
        sql = f"SELECT max(version) FROM {self.events_table} WHERE stream = %s"
        return int(self._query(sql, (stream,))[0][0] or 0)

    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        sql = f"SELECT {RAW} FROM {self.events_table} WHERE position > %s ORDER BY position"
        return [
            RawRecord(p, s, v, t, tv, d, x if x is not None else bytes(xb), at, h)
            for p, s, v, t, tv, d, x, xb, at, h in self._query(f"{sql} LIMIT %s", (after, limit))
        ]

    def head(self) -> LogHead:
        sql = f"SELECT position, hash FROM {self.events_table} ORDER BY position DESC LIMIT 1"
        rows = self._query(sql)
        return LogHead(int(rows[0][0]), str(rows[0][1])) if rows else LogHead(0, GENESIS_HEX)

    def head_position(self) -> int:
        return int(self._query(f"SELECT max(position) FROM {self.events_table}")[0][0] or 0)
