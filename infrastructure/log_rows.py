"""The rows an append hands to a log store before the log places them, and their chaining.

`Row` is one event encoded, before its position, time and hash are known; `chain_rows`
gives each row of an append its position and its hash, linked from the log's head (the
chain itself is `chain`'s), exactly as every store records them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rota.infrastructure.chain import canonical_envelope, link

# (position, stream, version, type, type_version, delivery_id): a recorded row's key columns.
RowKey = tuple[int, str, int, str, int, str | None]


class Row:
    """One event about to be written, before its position, time and hash are known."""

    __slots__ = ("data", "delivery_id", "stream", "type", "type_version", "version")

    def __init__(
        self,
        stream: str,
        version: int | None,
        type_: str,
        type_version: int,
        delivery_id: str | None,
        data: str | bytes,
    ) -> None:
        self.stream = stream
        self.version = version
        self.type = type_
        self.type_version = type_version
        self.delivery_id = delivery_id
        self.data = data


def chain_rows(
    rows: Sequence[Row], position: int, previous: bytes, recorded_at: str
) -> Iterator[tuple[Row, RowKey, bytes]]:
    """Each row (its version set) with its key, positioned after `position`, and its hash,
    chained from `previous` (the head's hash)."""
    for row in rows:
        position += 1
        assert row.version is not None
        key = (position, row.stream, row.version, row.type, row.type_version, row.delivery_id)
        previous = link(previous, canonical_envelope(*key, recorded_at, row.data))
        yield row, key, previous
