"""The rows an append hands to a log store before the log places them, and their chaining.

`Row` is one event encoded, before its position, time and hash are known; `chain_rows`
gives each row of an append its position and its hash, linked from the log's head (the
chain itself is `chain`'s), exactly as every store records them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rota.domain.events import Event
from rota.infrastructure.chain import link_event

# (position, stream, version, type, type_version, delivery_id): a recorded row's key columns.
RowKey = tuple[int, str, int, str, int, str | None]


class Row:
    """One event about to be written, before its position, time and hash are known."""

    __slots__ = (
        "data", "delivery_id", "event", "payload", "stream", "type", "type_version", "version",
    )  # fmt: skip

    def __init__(
        self,
        stream: str,
        version: int | None,
        type_: str,
        type_version: int,
        delivery_id: str | None,
        data: str | bytes,
        payload: bytes | None = None,
        event: Event | None = None,
    ) -> None:
        self.stream = stream
        self.version = version
        self.type = type_
        self.type_version = type_version
        self.delivery_id = delivery_id
        self.data = data
        # `data` as bytes, when the caller has them (the encoder's output): what the chain
        # hashes, so it is not encoded again.
        self.payload = payload
        # The event `data` encodes, when the caller has it: handed back by the append in
        # place of decoding `data` again, when it is canonical (`Codec.written`).
        self.event = event


def chain_rows(
    rows: Sequence[Row], position: int, previous: bytes, recorded_at: str
) -> Iterator[tuple[Row, RowKey, bytes]]:
    """Each row (its version set) with its key, positioned after `position`, and its hash,
    chained from `previous` (the head's hash)."""
    for row in rows:
        position += 1
        version = row.version
        assert version is not None
        stream, type_, type_version, delivery_id = (
            row.stream, row.type, row.type_version, row.delivery_id
        )  # fmt: skip
        payload = row.payload
        if payload is None:
            data = row.data
            payload = data.encode() if isinstance(data, str) else bytes(data)
        previous = link_event(
            previous, position, stream, version, type_, type_version, delivery_id,
            recorded_at, payload,
        )  # fmt: skip
        yield row, (position, stream, version, type_, type_version, delivery_id), previous
